-- Workflow tasks (riverboat.workflow: metadata's riverboat_workflow) found without reading
-- every row of river_job: Postgres has River's GIN index on metadata, SQLite has none.
-- Both indexes are partial: only workflow tasks are in them, and a write of a row whose
-- metadata does not change (a claim, most completions) does not touch them.

-- A workflow's tasks, by the workflow's id (workflow_get, workflow_cancel, job_wait...).
CREATE INDEX <schema>riverboat_job_workflow_id_idx
ON river_job (metadata ->> '$.riverboat_workflow.id')
WHERE metadata ->> '$.riverboat_workflow.id' IS NOT NULL;

-- The newest workflow tasks, by id (workflow_list reads a window of them backwards).
CREATE INDEX <schema>riverboat_job_workflow_task_idx
ON river_job (id)
WHERE metadata ->> '$.riverboat_workflow.id' IS NOT NULL;
