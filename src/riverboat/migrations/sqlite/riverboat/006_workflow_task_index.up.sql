-- Workflow tasks (riverboat.workflow: metadata's riverboat_workflow) found without reading
-- every row of river_job: Postgres has River's GIN index on metadata, SQLite has none.
-- Both indexes are partial: only workflow tasks are in them, and a write of a row whose
-- metadata does not change (a claim, most completions) does not touch them. The
-- expression is dialect/sqlite_workflow.py's WORKFLOW_ID, which the statements test:
-- json_valid first, so that a row with malformed metadata is simply not in them (->>
-- raises on it, and would refuse every write and delete of the row).

-- A workflow's tasks, by the workflow's id (workflow_get, workflow_cancel, job_wait...).
CREATE INDEX <schema>riverboat_job_workflow_id_idx
ON river_job (
    CASE WHEN json_valid(metadata, 10) THEN metadata ->> '$.riverboat_workflow.id' END
)
WHERE CASE WHEN json_valid(metadata, 10) THEN metadata ->> '$.riverboat_workflow.id' END
    IS NOT NULL;

-- The newest workflow tasks, by id (workflow_list reads a window of them backwards).
CREATE INDEX <schema>riverboat_job_workflow_task_idx
ON river_job (id)
WHERE CASE WHEN json_valid(metadata, 10) THEN metadata ->> '$.riverboat_workflow.id' END
    IS NOT NULL;
