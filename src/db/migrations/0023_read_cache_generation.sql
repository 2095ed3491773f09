-- The read caches (db/read-cache.ts) keep rows of these four tables; every change to one raises the
-- counter in the same transaction, from any connection or process, and the caches watch the counter instead
-- of data_version (which moved with every commit of the writer thread, so they emptied on every turn of a send load).
CREATE TABLE `cache_generation` (
	`id` integer PRIMARY KEY NOT NULL,
	`value` integer NOT NULL
);
--> statement-breakpoint
INSERT INTO `cache_generation` (`id`, `value`) VALUES (1, 0);
--> statement-breakpoint
CREATE TRIGGER `cache_generation_api_keys_insert` AFTER INSERT ON `api_keys` BEGIN UPDATE `cache_generation` SET `value` = `value` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `cache_generation_api_keys_update` AFTER UPDATE ON `api_keys` BEGIN UPDATE `cache_generation` SET `value` = `value` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `cache_generation_api_keys_delete` AFTER DELETE ON `api_keys` BEGIN UPDATE `cache_generation` SET `value` = `value` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `cache_generation_projects_insert` AFTER INSERT ON `projects` BEGIN UPDATE `cache_generation` SET `value` = `value` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `cache_generation_projects_update` AFTER UPDATE ON `projects` BEGIN UPDATE `cache_generation` SET `value` = `value` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `cache_generation_projects_delete` AFTER DELETE ON `projects` BEGIN UPDATE `cache_generation` SET `value` = `value` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `cache_generation_domains_insert` AFTER INSERT ON `domains` BEGIN UPDATE `cache_generation` SET `value` = `value` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `cache_generation_domains_update` AFTER UPDATE ON `domains` BEGIN UPDATE `cache_generation` SET `value` = `value` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `cache_generation_domains_delete` AFTER DELETE ON `domains` BEGIN UPDATE `cache_generation` SET `value` = `value` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `cache_generation_templates_insert` AFTER INSERT ON `templates` BEGIN UPDATE `cache_generation` SET `value` = `value` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `cache_generation_templates_update` AFTER UPDATE ON `templates` BEGIN UPDATE `cache_generation` SET `value` = `value` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `cache_generation_templates_delete` AFTER DELETE ON `templates` BEGIN UPDATE `cache_generation` SET `value` = `value` + 1 WHERE `id` = 1; END;
