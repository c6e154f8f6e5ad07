-- Version 3 of riverboat's line creates Postgres's static flow-controlled claim
-- (riverboat_flow_claim_jobs). SQLite's claim needs no function (its writers take turns
-- on the database's own lock), so this version changes nothing here and exists to keep
-- the line's versions the same on both databases.
SELECT 1;
