DROP INDEX `emails_project_scheduled_at_idx`;--> statement-breakpoint
CREATE INDEX `emails_project_scheduled_at_id_idx` ON `emails` (`project_id`,`scheduled_at`,`id`) WHERE scheduled_at is not null;