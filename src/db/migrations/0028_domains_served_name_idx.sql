-- Postmaster at the domains this host serves (bounces/service.ts) is asked at every such RCPT of the public
-- inbound listener, by name across projects: without these every RCPT read every domain row, DKIM keys and
-- all (1,000 domains: ~9 ms of the event loop each).
CREATE INDEX `domains_domain_lower_idx` ON `domains` (lower("domain"));--> statement-breakpoint
CREATE INDEX `domains_mail_from_domain_lower_idx` ON `domains` (lower("mail_from_domain"));