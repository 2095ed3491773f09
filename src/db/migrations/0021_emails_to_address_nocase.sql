-- Addresses are searched without case (toAddress: Ann@Example.com finds ann@example.com, as the suppression
-- list and the text search already do): the index holds to_address in NOCASE order under a new name.
DROP INDEX `emails_project_to_idx`;--> statement-breakpoint
CREATE INDEX `emails_project_to_nocase_idx` ON `emails` (`project_id`,"to_address" collate nocase,`id`);