CREATE TABLE `inbound_routes` (
	`id` text PRIMARY KEY NOT NULL,
	`project_id` text NOT NULL,
	`domain` text NOT NULL,
	`local_part` text NOT NULL,
	`response_mode` text NOT NULL,
	`is_enabled` integer NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `inbound_routes_address_idx` ON `inbound_routes` (`domain`,`local_part`);--> statement-breakpoint
CREATE INDEX `inbound_routes_project_idx` ON `inbound_routes` (`project_id`,`id`);--> statement-breakpoint
CREATE TABLE `received_emails` (
	`id` text PRIMARY KEY NOT NULL,
	`project_id` text NOT NULL,
	`inbound_route_id` text NOT NULL,
	`destination` text NOT NULL,
	`subject` text NOT NULL,
	`addresses` text NOT NULL,
	`text` text NOT NULL,
	`html` text,
	`attachments` text NOT NULL,
	`headers` text NOT NULL,
	`auth` text NOT NULL,
	`spam` text NOT NULL,
	`envelope` text NOT NULL,
	`raw` blob NOT NULL,
	`received_at` integer NOT NULL,
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `received_emails_project_idx` ON `received_emails` (`project_id`,`id`);