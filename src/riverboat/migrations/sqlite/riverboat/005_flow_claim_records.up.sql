-- Version 5 of riverboat's line gives Postgres's flow-controlled claim per-client records
-- of the jobs in flight (riverboat_flow_claim_jobs_v3). SQLite's claim needs neither, so
-- this version changes nothing here and keeps the line's versions the same on both
-- databases.
SELECT 1;
