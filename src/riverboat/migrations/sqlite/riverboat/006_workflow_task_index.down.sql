-- IF EXISTS: a River migration that rebuilds river_job (SQLite's 008 does) drops them
-- with the table, and this down is then how they are put back (docs/operations.md).
DROP INDEX IF EXISTS <schema>riverboat_job_workflow_task_idx;
DROP INDEX IF EXISTS <schema>riverboat_job_workflow_id_idx;
