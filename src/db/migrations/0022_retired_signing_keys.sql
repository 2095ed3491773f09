-- A deleted domain's DKIM key, kept while mail accepted under it may still be queued (domains/service.ts remove).
CREATE TABLE `retired_signing_keys` (
	`project_id` text NOT NULL,
	`domain` text NOT NULL,
	`selector` text NOT NULL,
	`private_key` text NOT NULL,
	`mail_from_domain` text NOT NULL,
	`retired_at` integer NOT NULL,
	PRIMARY KEY(`project_id`, `domain`, `selector`),
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `retired_signing_keys_retired_at_idx` ON `retired_signing_keys` (`retired_at`);