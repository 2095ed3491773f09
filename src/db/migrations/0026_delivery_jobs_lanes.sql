-- Claims take due jobs lane by lane (delivery/repo.ts claimDue): each project's single sends, and its bulk mail
-- (batches, scheduled releases). In one queue order, a password reset waited behind the whole newsletter.
DROP INDEX `delivery_jobs_due_idx`;--> statement-breakpoint
ALTER TABLE `delivery_jobs` ADD `bulk` integer DEFAULT false NOT NULL;--> statement-breakpoint
CREATE INDEX `delivery_jobs_lane_due_idx` ON `delivery_jobs` (`project_id`,`bulk`,`next_attempt_at`);