-- Custom SQL migration file, put your code below! --
-- Trigram indexing leaves the accept transaction (~55 µs per email inside the group commit): rows are
-- indexed in batches by src/emails/fts-indexer.ts, and emails_fts_watermark holds the last indexed
-- rowid. Search reads every row past the watermark directly, so results stay exact before indexing.
-- Every existing row was indexed by the old insert trigger: the watermark starts at the newest one.
CREATE TABLE `emails_fts_watermark` (`id` integer PRIMARY KEY NOT NULL CHECK (`id` = 1), `last_rowid` integer NOT NULL);
--> statement-breakpoint
INSERT INTO `emails_fts_watermark`(`id`, `last_rowid`) SELECT 1, coalesce(max(rowid), 0) FROM `emails`;
--> statement-breakpoint
DROP TRIGGER `emails_fts_after_insert`;
--> statement-breakpoint
DROP TRIGGER `emails_fts_after_delete`;
--> statement-breakpoint
DROP TRIGGER `emails_fts_after_update`;
--> statement-breakpoint
-- emails has no INTEGER PRIMARY KEY: deleting the newest row lets the next insert reuse its rowid, at
-- or below the watermark, where the indexer never looks. Only that rare insert is indexed here.
CREATE TRIGGER `emails_fts_after_insert` AFTER INSERT ON `emails`
WHEN new.rowid <= (SELECT `last_rowid` FROM `emails_fts_watermark` WHERE `id` = 1) BEGIN
  INSERT INTO `emails_fts`(rowid, to_address, from_address, from_name, subject) VALUES (new.rowid, new.to_address, new.from_address, new.from_name, new.subject);
END;
--> statement-breakpoint
-- An FTS5 'delete' of a row that was never indexed corrupts an external-content index: rows past the
-- watermark are skipped (the indexer reads their current content when it reaches them).
CREATE TRIGGER `emails_fts_after_delete` AFTER DELETE ON `emails`
WHEN old.rowid <= (SELECT `last_rowid` FROM `emails_fts_watermark` WHERE `id` = 1) BEGIN
  INSERT INTO `emails_fts`(`emails_fts`, rowid, to_address, from_address, from_name, subject) VALUES ('delete', old.rowid, old.to_address, old.from_address, old.from_name, old.subject);
END;
--> statement-breakpoint
CREATE TRIGGER `emails_fts_after_update` AFTER UPDATE OF to_address, from_address, from_name, subject ON `emails`
WHEN old.rowid <= (SELECT `last_rowid` FROM `emails_fts_watermark` WHERE `id` = 1) BEGIN
  INSERT INTO `emails_fts`(`emails_fts`, rowid, to_address, from_address, from_name, subject) VALUES ('delete', old.rowid, old.to_address, old.from_address, old.from_name, old.subject);
  INSERT INTO `emails_fts`(rowid, to_address, from_address, from_name, subject) VALUES (new.rowid, new.to_address, new.from_address, new.from_name, new.subject);
END;
