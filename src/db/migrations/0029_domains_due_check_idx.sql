-- The re-check job asks every minute which domains are due (domains/repo.ts listDueForCheck): one range per
-- status, holding only those due. Without it every domain row (DKIM key pair, verification results) was
-- read to compare its last check: ~30 ms of the event loop a minute with 1,000 domains.
CREATE INDEX `domains_status_checked_idx` ON `domains` (`status`,`last_checked_at`);