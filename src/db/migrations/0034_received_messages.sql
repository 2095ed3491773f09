-- A received message is stored once, however many recipients it had (schema/inbound.ts): its bytes and
-- bodies move to received_messages, and each received email names its message. Hand-written: SQLite
-- cannot add a NOT NULL column to rows that exist, so the table is rebuilt with their message ids.
CREATE TABLE `received_messages` (
	`id` text PRIMARY KEY NOT NULL,
	`raw` blob NOT NULL,
	`text` text NOT NULL,
	`html` text
);
--> statement-breakpoint
INSERT INTO `received_messages` (`id`, `raw`, `text`, `html`) SELECT `id`, `raw`, `text`, `html` FROM `received_emails`;
--> statement-breakpoint
CREATE TABLE `__new_received_emails` (
	`id` text PRIMARY KEY NOT NULL,
	`project_id` text NOT NULL,
	`inbound_route_id` text NOT NULL,
	`destination` text NOT NULL,
	`subject` text NOT NULL,
	`addresses` text NOT NULL,
	`message_id` text NOT NULL,
	`attachments` text NOT NULL,
	`headers` text NOT NULL,
	`auth` text NOT NULL,
	`spam` text NOT NULL,
	`envelope` text NOT NULL,
	`received_at` integer NOT NULL,
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`message_id`) REFERENCES `received_messages`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
INSERT INTO `__new_received_emails` (`id`, `project_id`, `inbound_route_id`, `destination`, `subject`, `addresses`, `message_id`, `attachments`, `headers`, `auth`, `spam`, `envelope`, `received_at`)
  SELECT `id`, `project_id`, `inbound_route_id`, `destination`, `subject`, `addresses`, `id`, `attachments`, `headers`, `auth`, `spam`, `envelope`, `received_at` FROM `received_emails`;
--> statement-breakpoint
DROP TABLE `received_emails`;
--> statement-breakpoint
ALTER TABLE `__new_received_emails` RENAME TO `received_emails`;
--> statement-breakpoint
CREATE INDEX `received_emails_project_idx` ON `received_emails` (`project_id`,`id`);
--> statement-breakpoint
CREATE INDEX `received_emails_message_idx` ON `received_emails` (`message_id`);
--> statement-breakpoint
-- Whatever deletes received emails (retention, a project's deletion, its cascade), the message goes with the last that names it.
CREATE TRIGGER `received_emails_message_gc` AFTER DELETE ON `received_emails`
WHEN NOT EXISTS (SELECT 1 FROM `received_emails` WHERE `message_id` = old.`message_id`)
BEGIN
	DELETE FROM `received_messages` WHERE `id` = old.`message_id`;
END;
