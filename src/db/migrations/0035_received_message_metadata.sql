-- A received message's headers and attachment list are stored once with it, not copied into each received
-- email (schema/inbound.ts): a 20 MB message to 100 recipients wrote 5 GB. Null for messages stored before.
ALTER TABLE `received_messages` ADD `headers` text;--> statement-breakpoint
ALTER TABLE `received_messages` ADD `attachments` text;