CREATE TABLE `contact_properties` (
	`project_id` text NOT NULL,
	`key_name` text NOT NULL,
	`data_type` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`project_id`, `key_name`),
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `contacts` (
	`id` text PRIMARY KEY NOT NULL,
	`project_id` text NOT NULL,
	`email_address` text NOT NULL,
	`email_key` text NOT NULL,
	`identifier` text,
	`is_subscribed` integer NOT NULL,
	`subscribed_at` integer,
	`unsubscribed_at` integer,
	`timezone` text,
	`source_type` text NOT NULL,
	`note` text,
	`groups` text NOT NULL,
	`custom_props` text NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `contacts_project_email_idx` ON `contacts` (`project_id`,`email_key`);--> statement-breakpoint
CREATE UNIQUE INDEX `contacts_project_identifier_idx` ON `contacts` (`project_id`,`identifier`);--> statement-breakpoint
CREATE INDEX `contacts_project_id_idx` ON `contacts` (`project_id`,`id`);