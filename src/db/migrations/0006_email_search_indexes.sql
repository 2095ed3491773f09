CREATE INDEX `emails_project_template_id_idx` ON `emails` (`project_id`,`template_id`,`id`) WHERE template_id is not null;--> statement-breakpoint
CREATE INDEX `emails_project_template_name_idx` ON `emails` (`project_id`,`template_name`,`id`) WHERE template_name is not null;--> statement-breakpoint
CREATE INDEX `emails_project_automation_idx` ON `emails` (`project_id`,`automation_id`,`id`) WHERE automation_id is not null;--> statement-breakpoint
CREATE INDEX `emails_project_messenger_idx` ON `emails` (`project_id`,`messenger_id`,`id`) WHERE messenger_id is not null;--> statement-breakpoint
CREATE INDEX `emails_project_scheduled_at_idx` ON `emails` (`project_id`,`scheduled_at`) WHERE scheduled_at is not null;