CREATE TABLE `templates` (
	`id` text PRIMARY KEY NOT NULL,
	`project_id` text NOT NULL,
	`name` text NOT NULL,
	`subject` text NOT NULL,
	`content` text NOT NULL,
	`email_text` text,
	`preheader` text,
	`sample_props` text,
	`layout_id` text,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `templates_project_name_idx` ON `templates` (`project_id`,`name`);--> statement-breakpoint
CREATE INDEX `templates_project_id_idx` ON `templates` (`project_id`,`id`);--> statement-breakpoint
CREATE TABLE `domains` (
	`id` text PRIMARY KEY NOT NULL,
	`project_id` text NOT NULL,
	`domain` text NOT NULL,
	`status` text NOT NULL,
	`dkim_selector` text NOT NULL,
	`dkim_private_key` text NOT NULL,
	`dkim_public_key` text NOT NULL,
	`dkim_verified` integer DEFAULT false NOT NULL,
	`mail_from_domain` text NOT NULL,
	`mail_from_status` text NOT NULL,
	`verification` text,
	`last_checked_at` integer,
	`verified_at` integer,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `domains_project_domain_idx` ON `domains` (`project_id`,`domain`);--> statement-breakpoint
CREATE TABLE `delivery_jobs` (
	`email_id` text PRIMARY KEY NOT NULL,
	`project_id` text NOT NULL,
	`recipient_domain` text NOT NULL,
	`next_attempt_at` integer NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`lease_until` integer,
	`queued_at` integer NOT NULL,
	FOREIGN KEY (`email_id`) REFERENCES `emails`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `delivery_jobs_due_idx` ON `delivery_jobs` (`next_attempt_at`);--> statement-breakpoint
CREATE TABLE `email_attachments` (
	`id` text PRIMARY KEY NOT NULL,
	`email_id` text NOT NULL,
	`name` text NOT NULL,
	`content_type` text NOT NULL,
	`size` integer NOT NULL,
	`content` blob NOT NULL,
	FOREIGN KEY (`email_id`) REFERENCES `emails`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `email_attachments_email_idx` ON `email_attachments` (`email_id`);--> statement-breakpoint
CREATE TABLE `email_events` (
	`id` text PRIMARY KEY NOT NULL,
	`email_id` text NOT NULL,
	`type` text NOT NULL,
	`time` integer NOT NULL,
	`ip_address` text,
	`user_agent` text,
	`data` text,
	FOREIGN KEY (`email_id`) REFERENCES `emails`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `email_events_email_idx` ON `email_events` (`email_id`,`time`);--> statement-breakpoint
CREATE TABLE `emails` (
	`id` text PRIMARY KEY NOT NULL,
	`project_id` text NOT NULL,
	`status` text NOT NULL,
	`to_address` text NOT NULL,
	`from_address` text NOT NULL,
	`from_name` text,
	`reply_to_address` text,
	`reply_to_name` text,
	`subject` text NOT NULL,
	`template_id` text,
	`template_name` text,
	`template_props` text,
	`automation_id` text,
	`messenger_id` text,
	`content_kind` text NOT NULL,
	`html` text,
	`text` text,
	`render_snapshot` text,
	`headers` text,
	`is_open_tracked` integer NOT NULL,
	`scheduled_at` integer,
	`message_id` text,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `emails_project_id_idx` ON `emails` (`project_id`,`id`);--> statement-breakpoint
CREATE INDEX `emails_project_to_idx` ON `emails` (`project_id`,`to_address`,`id`);--> statement-breakpoint
CREATE INDEX `emails_project_status_idx` ON `emails` (`project_id`,`status`,`id`);--> statement-breakpoint
CREATE INDEX `emails_scheduled_idx` ON `emails` (`status`,`scheduled_at`);--> statement-breakpoint
CREATE TABLE `suppressions` (
	`project_id` text NOT NULL,
	`email_address` text NOT NULL,
	`reason` text NOT NULL,
	`detail` text,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`project_id`, `email_address`),
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
