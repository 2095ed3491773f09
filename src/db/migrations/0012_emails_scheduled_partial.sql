DROP INDEX `emails_scheduled_idx`;--> statement-breakpoint
CREATE INDEX `emails_scheduled_due_idx` ON `emails` (`scheduled_at`) WHERE status = 'scheduled';