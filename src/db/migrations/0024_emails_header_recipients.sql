-- A message submitted over SMTP keeps its To/Cc lists in every copy (emails/header-recipients.ts).
ALTER TABLE `emails` ADD `header_recipients` text;