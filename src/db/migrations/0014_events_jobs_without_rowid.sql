-- email_events and delivery_jobs become WITHOUT ROWID tables (drizzle's schema cannot express it; the
-- snapshot only knows the new primary key of email_events). Events are read per email in time order,
-- which is now their primary key: one B-tree per event instead of three. delivery_jobs keeps its key
-- (email_id) and due index: two B-trees instead of three. Fewer pages written per accepted email.
PRAGMA foreign_keys=OFF;--> statement-breakpoint
CREATE TABLE `__new_email_events` (
	`id` text NOT NULL,
	`email_id` text NOT NULL,
	`type` text NOT NULL,
	`time` integer NOT NULL,
	`ip_address` text,
	`user_agent` text,
	`data` text,
	PRIMARY KEY(`email_id`, `time`, `id`),
	FOREIGN KEY (`email_id`) REFERENCES `emails`(`id`) ON UPDATE no action ON DELETE cascade
) WITHOUT ROWID;
--> statement-breakpoint
INSERT INTO `__new_email_events`("id", "email_id", "type", "time", "ip_address", "user_agent", "data") SELECT "id", "email_id", "type", "time", "ip_address", "user_agent", "data" FROM `email_events`;--> statement-breakpoint
DROP TABLE `email_events`;--> statement-breakpoint
ALTER TABLE `__new_email_events` RENAME TO `email_events`;--> statement-breakpoint
CREATE TABLE `__new_delivery_jobs` (
	`email_id` text PRIMARY KEY NOT NULL,
	`project_id` text NOT NULL,
	`recipient_domain` text NOT NULL,
	`next_attempt_at` integer NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`lease_until` integer,
	`queued_at` integer NOT NULL,
	FOREIGN KEY (`email_id`) REFERENCES `emails`(`id`) ON UPDATE no action ON DELETE cascade
) WITHOUT ROWID;
--> statement-breakpoint
INSERT INTO `__new_delivery_jobs`("email_id", "project_id", "recipient_domain", "next_attempt_at", "attempts", "lease_until", "queued_at") SELECT "email_id", "project_id", "recipient_domain", "next_attempt_at", "attempts", "lease_until", "queued_at" FROM `delivery_jobs`;--> statement-breakpoint
DROP TABLE `delivery_jobs`;--> statement-breakpoint
ALTER TABLE `__new_delivery_jobs` RENAME TO `delivery_jobs`;--> statement-breakpoint
CREATE INDEX `delivery_jobs_due_idx` ON `delivery_jobs` (`next_attempt_at`);--> statement-breakpoint
PRAGMA foreign_keys=ON;
