CREATE TABLE `messenger_unsubscribes` (
	`draft_id` text NOT NULL,
	`contact_id` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`draft_id`, `contact_id`),
	FOREIGN KEY (`draft_id`) REFERENCES `messenger_drafts`(`id`) ON UPDATE no action ON DELETE cascade
);
