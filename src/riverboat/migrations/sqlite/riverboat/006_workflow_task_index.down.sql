DROP INDEX <schema>riverboat_job_workflow_task_idx;
DROP INDEX <schema>riverboat_job_workflow_id_idx;
