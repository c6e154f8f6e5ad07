-- Nothing to change on Postgres: river_job.id comes from a sequence, which never hands
-- out a number twice. The version exists so both dialects share one numbering.
SELECT 1;
