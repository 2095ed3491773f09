-- Outcome counts per project and UTC day for the suspension rule (schema/delivery.ts), filled from the
-- emails that finished in the last 8 days (the default window is 7), so a running pause carries over.
CREATE TABLE `project_sending_stats` (
	`project_id` text NOT NULL,
	`day` integer NOT NULL,
	`sent` integer DEFAULT 0 NOT NULL,
	`bounces` integer DEFAULT 0 NOT NULL,
	`complaints` integer DEFAULT 0 NOT NULL,
	PRIMARY KEY(`project_id`, `day`),
	FOREIGN KEY (`project_id`) REFERENCES `projects`(`id`) ON UPDATE no action ON DELETE cascade
) WITHOUT ROWID;
--> statement-breakpoint
INSERT INTO `project_sending_stats` (`project_id`, `day`, `sent`, `bounces`, `complaints`)
SELECT `project_id`, `updated_at` / 86400000, count(*), sum(`status` = 'bounce'), sum(`status` = 'complaint')
  FROM `emails`
 WHERE `status` IN ('delivered', 'open', 'bounce', 'complaint')
   AND `updated_at` >= (CAST(strftime('%s', 'now') AS INTEGER) - 8 * 86400) * 1000
 GROUP BY 1, 2;
