-- Custom SQL migration file, put your code below! --
-- FTS5 merges a level's segments once it holds `automerge` of them (default 4), and all of them at once
-- past `crisismerge` (default 16). With the indexer's writes of up to 1,000 emails (fts-indexer.ts),
-- the defaults spent most of each index write merging: on a million emails, indexing 500,000 more took
-- 17.0 s (a write p50 30 ms, max 149 ms, every accept queued behind it on the writer thread); with 16 and
-- 64, 9.7 s (p50 7.8 ms, max 122 ms). Searches read more segments: a rare term's lookup 4.2 ms instead of
-- 3.3, common ones unchanged (docs/benchmarks.md). Stored in emails_fts_config, so every connection uses them.
INSERT INTO `emails_fts`(`emails_fts`, `rank`) VALUES ('automerge', 16);
--> statement-breakpoint
INSERT INTO `emails_fts`(`emails_fts`, `rank`) VALUES ('crisismerge', 64);
