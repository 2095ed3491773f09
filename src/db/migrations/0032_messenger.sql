CREATE TABLE `messenger_drafts` (
	`id` text PRIMARY KEY NOT NULL,
	`project_id` text NOT NULL,
	`subject` text NOT NULL,
	`from_name` text,
	`from_address` text,
	`html` text,
	`rich_text_value` text,
	`template_id` text,
	`template_props` text,
	`recipients` text NOT NULL,
	`scheduled_at` integer,
	`is_timezone_scheduled` integer NOT NULL,
	`content_type` text NOT NULL,
	`status` text NOT NULL,
	`due_at` integer,
	`expanded_through` text,
	`unsubscribed_total` integer DEFAULT 0 NOT NULL,
	`last_error` text,
	`deleting` integer DEFAULT false NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `messenger_drafts_project_idx` ON `messenger_drafts` (`project_id`,`id`);--> statement-breakpoint
CREATE INDEX `messenger_drafts_due_idx` ON `messenger_drafts` (`status`,`due_at`);--> statement-breakpoint
CREATE INDEX `emails_messenger_status_idx` ON `emails` (`messenger_id`,`status`) WHERE messenger_id is not null;