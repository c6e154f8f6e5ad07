"""SQLite statements for workflows, the twins of
:mod:`~riverboat.dialect.postgres_workflow` (same names, arguments and rows). A mixin of
:class:`~riverboat.dialect.sqlite.SqliteDialect`.

SQLite has no data-modifying CTEs, so promotion is one ``UPDATE ... FROM`` whose
decision is a subquery, followed in its transaction by the outbox rows of River's insert
notification for the queues of the tasks it made available. A workflow's tasks are
found through the partial indexes riverboat's migration line adds (version 6; River's
SQLite schema has no index on metadata), by the expression the statements below test,
``metadata ->> '$.riverboat_workflow.id'``; promotion only looks rows up by primary key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from riverboat._sql import Statement
from riverboat.dialect._sqlite_common import NOW, errors_append, job_columns
from riverboat.dialect._workflow_common import (
    WORKFLOW_LIST_WINDOW,
    Patch,
    PromoteStep,
    WorkflowStatements,
    workflow_retry_sql,
)

__all__ = ["SqliteWorkflow"]

_WF = "'$.riverboat_workflow"


def _workflow_id(column: str = "metadata") -> str:
    """A row's workflow id (NULL outside any workflow), as riverboat's partial indexes
    compute it (its migration line, version 6): a statement must test this very
    expression for SQLite to use them. json_valid comes first because ``->>`` raises on
    malformed JSON: a statement reading such a row would fail whole (the sweep, every
    workflow_get), and an index expression that raised would refuse every write and
    delete of the row."""
    return f"CASE WHEN json_valid({column}, 10) THEN {column} ->> {_WF}.id' END"


WORKFLOW_ID = _workflow_id()
# See postgres_workflow.RETRIED_STATE and RETRIED_METADATA: how a retried task's row
# changes, here and in dialect/sqlite_admin.py's job_retry (json_valid first, as there
# the row may be any job).
RETRIED_STATE = f"""CASE WHEN json_valid(river_job.metadata, 10)
                 AND json_array_length(river_job.metadata, {_WF}.dep_ids') > 0
            THEN 'pending' ELSE 'available' END"""
RETRIED_METADATA = f"""CASE WHEN json_valid(river_job.metadata, 10)
            THEN jsonb_remove(river_job.metadata, '$.cancel_attempted_at',
                              {_WF}.cancelled_by')
            ELSE river_job.metadata END"""
QUERIES: dict[str, str] = {}

QUERIES["workflow_link"] = f"""
UPDATE <schema>river_job
SET metadata = jsonb_set(
    river_job.metadata,
    {_WF}.dep_ids',
    CASE WHEN json_type(p.value, '$.dep_ids') = 'array' THEN p.value -> '$.dep_ids'
         ELSE coalesce(river_job.metadata -> {_WF}.dep_ids', json('[]')) END,
    {_WF}.dependent_ids',
    (SELECT json_group_array(x.value) FROM (
        SELECT value FROM json_each(river_job.metadata, {_WF}.dependent_ids')
        UNION ALL
        SELECT value FROM json_each(p.value, '$.dependents')) AS x))
FROM json_each(:patches) AS p
WHERE river_job.id = p.value ->> '$.id'
  AND {_workflow_id("river_job.metadata")} IS NOT NULL
"""


def _promote(candidates: str) -> str:
    """See postgres_workflow._promote: the same decision (and the same test of whether a
    just-finalized task's dependent can be decided yet), written for SQLite."""
    return f"""
UPDATE <schema>river_job
SET state = CASE WHEN v.cancel THEN 'cancelled'
                 WHEN river_job.scheduled_at > {NOW} THEN 'scheduled'
                 ELSE 'available' END,
    finalized_at = CASE WHEN v.cancel THEN {NOW} ELSE NULL END,
    metadata = CASE WHEN v.cancel
        THEN jsonb_set(river_job.metadata, {_WF}.cancelled_by', v.failed_task)
        WHEN v.outputs = '{{}}' THEN river_job.metadata
        ELSE jsonb_set(river_job.metadata, {_WF}.dep_outputs', json(v.outputs)) END
FROM (
    SELECT cid, outputs, failed_task,
           (all_completed OR (all_finalized AND policy = 'run')) AS run,
           (NOT all_completed AND failed_task IS NOT NULL AND policy <> 'run') AS cancel
    FROM (
        SELECT c.id AS cid,
               min(coalesce(d.state, 'completed') = 'completed') AS all_completed,
               min(coalesce(d.state, 'completed') IN ('completed', 'cancelled', 'discarded'))
                   AS all_finalized,
               min(CASE WHEN d.state IN ('cancelled', 'discarded')
                        THEN d.metadata ->> {_WF}.task' END) AS failed_task,
               min(c.policy) AS policy,
               coalesce(json_group_object(d.metadata ->> {_WF}.task', d.metadata -> '$.output')
                        FILTER (WHERE d.metadata -> '$.output' IS NOT NULL
                                  AND d.metadata ->> {_WF}.task' IS NOT NULL),
                        '{{}}') AS outputs
        FROM (
            SELECT j.id, j.metadata,
                   coalesce(j.metadata ->> {_WF}.on_dep_failure', 'cancel') AS policy
            FROM <schema>river_job j
            WHERE j.id IN ({candidates})
              AND j.state = 'pending'
              AND {_workflow_id("j.metadata")} IS NOT NULL
              AND (j.id IN (SELECT value FROM json_each(:candidate_ids))
                   OR NOT EXISTS (
                       SELECT 1
                       FROM (SELECT e.value AS dep_id
                             FROM json_each(j.metadata, {_WF}.dep_ids') AS e
                             ORDER BY e.key DESC) AS e
                       JOIN <schema>river_job d ON d.id = e.dep_id
                       WHERE d.state NOT IN ('completed', 'cancelled', 'discarded'))
                   OR (coalesce(j.metadata ->> {_WF}.on_dep_failure', 'cancel') <> 'run'
                       AND EXISTS (
                           SELECT 1 FROM <schema>river_job f
                           WHERE f.id IN (SELECT value FROM json_each(:finalized_ids))
                             AND f.state IN ('cancelled', 'discarded')
                             AND EXISTS (SELECT 1
                                         FROM json_each(j.metadata, {_WF}.dep_ids') AS x
                                         WHERE x.value = f.id))))
        ) AS c
        JOIN json_each(c.metadata, {_WF}.dep_ids') AS e
        LEFT JOIN <schema>river_job d ON d.id = e.value
        GROUP BY c.id
    )
) AS v
WHERE river_job.id = v.cid AND river_job.state = 'pending' AND (v.run OR v.cancel)
RETURNING river_job.id, river_job.state, river_job.queue
"""


_DEPENDENTS_AND_CANDIDATES = f"""SELECT e.value FROM <schema>river_job f,
                json_each(f.metadata, {_WF}.dependent_ids') AS e
            WHERE f.id IN (SELECT value FROM json_each(:finalized_ids))
            UNION
            SELECT value FROM json_each(:candidate_ids)"""
QUERIES["workflow_promote"] = _promote(_DEPENDENTS_AND_CANDIDATES)
# Every candidate at once (SQLite's promotion takes no steps: after_id, limit and
# skip_ids are bound but not read).
QUERIES["workflow_step_candidates"] = f"""
SELECT DISTINCT value FROM ({_DEPENDENTS_AND_CANDIDATES})
WHERE :after_id IS NOT NULL AND :limit IS NOT NULL AND :skip_ids IS NOT NULL
ORDER BY 1
"""

QUERIES["workflow_task_refused"] = f"""
UPDATE <schema>river_job
SET state = 'discarded', finalized_at = {NOW},
    errors = {errors_append("river_job.errors", "json_set(:error, '$.attempt', river_job.attempt)")}
WHERE id = :id AND state = 'pending'
RETURNING id, state, queue
"""

# Run after the promotion, in its transaction: River's insert notification (an outbox
# row) for each queue where a candidate is now available, so workers in other processes
# claim promoted tasks at once. (A candidate available before, not promoted now, only
# costs a spare notification.)
QUERIES["workflow_promote_notify"] = f"""
INSERT INTO <schema>river_notification (payload, topic)
SELECT DISTINCT json_object('queue', j.queue), 'river_insert'
FROM <schema>river_job j
WHERE j.id IN ({_DEPENDENTS_AND_CANDIDATES}) AND j.state = 'available'
"""

# See postgres_workflow.cancel_orphans: here a statement of its own after the delete, in
# its transaction, given (task id, deleted task's name) pairs read from the deleted rows.
QUERIES["workflow_cancel_orphans"] = f"""
UPDATE <schema>river_job
SET state = 'cancelled',
    finalized_at = {NOW},
    metadata = jsonb_set(river_job.metadata, {_WF}.cancelled_by', o.value ->> '$[1]')
FROM json_each(:orphans) AS o
WHERE river_job.id = o.value ->> '$[0]'
  AND river_job.state = 'pending'
  AND {_workflow_id("river_job.metadata")} IS NOT NULL
  AND coalesce(river_job.metadata ->> {_WF}.on_dep_failure', 'cancel') <> 'run'
"""

QUERIES["workflow_pending_tasks"] = f"""
SELECT id, json(metadata -> {_WF}.dep_ids'),
       coalesce(metadata ->> {_WF}.on_dep_failure', 'cancel')
FROM <schema>river_job
WHERE state = 'pending' AND id > :after_id AND {WORKFLOW_ID} IS NOT NULL
ORDER BY id LIMIT :max
"""

QUERIES["workflow_dep_states"] = """
SELECT id, state FROM <schema>river_job WHERE id IN (SELECT value FROM json_each(:ids))
"""

# Without an index on metadata, the rows from min_id on (the job id is the rowid: a
# range of the table) are read rather than the whole table.
QUERIES["workflow_get"] = f"""
SELECT {job_columns()}
FROM <schema>river_job
WHERE id >= :min_id AND {WORKFLOW_ID} = :workflow_id
ORDER BY id
LIMIT :max
"""

# The newest workflows (see dialect/postgres_workflow.py): the window read backwards
# along riverboat_job_workflow_task_idx (workflow tasks by id), the counts by
# riverboat_job_workflow_id_idx.
QUERIES["workflow_list"] = f"""
WITH recent AS (
    SELECT w.workflow_id, max(w.id) AS newest
    FROM (
        SELECT id, {WORKFLOW_ID} AS workflow_id,
               json_type(metadata, '$.riverboat_workflow.id') AS id_type
        FROM <schema>river_job
        WHERE {WORKFLOW_ID} IS NOT NULL
        ORDER BY id DESC
        LIMIT {WORKFLOW_LIST_WINDOW}
    ) AS w
    -- A workflow id that is not text (metadata written by hand) names no workflow that
    -- workflow_get could open.
    WHERE w.id_type = 'text'
    GROUP BY w.workflow_id
    ORDER BY newest DESC
    LIMIT :max
)
SELECT {WORKFLOW_ID} AS workflow_id,
       -- The name on its first task that has one, as WorkflowInfo reads it (the
       -- zero-padded id orders the texts by id).
       coalesce(substr(min(printf('%020d', id) || (metadata ->> {_WF}.name')), 21), ''),
       count(*),
       sum(state = 'completed'),
       sum(state IN ('cancelled', 'discarded')),
       sum(state NOT IN ('completed', 'cancelled', 'discarded')),
       min(created_at),
       max(id) AS newest
FROM <schema>river_job
WHERE {WORKFLOW_ID} IN (SELECT workflow_id FROM recent)
GROUP BY 1
ORDER BY newest DESC
"""

QUERIES["workflow_unfinished"] = f"""
SELECT id FROM <schema>river_job
WHERE id >= :min_id AND {WORKFLOW_ID} = :workflow_id
  AND state NOT IN ('completed', 'cancelled', 'discarded')
LIMIT 1
"""

QUERIES["workflow_retry"] = workflow_retry_sql(
    retried_state=RETRIED_STATE,
    retried_metadata=RETRIED_METADATA,
    now=NOW,
    in_workflow=f"{WORKFLOW_ID} = :workflow_id",
    columns=job_columns(),
)

QUERIES["workflow_cancel"] = f"""
UPDATE <schema>river_job
SET state = CASE WHEN river_job.state = 'running' THEN river_job.state ELSE 'cancelled' END,
    finalized_at = CASE WHEN river_job.state = 'running' THEN NULL ELSE {NOW} END,
    metadata = jsonb_set(river_job.metadata, '$.cancel_attempted_at', :cancel_attempted_at)
WHERE {WORKFLOW_ID} = :workflow_id
  AND state NOT IN ('cancelled', 'completed', 'discarded')
RETURNING {job_columns()}
"""

# The producers of the workflow's running tasks are told, in the cancel's transaction.
QUERIES["workflow_cancel_notify"] = f"""
INSERT INTO <schema>river_notification (payload, topic)
SELECT json_object('action', 'cancel', 'job_id', id, 'queue', queue), 'river_control'
FROM <schema>river_job
WHERE {WORKFLOW_ID} = :workflow_id
  AND state = 'running'
  AND metadata ->> '$.cancel_attempted_at' = :cancel_attempted_at
"""


class SqliteWorkflow(WorkflowStatements):
    """SQLite's half of :class:`~riverboat.dialect.base.WorkflowStatements`."""

    _queries: ClassVar[dict[str, str]] = QUERIES

    def workflow_link_patches(self, patches: list[Patch], *, as_text: bool = False) -> Statement:
        encoded = [
            {"id": i, "dep_ids": None if d is None else list(d), "dependents": list(p)}
            for i, d, p in patches
        ]
        return self.stmt("workflow_link", patches=json.dumps(encoded))

    def workflow_promote_ids(
        self, finalized_ids: list[int], candidate_ids: list[int], step: PromoteStep | None = None
    ) -> Statement:
        # One statement for every promotion, the runtime's too (``step`` is ignored):
        # SQLite's durability is its connection's synchronous pragma, nothing to relax,
        # and its one writer at a time gains nothing from steps.
        params = self.promote_params(finalized_ids, candidate_ids)
        notify = self.stmt("workflow_promote_notify", **params)
        return Statement(self.q["workflow_promote"], params, (notify,))

    def id_list_param(self, ids: Sequence[int]) -> Any:
        return json.dumps(list(ids))

    def workflow_dep_states(self, ids: Sequence[int]) -> Statement:
        return self.stmt("workflow_dep_states", ids=json.dumps(list(ids)))

    def workflow_cancel_orphans(self, orphans: Sequence[tuple[int, str]]) -> Statement:
        return self.stmt("workflow_cancel_orphans", orphans=json.dumps([list(o) for o in orphans]))

    def workflow_cancel(self, workflow_id: str, cancel_attempted_at: str) -> Statement:
        params = {"workflow_id": workflow_id, "cancel_attempted_at": cancel_attempted_at}
        notify = self.stmt("workflow_cancel_notify", **params)
        return Statement(self.q["workflow_cancel"], params, (notify,))
