-- The jobs queued before the lanes (0026 gave them all bulk = 0) are a backlog in one queue order, mostly
-- batches and scheduled releases: left in the single-send lane, a password reset sent after the upgrade
-- waited behind all of it (200,000 jobs: as long as before the lanes). In the bulk lane, mail sent now
-- takes turns with it (delivery/repo.ts claimDue).
UPDATE `delivery_jobs` SET `bulk` = 1 WHERE `bulk` = 0;
