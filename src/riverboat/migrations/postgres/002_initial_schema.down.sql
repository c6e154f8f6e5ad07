DROP TABLE <schema>river_leader;
-- Dropping the table drops its trigger, so the function and type are free to go.
DROP TABLE <schema>river_job;
DROP FUNCTION <schema>river_job_notify();
DROP TYPE <schema>river_job_state;
