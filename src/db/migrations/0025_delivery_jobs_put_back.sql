-- Taking back put-back jobs (delivery/repo.ts pullForward) reads never-attempted jobs only: indexed without
-- the deferred retries, it no longer reads every retry due before them (50-90 ms for 100,000).
DROP INDEX `delivery_jobs_domain_due_idx`;--> statement-breakpoint
CREATE INDEX `delivery_jobs_put_back_idx` ON `delivery_jobs` (`recipient_domain`,`next_attempt_at`) WHERE attempts = 0;--> statement-breakpoint
CREATE INDEX `delivery_jobs_put_back_any_idx` ON `delivery_jobs` (`next_attempt_at`) WHERE attempts = 0;