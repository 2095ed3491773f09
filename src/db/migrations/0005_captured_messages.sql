CREATE TABLE `captured_messages` (
	`email_id` text PRIMARY KEY NOT NULL,
	`project_id` text NOT NULL,
	`mail_from` text NOT NULL,
	`rcpt_to` text NOT NULL,
	`raw` blob NOT NULL,
	`captured_at` integer NOT NULL,
	FOREIGN KEY (`email_id`) REFERENCES `emails`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `captured_messages_project_idx` ON `captured_messages` (`project_id`,`email_id`);