-- Custom SQL migration file, put your code below! --
-- Trigram full-text index over the fields the email search text-matches (spec §4.3: addresses, subject,
-- names). External content: the index stores no copy of the text, only trigrams keyed by emails.rowid;
-- triggers keep it in the same transaction as every insert, update and delete (cascades included).
CREATE VIRTUAL TABLE `emails_fts` USING fts5(to_address, from_address, from_name, subject, content='emails', content_rowid='rowid', tokenize='trigram');
--> statement-breakpoint
INSERT INTO `emails_fts`(`emails_fts`) VALUES ('rebuild');
--> statement-breakpoint
CREATE TRIGGER `emails_fts_after_insert` AFTER INSERT ON `emails` BEGIN
  INSERT INTO `emails_fts`(rowid, to_address, from_address, from_name, subject) VALUES (new.rowid, new.to_address, new.from_address, new.from_name, new.subject);
END;
--> statement-breakpoint
CREATE TRIGGER `emails_fts_after_delete` AFTER DELETE ON `emails` BEGIN
  INSERT INTO `emails_fts`(`emails_fts`, rowid, to_address, from_address, from_name, subject) VALUES ('delete', old.rowid, old.to_address, old.from_address, old.from_name, old.subject);
END;
--> statement-breakpoint
CREATE TRIGGER `emails_fts_after_update` AFTER UPDATE OF to_address, from_address, from_name, subject ON `emails` BEGIN
  INSERT INTO `emails_fts`(`emails_fts`, rowid, to_address, from_address, from_name, subject) VALUES ('delete', old.rowid, old.to_address, old.from_address, old.from_name, old.subject);
  INSERT INTO `emails_fts`(rowid, to_address, from_address, from_name, subject) VALUES (new.rowid, new.to_address, new.from_address, new.from_name, new.subject);
END;
