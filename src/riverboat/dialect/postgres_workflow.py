"""Postgres statements for workflows (:mod:`riverboat.workflow`). A mixin of
:class:`~riverboat.dialect.postgres.PostgresDialect`.

Tasks find each other by primary key (``dep_ids``/``dependent_ids`` in their metadata),
so promotion never scans the table, whatever its statistics say. Pending tasks are found
through River's ``(state, queue, priority, scheduled_at, id)`` index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from riverboat._sql import Statement, render_schema
from riverboat.dialect._pg_common import CHANNEL, CLAIM_SET, channel_sql, clamped, job_columns
from riverboat.dialect._rows import JOB_COLUMNS
from riverboat.dialect._workflow_common import (
    WORKFLOW_LIST_WINDOW,
    Patch,
    PromoteStep,
    WorkflowStatements,
    workflow_retry_sql,
)
from riverboat.dialect.base import MAX_ATTEMPTED_BY
from riverboat.workflow import ID_TEXT, NODE_KEY, NOT_ID_LIST_TEXT

__all__ = ["PostgresWorkflow"]

_KEY = "riverboat_workflow"
_INSERT_CHANNEL = CHANNEL.format(topic="river_insert")

QUERIES: dict[str, str] = {}


def _link(meta: str, field: str) -> str:
    """A task's ``dep_ids`` or ``dependent_ids`` (``field``) as jsonb, from the workflow
    part ``meta`` of its metadata: the part of its ``node`` string (riverboat's line at
    WORKFLOW_NODE_LINE_VERSION), or the key of that name (earlier releases); NULL for a
    node that is not a string with two ``;`` at least (as riverboat.workflow.node_parts
    reads it)."""
    part = {"dep_ids": 1, "dependent_ids": 2}[field]
    return f"""(CASE WHEN {meta} ? '{NODE_KEY}'
              THEN CASE WHEN jsonb_typeof({meta}->'{NODE_KEY}') = 'string'
                             AND ({meta}->>'{NODE_KEY}') LIKE '%;%;%'
                        THEN to_jsonb(split_part({meta}->>'{NODE_KEY}', ';', {part})) END
              ELSE {meta}->'{field}' END)"""


def _task(meta: str) -> str:
    """A task's name as jsonb, from the workflow part ``meta`` of its metadata: what
    follows the second ``;`` of its ``node`` (the name may hold ``;`` itself), or its
    ``task``; NULL for a node that is not such a string."""
    node = f"({meta}->>'{NODE_KEY}')"
    return f"""(CASE WHEN {meta} ? '{NODE_KEY}'
              THEN CASE WHEN jsonb_typeof({meta}->'{NODE_KEY}') = 'string'
                             AND {node} LIKE '%;%;%'
                        THEN to_jsonb(substr({node}, length(split_part({node}, ';', 1))
                                                     + length(split_part({node}, ';', 2)) + 3))
                   END
              ELSE {meta}->'task' END)"""


def _ids(value: str) -> str:
    """The job ids the jsonb ``value`` (a task's ``dep_ids`` or ``dependent_ids``) lists,
    as a bigint[]: one string of comma-separated ids as this release writes them, or a
    JSON array as earlier ones did (riverboat.workflow); NULL for anything else,
    including a string or an array that is not such a list (metadata written by hand):
    a cast error would fail the whole statement, every task it decides with it, at
    each try. The rule is riverboat.workflow's, which ids_in keeps too (up to 18 digits
    an id)."""
    text = f"({value} #>> ARRAY[]::text[])"
    return f"""(CASE jsonb_typeof({value})
        WHEN 'string' THEN CASE WHEN {text} = '' THEN ARRAY[]::bigint[]
                                WHEN {text} !~ '{NOT_ID_LIST_TEXT}'
                                THEN string_to_array({text}, ',')::bigint[] END
        WHEN 'array' THEN CASE WHEN NOT EXISTS (
                                   SELECT 1 FROM jsonb_array_elements({value}) AS x(id)
                                   WHERE jsonb_typeof(x.id) <> 'number'
                                      OR x.id::text !~ '^{ID_TEXT}$')
                               THEN ARRAY(SELECT jsonb_array_elements_text({value})::bigint)
                          END END)"""


# How a retried task's row changes, one task's (job_retry, dialect/postgres_admin.py) or
# a workflow's (workflow_retry below): a task with dependencies goes back to pending, not
# available (it runs only once they completed: promotion decides it); the cancelled_by
# of an earlier failure goes, and so does River's cancel_attempted_at (River 0.51: a
# cancellation asked of an earlier attempt must not cancel the next). No braces: the
# bulk retry's statement goes through str.format.
_RETRIED_DEP_IDS = _link(f"river_job.metadata->'{_KEY}'", "dep_ids")
RETRIED_STATE = f"""CASE
            WHEN (jsonb_typeof({_RETRIED_DEP_IDS}) = 'array'
                  AND {_RETRIED_DEP_IDS} <> '[]'::jsonb)
              OR (jsonb_typeof({_RETRIED_DEP_IDS}) = 'string'
                  AND {_RETRIED_DEP_IDS} <> '""'::jsonb)
            THEN 'pending' ELSE 'available' END::<schema>river_job_state"""
# A job's metadata as an object: one that is not (another client wrote a string, a
# number or an array) reads as empty everywhere (riverboat._job.decode_metadata), and
# jsonb_set, - and #- refuse a scalar or a text path into an array: the statement
# failed, and a bulk retry or cancel with it, every job of the batch left as it was.
# No braces (str.format, above).
OBJECT_METADATA = """(CASE WHEN jsonb_typeof(river_job.metadata) = 'object'
                   THEN river_job.metadata ELSE jsonb_build_object() END)"""
# (#- refuses a text path into an array too: the workflow part only when an object.)
RETRIED_METADATA = f"""(CASE WHEN jsonb_typeof(river_job.metadata->'{_KEY}') = 'object'
                   THEN ({OBJECT_METADATA} - 'cancel_attempted_at')
                        #- ARRAY['{_KEY}', 'cancelled_by']
                   ELSE {OBJECT_METADATA} - 'cancel_attempted_at' END)"""


def _stored_ids(ids: str) -> str:
    """The bigint[] ``ids`` as a task's metadata stores them: one string of ids with
    ``:as_text`` (riverboat's line at WORKFLOW_IDS_TEXT_LINE_VERSION), else an array."""
    return f"""(CASE WHEN :as_text::boolean THEN to_jsonb(array_to_string({ids}, ','))
             ELSE to_jsonb({ids}) END)"""


# When tasks are added to a workflow: each task inserted earlier learns its new
# dependents (and, given them, its dependencies' job ids), each list written in the
# form the schema's version says, the list already there read in either. A task
# written as a node stays one (its name kept); one written with separate keys keeps
# them.
_STORED_PART = f"river_job.metadata->'{_KEY}'"
_ALL_DEPENDENTS = (
    f"(coalesce({_ids(_link(_STORED_PART, 'dependent_ids'))}, '{{}}'::bigint[])"
    " || string_to_array(p.dependents, ',')::bigint[])"
)
_LINKED_DEPENDENTS = _stored_ids(_ALL_DEPENDENTS)
_LINKED_NODE = f"""to_jsonb(concat(
                 coalesce(p.dep_ids, {_link(_STORED_PART, "dep_ids")} #>> ARRAY[]::text[]), ';',
                 array_to_string({_ALL_DEPENDENTS}, ','), ';',
                 {_task(_STORED_PART)} #>> ARRAY[]::text[]))"""
QUERIES["workflow_link"] = f"""
UPDATE <schema>river_job
SET metadata = CASE
    WHEN {_STORED_PART} ? '{NODE_KEY}'
    THEN jsonb_set(river_job.metadata, '{{{_KEY},{NODE_KEY}}}', {_LINKED_NODE})
    ELSE jsonb_set(
        CASE WHEN p.dep_ids IS NULL THEN river_job.metadata
             ELSE jsonb_set(river_job.metadata, '{{{_KEY},dep_ids}}',
                            {_stored_ids("string_to_array(p.dep_ids, ',')::bigint[]")}) END,
        '{{{_KEY},dependent_ids}}', {_LINKED_DEPENDENTS}) END
FROM unnest(:ids::bigint[], :dep_ids::text[], :dependents::text[]) AS p(id, dep_ids, dependents)
WHERE river_job.id = p.id AND river_job.metadata->'{_KEY}' IS NOT NULL
"""

# A transaction-level advisory lock per workflow (and schema), as the flow claim's per
# queue: released at commit or rollback. The migrations' lock_timeout lift is not
# needed: another addition to the same workflow holds it for one short transaction.
QUERIES["workflow_lock"] = """
SELECT pg_advisory_xact_lock(
    hashtext(concat(coalesce(:schema::text, current_schema()), '.riverboat_workflow.',
                    :workflow_id::text))::bigint)
"""

# Ids from river_job's own sequence (the one its bigserial default draws from), so ids
# given before the insert are as unique and as ordered as any other job's. The sequence
# is looked up once (MATERIALIZED): a plain subquery was pulled up into the scan and
# pg_get_serial_sequence ran for every id, 5 ms of catalog lookups for 1,000 ids.
QUERIES["workflow_reserve_ids"] = """
WITH s AS MATERIALIZED (
    SELECT pg_get_serial_sequence(:table::text, 'id')::regclass AS seq
)
SELECT nextval(s.seq)
FROM s CROSS JOIN generate_series(1, :count::integer)
"""


def _no_unfinished_dep_after_pivot() -> str:
    """No dependency (``c.dep_ids``) of candidate ``c`` after its pivot is unfinished:
    index probes by primary key in id order, stopping at the first unfinished one. Its
    pivot is the newest of its own dependencies among the tasks just finalized (none:
    all are probed); not the newest of the whole batch, which a task of another
    workflow finalized with it would make newer than every dependency of an older
    join."""
    pivot = """(SELECT coalesce(max(p.id), 0) FROM unnest(c.dep_ids) AS p(id)
                 WHERE p.id = ANY(:finalized_ids::bigint[]))"""
    return f"""NOT EXISTS (
               SELECT 1 FROM <schema>river_job d
               WHERE d.id = ANY(c.dep_ids)
                 AND d.id > {pivot}
                 AND d.state NOT IN ('completed', 'cancelled', 'discarded'))"""


# What a promotion returns: the rows it changed.
_CHANGED_COLUMNS = "river_job.id, river_job.state::text AS state, river_job.queue"
_CHANGED = """SELECT updated.id, updated.state, updated.queue FROM updated CROSS JOIN notified
ORDER BY updated.id
"""
# What a step of the runtime's promotion returns: the rows it changed, each with the
# largest candidate id it looked at and how many (one row of NULLs and those two when it
# changed none), so that the next step starts after them; and the tasks it decided but
# found locked by another session (SKIP LOCKED: a transaction adding tasks to the
# workflow rewrites their dependents until it commits), for the runtime to look at
# again soon rather than leave to the next sweep.
_CHANGED_AND_LAST_CANDIDATE = """SELECT u.id, u.state, u.queue, s.last_candidate, s.candidates,
       s.locked_elsewhere
FROM (SELECT max(id) AS last_candidate, count(*) AS candidates,
             -- Counted first: the ids are looked for only when some were skipped (an
             -- anti-join of the two lists tripled a 998-task step).
             CASE WHEN (SELECT count(*) FROM verdict WHERE run OR cancel)
                       > (SELECT count(*) FROM locked)
                  THEN (SELECT array_agg(v.cid) FROM verdict v
                        WHERE (v.run OR v.cancel)
                          AND v.cid <> ALL(ARRAY(SELECT k.cid FROM locked k)))
             END AS locked_elsewhere
      FROM candidate_ids) AS s
CROSS JOIN notified
LEFT JOIN updated u ON true
ORDER BY u.id
"""

# A promotion that claims (the runtime's, for a queue of its own with free slots, see
# runtime/workflow_promoter.py): of the tasks it makes ready in :queue, due by :now and
# of :kinds when given, the first :max_to_lock in claim order go straight to running
# for :attempted_by, as a claim would write them (CLAIM_SET); their full rows come back
# after the usual columns, the others' as NULLs. Only while no job is waiting in the
# queue (available and due): the producer offers only when it knows of none, but it may
# not have heard of one yet (an insert by another process whose notification is on its
# way, or any insert at all when it polls), and a claim here would start the tasks ahead
# of it. Then the tasks are only made available, and the producer's own claim takes
# them in River's order. One probe of the index River's claim reads, (state, queue,
# priority, scheduled_at, id), so of any kind: with :kinds, a queue's backlog of kinds
# this client does not work was walked whole (55 ms for 200,000), and a job another
# session's claim holds locked counts too (both only cost the claim, never a job's turn).
_CLAIM_COLUMNS = ", l.queue, l.priority, l.scheduled_at, l.kind"
_CLAIMED = """
claimed AS (
    SELECT cid FROM locked
    WHERE NOT cancel
      AND queue = :queue::text
      AND scheduled_at <= coalesce(:now::timestamptz, now())
      AND (:kinds::text[] IS NULL OR kind = ANY(:kinds::text[]))
      AND NOT EXISTS (
          SELECT 1 FROM <schema>river_job w
          WHERE w.state = 'available'
            AND w.queue = :queue::text
            AND w.scheduled_at <= coalesce(:now::timestamptz, now()))
    ORDER BY priority, scheduled_at, cid
    LIMIT :max_to_lock::integer
),"""
# Each locked row with whether it is claimed: the claimed ids gathered once (an
# uncorrelated subquery), then one test per row. A join on the claimed rows was planned
# as a nested loop (both sides estimated at one row) that scanned them again for every
# locked row: 1.1 of 4.9 ms for 100 tasks.
_FLAGGED = """
flagged AS MATERIALIZED (
    SELECT l.*, l.cid = ANY(ARRAY(SELECT cid FROM claimed)) AS claimed FROM locked l
),"""
_RUNNING_IF_CLAIMED = """
                     WHEN v.claimed THEN 'running'"""
_CLAIM_SET = "".join(
    f"""
        {column} = CASE WHEN v.claimed THEN {value} ELSE river_job.{column} END,"""
    for column, value in CLAIM_SET.items()
)
# The claimed rows' columns, read only for them: NULLs for the others.
_CLAIMED_COLUMNS = ", " + job_columns("river_job", when="v.claimed", alias_prefix="claimed_")
_CLAIMED_AND_LAST_CANDIDATE = _CHANGED_AND_LAST_CANDIDATE.replace(
    "       s.locked_elsewhere\n",
    "       s.locked_elsewhere, " + ", ".join(f"u.claimed_{c.name}" for c in JOB_COLUMNS) + "\n",
)
assert _CLAIMED_AND_LAST_CANDIDATE != _CHANGED_AND_LAST_CANDIDATE


# A scalar subquery: set once per statement (an InitPlan), not once per candidate row.
_NO_DISK_WAIT = "AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'"


def _promote(candidates: str, *, step: bool = False, claim: bool = False) -> str:
    """The promotion statement over the pending tasks chosen by the ``candidates``
    query (one ``id`` column): a task whose dependencies all completed becomes available
    (scheduled if its scheduled_at is still ahead) with their outputs copied in; one with
    a discarded or cancelled dependency is cancelled when its policy says so, or runs
    once all are finalized when it says ``run``. A dependency row that no longer exists
    was finalized and then removed by the cleaner: it counts as completed.

    A candidate is only decided when it may be decidable: every dependency among the
    tasks just finalized (a fan-out's tasks: no probe), no dependency after its pivot
    (the newest of its dependencies just finalized) still unfinished, or, under the
    ``cancel`` policy, one of the tasks just finalized failed (for a candidate named
    directly, the sweep's or a retry's: any dependency failed). The unfinished
    dependency after the pivot is looked for by index probes, stopping at the first:
    tasks finish roughly in id order, so a fan-in's join costs about one probe, not its
    whole decision, after a batch of its leaves that is not the last. The decision
    reads every dependency once (those before the pivot too); probing them first as
    well doubled the join's last promotion (about 2.5 of 7 ms for 998 dependencies).

    A row is locked only once it is decided, with ``SKIP LOCKED``, and only while still
    pending (rechecked under the lock): two promoters deciding one task never leave it
    to the next sweep, the one that locked it writes it, and a promoter never holds a
    lock on a task it leaves pending (a sweep that did made a completer's promotion of
    the same task skip it, and the task waited for the next sweep, 2 s).

    Every row is found by primary key through ``id = ANY(ARRAY(...))``, which the planner
    serves from the index whatever the table's statistics say; joins on ``river_job``
    were planned as a sequential scan per candidate on a table not analyzed yet (a
    fresh or truncated one), 1.4 s for a 1,000-task fan-out. The dependencies' states,
    names and outputs are read once, into one object keyed by id.

    ``step`` (the runtime's promotions, each a transaction of its own): the statement
    commits without waiting for its WAL to reach the disk (``synchronous_commit`` off
    for that transaction only). A promotion is derived from outcomes that are durable
    already; one lost in a crash is done again by the sweep, and any later durable
    commit (the promoted task's claim) flushes it anyway. It saves a chain one disk
    flush per step. Never inside a caller's transaction. Not with ``claim``: that
    statement is the tasks' claim, and a job must not start on a claim a crash could
    undo (the sweep would promote it again and it would run twice), so it commits as
    River's claim does. Its ``candidates`` query takes
    a bounded part of them (the promoter's PROMOTE_STEP, in id order), and it returns
    where the next part starts: a fan-out's first tasks are claimed after one short
    statement (6 ms for 128 of them), not after its whole promotion (34 ms for 1,000),
    and no statement locks and rewrites thousands of rows at once."""
    return f"""
WITH candidate_ids AS ({candidates}),
candidates AS (
    SELECT c.id, c.dep_ids, c.policy
    FROM (
        -- Only what the decision needs: a fan-in's whole metadata (its dependency names
        -- and ids) carried on each of its dependencies' rows made a sort spill to disk.
        -- Its id list is read once (OFFSET 0 keeps the planner from copying the
        -- expression into every test below: 6.6 us each, 5 ms for a 998-task step).
        SELECT j.id, {_ids("w.dep_ids")} AS dep_ids,
               coalesce(j.metadata->'{_KEY}'->>'on_dep_failure', 'cancel') AS policy
        FROM <schema>river_job j
        CROSS JOIN LATERAL (SELECT {_link(f"j.metadata->'{_KEY}'", "dep_ids")} AS dep_ids
                            OFFSET 0) AS w
        WHERE j.id = ANY(ARRAY(SELECT id FROM candidate_ids))
          -- Compared as text so that rows are found by primary key, never through the
          -- index of every pending job (which stale statistics can make look cheaper).
          AND j.state::text = 'pending'
          AND j.metadata->'{_KEY}' IS NOT NULL
          {_NO_DISK_WAIT if step and not claim else ""}
        OFFSET 0
    ) AS c
    WHERE (c.id = ANY(:candidate_ids::bigint[])
           -- Named directly (the sweep, a retry, tasks just added): decided by the
           -- probes below, or cancelled for any failed dependency.
           AND c.policy <> 'run'
           AND EXISTS (
               SELECT 1 FROM <schema>river_job d
               WHERE d.id = ANY(c.dep_ids)
                 AND d.state::text IN ('cancelled', 'discarded')))
          -- Every dependency is a task just finalized (a fan-out's tasks after their
          -- one dependency): nothing to probe.
          OR c.dep_ids <@ :finalized_ids::bigint[]
          -- No dependency after the newest task just finalized still unfinished
          -- (tasks finish roughly in id order: a fan-in's join is passed over at the
          -- first probe, not after the hundreds that finished before); the decision
          -- below reads the others.
          OR {_no_unfinished_dep_after_pivot()}
          OR (c.policy <> 'run' AND EXISTS (
              SELECT 1 FROM <schema>river_job f
              WHERE f.id = ANY(:finalized_ids::bigint[])
                AND f.state::text IN ('cancelled', 'discarded')
                -- Not "f.id = ANY(...)": a second condition on id let the planner
                -- prefer another index (the unique jobs') to the primary key.
                AND c.dep_ids @> ARRAY[f.id]))
),
dep_rows AS (
    SELECT jsonb_object_agg(
               d.id::text,
               CASE WHEN d.metadata ? 'output'
                    THEN jsonb_build_array(d.state::text, {_task(f"d.metadata->'{_KEY}'")},
                                           d.metadata->'output')
                    ELSE jsonb_build_array(d.state::text, {_task(f"d.metadata->'{_KEY}'")})
               END) AS by_id
    FROM <schema>river_job d
    WHERE d.id = ANY(ARRAY(
        SELECT DISTINCT e.dep_id
        FROM candidates c CROSS JOIN LATERAL unnest(c.dep_ids) AS e(dep_id)))
      -- Only the rows that say more than a missing row would (completed, nothing to
      -- copy in): a fan-in's join otherwise built and searched an object of its
      -- hundreds of completed dependencies, 10 of the 14 ms of its promotion.
      AND (d.state::text <> 'completed' OR d.metadata ? 'output')
),
deps AS (
    SELECT c.id AS cid, c.policy,
           coalesce(r.by_id->e.dep_id->>0, 'completed') AS state,
           r.by_id->e.dep_id->>1 AS task,
           r.by_id->e.dep_id->2 AS output
    FROM candidates c
    CROSS JOIN dep_rows r
    CROSS JOIN LATERAL unnest(c.dep_ids::text[]) AS e(dep_id)
),
decided AS (
    SELECT cid,
           bool_and(state = 'completed') AS all_completed,
           bool_and(state IN ('completed', 'cancelled', 'discarded')) AS all_finalized,
           min(task) FILTER (WHERE state IN ('cancelled', 'discarded')) AS failed_task,
           min(policy) AS policy,
           coalesce(jsonb_object_agg(task, output) FILTER (WHERE output IS NOT NULL
                                                          AND task IS NOT NULL),
                    '{{}}'::jsonb) AS outputs
    FROM deps
    GROUP BY cid
),
verdict AS (
    SELECT cid, outputs, failed_task,
           (all_completed OR (all_finalized AND policy = 'run')) AS run,
           (NOT all_completed AND failed_task IS NOT NULL AND policy <> 'run') AS cancel
    FROM decided
),
locked AS (
    -- Each decided row by primary key (one probe per verdict), locked with its verdict.
    SELECT v.cid, v.outputs, v.failed_task, v.cancel{_CLAIM_COLUMNS if claim else ""}
    FROM verdict v
    JOIN <schema>river_job l ON l.id = v.cid
    WHERE (v.run OR v.cancel) AND l.state::text = 'pending'
    FOR UPDATE OF l SKIP LOCKED
),{_CLAIMED + _FLAGGED if claim else ""}
updated AS (
    UPDATE <schema>river_job
    SET state = CASE WHEN v.cancel THEN 'cancelled'{_RUNNING_IF_CLAIMED if claim else ""}
                     WHEN river_job.scheduled_at > now() THEN 'scheduled'
                     ELSE 'available' END::<schema>river_job_state,{_CLAIM_SET if claim else ""}
        finalized_at = CASE WHEN v.cancel THEN now() ELSE NULL END,
        metadata = CASE WHEN v.cancel
            THEN jsonb_set(river_job.metadata, '{{{_KEY},cancelled_by}}', to_jsonb(v.failed_task))
            -- Nothing to copy in: the row keeps its metadata (no rewrite, and one key
            -- fewer in the GIN index for this and every later write of the row).
            WHEN v.outputs = '{{}}'::jsonb THEN river_job.metadata
            ELSE jsonb_set(river_job.metadata, '{{{_KEY},dep_outputs}}', v.outputs) END
    FROM {"flagged" if claim else "locked"} v
    -- Still pending: its row is locked since. (No state test here, which could lead
    -- the planner to scan every pending row per verdict.)
    WHERE river_job.id = v.cid
    RETURNING {_CHANGED_COLUMNS}{_CLAIMED_COLUMNS if claim else ""}
),
notified AS (
    SELECT count(pg_notify({_INSERT_CHANNEL}, '{{"queue": ' || to_json(q.queue)::text || '}}'))
    FROM (SELECT DISTINCT queue FROM updated WHERE state = 'available') AS q
)
{_CLAIMED_AND_LAST_CANDIDATE if claim else _CHANGED_AND_LAST_CANDIDATE if step else _CHANGED}"""


def cancel_orphans(deleted: str) -> str:
    """Two CTEs for a statement whose CTE ``deleted`` deletes jobs (RETURNING their
    ``state`` and ``metadata`` as text): the pending dependents of the workflow tasks it
    deleted unfinished are cancelled under the ``cancel`` policy, as for a failed
    dependency, ``cancelled_by`` the deleted task. Left alone, a dependency whose row is
    gone counts as completed (the cleaner deletes finished ones), and they would run.
    Dependents under the ``run`` policy are left to promotion, which runs them once
    their other dependencies finished. Rows are found by primary key."""
    part = f"(x.metadata::jsonb->'{_KEY}')"
    return f"""orphans AS (
    SELECT e.dep_id::bigint AS id, {_task(part)} #>> ARRAY[]::text[] AS task
    FROM {deleted} x
    CROSS JOIN LATERAL unnest({_ids(_link(part, "dependent_ids"))}::text[]) AS e(dep_id)
    WHERE x.state NOT IN ('completed', 'cancelled', 'discarded')
),
orphans_cancelled AS (
    UPDATE <schema>river_job
    SET state = 'cancelled', finalized_at = now(),
        metadata = jsonb_set(river_job.metadata, '{{{_KEY},cancelled_by}}', to_jsonb(
            coalesce((SELECT o.task FROM orphans o WHERE o.id = river_job.id LIMIT 1), '')))
    WHERE river_job.id = ANY(ARRAY(SELECT id FROM orphans))
      AND river_job.state::text = 'pending'
      AND river_job.metadata->'{_KEY}' IS NOT NULL
      AND coalesce(river_job.metadata->'{_KEY}'->>'on_dep_failure', 'cancel') <> 'run'
)"""


# The dependents of tasks that were just finalized, plus any named directly.
_FINALIZED_DEPENDENTS = _link(f"f.metadata->'{_KEY}'", "dependent_ids")
_DEPENDENTS_AND_CANDIDATES = f"""SELECT unnest({_ids(_FINALIZED_DEPENDENTS)}) AS id
    FROM <schema>river_job f
    WHERE f.id = ANY(:finalized_ids::bigint[]) AND f.metadata->'{_KEY}' IS NOT NULL
    UNION
    SELECT unnest(:candidate_ids::bigint[])"""
QUERIES["workflow_promote"] = _promote(_DEPENDENTS_AND_CANDIDATES)
_STEP_CANDIDATES = f"""SELECT id FROM ({_DEPENDENTS_AND_CANDIDATES}) AS c
    WHERE id > :after_id::bigint AND id <> ALL(:skip_ids::bigint[])
    ORDER BY id LIMIT :limit::integer"""
QUERIES["workflow_promote_step"] = _promote(_STEP_CANDIDATES, step=True)
QUERIES["workflow_promote_claim_step"] = _promote(_STEP_CANDIDATES, step=True, claim=True)
QUERIES["workflow_step_candidates"] = _STEP_CANDIDATES

QUERIES["workflow_task_refused"] = """
UPDATE <schema>river_job
SET state = 'discarded', finalized_at = now(),
    errors = array_append(river_job.errors,
                          jsonb_set(:error::jsonb, '{attempt}', to_jsonb(river_job.attempt)))
WHERE id = :id::bigint AND state::text = 'pending'
RETURNING id, state::text, queue
"""

# The sweep: pending workflow tasks after ``after_id`` in id order, a bounded batch, with
# what deciding whether to name them takes.
QUERIES["workflow_pending_tasks"] = f"""
SELECT id, {_link(f"metadata->'{_KEY}'", "dep_ids")}::text,
       coalesce(metadata->'{_KEY}'->>'on_dep_failure', 'cancel')
FROM <schema>river_job
WHERE state = 'pending' AND id > :after_id::bigint AND metadata ? '{_KEY}'
ORDER BY id LIMIT :max::integer
"""

QUERIES["workflow_dep_states"] = """
SELECT id, state::text FROM <schema>river_job WHERE id = ANY(:ids::bigint[])
"""

# A workflow's tasks, by the metadata GIN index River creates. (The lowest id a caller
# may know of is not used here: a bound on id could lead a planner with stale statistics
# to a primary-key range scan over every job inserted since.)
_IN_WORKFLOW = (
    f"metadata @> jsonb_build_object('{_KEY}', jsonb_build_object('id', :workflow_id::text))"
)
# The tasks are read whole (MATERIALIZED), then ordered and cut. With the ORDER BY id
# LIMIT on the table itself, the planner's guess that 1 % of all jobs match (it can't
# estimate @>) made it walk the primary key from the oldest job, filtering every row,
# until it had the workflow's first tasks: 300 ms on 300,000 jobs, and all of them
# read for an id with no tasks (a typo, the check before an insert).
QUERIES["workflow_get"] = f"""
WITH tasks AS MATERIALIZED (
    SELECT {job_columns()}
    FROM <schema>river_job
    WHERE {_IN_WORKFLOW}
)
SELECT * FROM tasks
ORDER BY id
LIMIT :max::integer
"""

# The newest workflows: found among the newest workflow tasks (a bounded window, read
# through River's GIN index or backwards along the primary key), then each counted over
# all its tasks through the GIN index.
QUERIES["workflow_list"] = f"""
WITH recent AS (
    SELECT w.metadata->'{_KEY}'->>'id' AS workflow_id, max(w.id) AS newest
    FROM (
        SELECT id, metadata FROM <schema>river_job
        WHERE metadata ? '{_KEY}'
        ORDER BY id DESC
        LIMIT {WORKFLOW_LIST_WINDOW}
    ) AS w
    -- A workflow id that is not text (metadata written by hand) names no workflow that
    -- workflow_get could open.
    WHERE jsonb_typeof(w.metadata->'{_KEY}'->'id') = 'string'
    GROUP BY 1
    ORDER BY newest DESC
    LIMIT :max::integer
)
SELECT r.workflow_id,
       -- The name on its first task that has one, as WorkflowInfo reads it.
       coalesce((array_agg(j.metadata->'{_KEY}'->>'name' ORDER BY j.id)
                 FILTER (WHERE j.metadata->'{_KEY}' ? 'name'))[1], ''),
       count(*),
       count(*) FILTER (WHERE j.state = 'completed'),
       count(*) FILTER (WHERE j.state IN ('cancelled', 'discarded')),
       count(*) FILTER (WHERE j.state NOT IN ('completed', 'cancelled', 'discarded')),
       min({clamped("j.created_at")})
FROM recent r
JOIN <schema>river_job j
  ON j.metadata @> jsonb_build_object('{_KEY}', jsonb_build_object('id', r.workflow_id))
GROUP BY r.workflow_id, r.newest
ORDER BY r.newest DESC
"""

# Whether a task of the workflow is still unfinished. Its tasks are read whole by the
# index (as for workflow_get): a bare LIMIT 1 was planned as a sequential scan expected
# to meet a match early, which reads every job when none is left, the usual answer.
QUERIES["workflow_unfinished"] = f"""
WITH tasks AS MATERIALIZED (
    SELECT id, state FROM <schema>river_job WHERE {_IN_WORKFLOW}
)
SELECT id FROM tasks
WHERE state NOT IN ('completed', 'cancelled', 'discarded')
LIMIT 1
"""

QUERIES["workflow_retry"] = workflow_retry_sql(
    retried_state=RETRIED_STATE,
    retried_metadata=RETRIED_METADATA,
    now="now()",
    in_workflow=_IN_WORKFLOW,
    columns=job_columns(),
)

# Cancel a workflow: every task not yet finalized or running is cancelled now; running
# ones get River's cancel_attempted_at and their producers are told (as job_cancel does).
QUERIES["workflow_cancel"] = f"""
WITH targets AS (
    SELECT id, state, queue FROM <schema>river_job
    WHERE {_IN_WORKFLOW}
      AND state NOT IN ('cancelled', 'completed', 'discarded')
    FOR UPDATE
),
notified AS (
    SELECT count(pg_notify({CHANNEL.format(topic="river_control")},
                 json_build_object('action', 'cancel', 'job_id', id, 'queue', queue)::text))
    FROM targets WHERE state = 'running'
),
updated AS (
    UPDATE <schema>river_job
    SET state = CASE WHEN river_job.state = 'running' THEN river_job.state
                     ELSE 'cancelled'::<schema>river_job_state END,
        finalized_at = CASE WHEN river_job.state = 'running' THEN NULL ELSE now() END,
        metadata = jsonb_set({OBJECT_METADATA}, '{{cancel_attempted_at}}',
                             to_jsonb(:cancel_attempted_at::text), true)
    FROM targets CROSS JOIN notified
    WHERE river_job.id = targets.id
    RETURNING {job_columns("river_job")}
)
SELECT * FROM updated ORDER BY id
"""


# job_wait / workflow_wait (riverboat.wait): a waiter's announcement, and a runtime's
# word that announced jobs or workflows were finalized. A NOTIFY makes its transaction
# write a commit record; nothing here needs it on disk (the listeners' sessions would not
# survive a crash either), so the commit doesn't wait for the flush.
_NO_FLUSH = "set_config('synchronous_commit', 'off', true)"
QUERIES["job_wait_announce"] = (
    f"SELECT {_NO_FLUSH}, pg_notify({CHANNEL.format(topic='riverboat_wait')}, :payload::text)"
)
QUERIES["job_finalized_notify"] = (
    f"SELECT {_NO_FLUSH}, pg_notify({channel_sql('riverboat_finalized')}, :payload::text)"
)


class PostgresWorkflow(WorkflowStatements):
    """Postgres's half of :class:`~riverboat.dialect.base.WorkflowStatements`."""

    _queries: ClassVar[dict[str, str]] = QUERIES
    delete_cancels_orphans = True
    waits_notified = True
    workflow_ids_as_text = True
    promotion_claims = True

    def job_wait_announce(self, payload: str) -> Statement:
        return self.stmt("job_wait_announce", payload=payload, schema=self.schema)

    def job_finalized_notify(self, payload: str) -> Statement | None:
        return self.stmt("job_finalized_notify", payload=payload, schema=self.schema)

    def workflow_lock(self, workflow_id: str) -> Statement | None:
        return self.stmt("workflow_lock", workflow_id=workflow_id, schema=self.schema)

    def workflow_reserve_ids(self, count: int) -> Statement | None:
        table = render_schema("<schema>river_job", self.schema)
        return self.stmt("workflow_reserve_ids", table=table, count=count)

    def workflow_link_patches(self, patches: list[Patch], *, as_text: bool = False) -> Statement:
        return self.stmt(
            "workflow_link",
            as_text=as_text,
            ids=[i for i, _, _ in patches],
            dep_ids=[None if d is None else ",".join(map(str, d)) for _, d, _ in patches],
            dependents=[",".join(map(str, p)) for _, _, p in patches],
        )

    def id_list_param(self, ids: Sequence[int]) -> Any:
        return list(ids)

    def workflow_promote_ids(
        self, finalized_ids: list[int], candidate_ids: list[int], step: PromoteStep | None = None
    ) -> Statement:
        params: dict[str, Any] = {
            **self.promote_params(finalized_ids, candidate_ids),
            "schema": self.schema,
        }
        if step is None:
            return self.stmt("workflow_promote", **params)
        params.update(after_id=step.after_id, limit=step.limit, skip_ids=step.skip_ids)
        if (claim := step.claim) is None:
            return self.stmt("workflow_promote_step", **params)
        return self.stmt(
            "workflow_promote_claim_step",
            queue=claim.queue,
            max_to_lock=claim.max_to_lock,
            attempted_by=claim.client_id,
            max_attempted_by=MAX_ATTEMPTED_BY,
            now=self.time_param(claim.now),
            kinds=self.text_list_param(claim.kinds),
            **params,
        )

    def decode_promotion_claims(self, rows: Sequence[Sequence[Any]]) -> list[Sequence[Any]]:
        # After (id, state, queue, last candidate, candidates, locked elsewhere): the
        # claimed rows' columns.
        return [row[6:] for row in rows if row[1] == "running"]

    def decode_promotion_locked_elsewhere(self, rows: Sequence[Sequence[Any]]) -> list[int]:
        return [int(i) for i in rows[0][5] or ()] if rows else []

    def decode_promoted_step(
        self, rows: Sequence[Sequence[Any]], limit: int
    ) -> tuple[list[tuple[int, str, str]], int | None]:
        changed = [(int(r[0]), str(r[1]), str(r[2])) for r in rows if r[0] is not None]
        if not rows or rows[0][4] < limit:
            return changed, None
        return changed, int(rows[0][3])

    def workflow_dep_states(self, ids: Sequence[int]) -> Statement:
        return self.stmt("workflow_dep_states", ids=list(ids))

    def workflow_cancel(self, workflow_id: str, cancel_attempted_at: str) -> Statement:
        return self.stmt(
            "workflow_cancel",
            workflow_id=workflow_id,
            cancel_attempted_at=cancel_attempted_at,
            schema=self.schema,
        )
