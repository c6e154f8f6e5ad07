-- Version 4 of riverboat's line replaces Postgres's flow-controlled claim with one that
-- writes no completions (riverboat_flow_claim_jobs_v2). SQLite's claim needs no function,
-- so this version changes nothing here and keeps the line's versions the same on both
-- databases.
SELECT 1;
