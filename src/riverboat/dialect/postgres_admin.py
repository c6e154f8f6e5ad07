"""Postgres statements for job and queue administration (get, list, cancel, retry,
delete, pause, resume...). A mixin of :class:`~riverboat.dialect.postgres.PostgresDialect`.

Each operation is one statement that returns full rows, so no transaction is needed
around it, and a NOTIFY it sends goes out when that statement commits. Statements that
target one job lock it by primary key in a CTE and name ``:id`` again wherever the table is
read, so the planner keeps ``river_job_pkey`` index scans even when statistics claim the
table is empty.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from riverboat._queue import QueueRow
from riverboat._sql import Query, Statement
from riverboat.dialect._admin_common import (
    ALL_STATES,
    AdminSql,
    compact_json,
    queue_activity_sql,
    unique_key_taken_sql,
)
from riverboat.dialect._part import DialectPart
from riverboat.dialect._pg_common import (
    CHANNEL,
    JOB_READER,
    QUEUE_SELECT,
    TIME_HIGH,
    TIME_LOW,
    clamped,
    job_columns,
    state_in_bitmask,
)
from riverboat.dialect._rows import JobReader
from riverboat.dialect.postgres_workflow import (
    OBJECT_METADATA,
    RETRIED_METADATA,
    RETRIED_STATE,
    cancel_orphans,
)

__all__ = ["JOB_LIST_FILTERS", "PostgresAdmin", "PostgresAdminSql"]

_CONTROL = CHANNEL.format(topic="river_control")
_FINALIZED = "('cancelled', 'completed', 'discarded')"

QUERIES: dict[str, str] = {}

# The admin operations on one job lock its row first, so the row can be returned as it
# was when the update's conditions leave it alone (River's JobCancel/JobRetry/JobDelete).
_LOCKED_JOB = f"""WITH locked AS (
    SELECT {job_columns()}
    FROM <schema>river_job
    WHERE id = :id::bigint
    FOR UPDATE
),"""
_UPDATED_ELSE_LOCKED = """SELECT * FROM updated
UNION ALL
SELECT * FROM locked WHERE NOT EXISTS (SELECT 1 FROM updated)"""

# How a retry changes a job (one or a batch): available now (a workflow task with
# dependencies: pending, and the client has it decided at once), one more attempt for a
# job that used its last; see postgres_workflow.RETRIED_STATE and RETRIED_METADATA.
_RETRY_SET = f"""SET state = {RETRIED_STATE},
        max_attempts = CASE WHEN river_job.attempt = river_job.max_attempts
                            THEN river_job.max_attempts + 1
                            ELSE river_job.max_attempts END,
        finalized_at = NULL,
        metadata = {RETRIED_METADATA},
        scheduled_at = now()"""

# How a cancel changes a job: a running job keeps its state (its producer reports the
# outcome), any other is cancelled now; cancel_attempted_at is recorded either way.
_CANCEL_SET = f"""SET state = CASE WHEN river_job.state = 'running' THEN river_job.state
                     ELSE 'cancelled'::<schema>river_job_state END,
        finalized_at = CASE WHEN river_job.state = 'running' THEN river_job.finalized_at
                            ELSE now() END,
        metadata = jsonb_set({OBJECT_METADATA}, ARRAY['cancel_attempted_at'],
                             to_jsonb(:cancel_attempted_at::text), true)"""

# River's JobCancel. A finalized job is returned untouched and nothing is sent. Otherwise
# the owning producer is told over river_control, cancel_attempted_at is recorded (the
# completer and rescuer honour it), and a job that is not running is cancelled at once; a
# running one keeps its state until its producer reports the outcome.
QUERIES["job_cancel"] = f"""
{_LOCKED_JOB}
notified AS (
    SELECT locked.id,
           pg_notify({_CONTROL},
                     json_build_object('action', 'cancel', 'job_id', locked.id,
                                       'queue', locked.queue)::text) AS sent
    FROM locked
    WHERE locked.state NOT IN {_FINALIZED} AND locked.finalized_at IS NULL
),
updated AS (
    UPDATE <schema>river_job
    {_CANCEL_SET}
    FROM notified
    WHERE river_job.id = :id::bigint AND river_job.id = notified.id
    RETURNING {job_columns("river_job")}
)
{_UPDATED_ELSE_LOCKED}
"""

# River's JobRetry: anything but a running job, or an available one already due, goes
# back to available now; a job that used its last attempt gets one more.
QUERIES["job_retry"] = f"""
{_LOCKED_JOB}
updated AS (
    UPDATE <schema>river_job
    {_RETRY_SET}
    FROM locked
    WHERE river_job.id = :id::bigint
      AND river_job.id = locked.id
      AND river_job.state <> 'running'
      AND NOT (river_job.state = 'available' AND river_job.scheduled_at < now())
      -- Attempts are a smallint: Go River's claim of a job at 32767 overflows and fails
      -- that client's whole fetch of the queue, at every poll. Left as it is.
      AND river_job.attempt < 32767
    RETURNING {job_columns("river_job")}
)
{_UPDATED_ELSE_LOCKED}
"""

# River's JobDelete: a running job is returned (still running) instead of deleted; the
# client turns that into JobRunningError. The extra column says which case it was. A
# workflow task deleted unfinished cancels its dependents (cancel_orphans).
QUERIES["job_delete"] = f"""
{_LOCKED_JOB}
deleted AS (
    DELETE FROM <schema>river_job
    USING locked
    WHERE river_job.id = :id::bigint
      AND river_job.id = locked.id
      AND river_job.state <> 'running'
    RETURNING {job_columns("river_job")}
),
{cancel_orphans("deleted")}
SELECT deleted.*, true AS was_deleted FROM deleted
UNION ALL
SELECT locked.*, false AS was_deleted FROM locked WHERE NOT EXISTS (SELECT 1 FROM deleted)
"""

# River's JobUpdate: a shallow merge into metadata (how recorded output is written).
QUERIES["job_update"] = f"""
UPDATE <schema>river_job
SET metadata = river_job.metadata || :metadata::jsonb
WHERE id = :id::bigint
RETURNING {job_columns()}
"""

QUERIES["queue_get"] = f"SELECT {QUEUE_SELECT} FROM <schema>river_queue WHERE name = :name::text"

# One job by id set running, as JobGetAvailable would (riverboat.testing.work_job runs a
# test's job inline); a job that is running or finalized is left alone and not returned.
QUERIES["job_set_running"] = f"""
UPDATE <schema>river_job
SET state = 'running',
    attempt = least(river_job.attempt + 1, 32767),
    attempted_at = now(),
    attempted_by = array_append(river_job.attempted_by, :attempted_by::text)
WHERE id = :id::bigint AND state IN ('available', 'pending', 'retryable', 'scheduled')
RETURNING {job_columns("river_job")}
"""

# Jobs per state, each count stopping at :cap rows (the dashboard shows "10,000+"): a
# LIMIT inside each state's subquery reads at most :cap entries of the (state, ...) index,
# so a table of a million finalized jobs costs what ten thousand do.
QUERIES["job_count_by_state_capped"] = "\nUNION ALL\n".join(
    f"SELECT '{state}'::text, (SELECT count(*) FROM (SELECT 1 FROM <schema>river_job "
    f"WHERE state = '{state}' LIMIT :cap::integer) AS capped)"
    for state in ALL_STATES
)

# Jobs finalized per minute over the last :minutes minutes, by the (state, finalized_at)
# index: rows of (minute, completed, discarded).
# A finalized_at ahead of now (raw SQL, 'infinity') is no minute of the chart, and
# 'infinity' would fail the whole read.
QUERIES["job_throughput"] = """
SELECT date_trunc('minute', finalized_at) AS minute,
       count(*) FILTER (WHERE state = 'completed') AS completed,
       count(*) FILTER (WHERE state = 'discarded') AS discarded
FROM <schema>river_job
WHERE state IN ('completed', 'discarded')
  AND finalized_at IS NOT NULL
  AND finalized_at >= now() - make_interval(mins => :minutes::integer)
  AND finalized_at < now() + interval '1 day'
GROUP BY 1
ORDER BY 1
"""


# Per queue: the oldest available job's scheduled_at (the queue's latency) and jobs
# completed and discarded over the last hour, day and week, for the dashboard (which
# caches it: the week reads every job finalized in it, by the finalized_at index).
QUERIES["queue_activity"] = queue_activity_sql(
    clamped("scheduled_at"),
    """
    SELECT queue,
           count(*) FILTER (WHERE state = 'completed'
                            AND finalized_at >= now() - interval '1 hour') AS completed_1h,
           count(*) FILTER (WHERE state = 'completed'
                            AND finalized_at >= now() - interval '1 day') AS completed_24h,
           count(*) FILTER (WHERE state = 'completed') AS completed_7d,
           count(*) FILTER (WHERE state = 'discarded'
                            AND finalized_at >= now() - interval '1 hour') AS discarded_1h,
           count(*) FILTER (WHERE state = 'discarded'
                            AND finalized_at >= now() - interval '1 day') AS discarded_24h,
           count(*) FILTER (WHERE state = 'discarded') AS discarded_7d
    FROM <schema>river_job
    WHERE state IN ('completed', 'discarded')
      AND finalized_at IS NOT NULL
      AND finalized_at >= now() - interval '7 days'
    GROUP BY queue
""",
)

QUERIES["queue_list"] = (
    f"SELECT {QUEUE_SELECT} FROM <schema>river_queue ORDER BY name ASC LIMIT :max::integer"
)

# River's QueuePause / QueueResume plus their river_control notification, in one
# statement. paused_at and updated_at change only for a queue whose state flips. The
# notification goes out for "*" even when no queue row exists (as River's does), else only
# when the named queue exists; the outer join always yields the "notified" row, and a row
# of NULLs stands for "no queue matched".
_QUEUE_TOGGLE = f"""
WITH updated AS (
    UPDATE <schema>river_queue
    SET paused_at = {{paused_at}},
        updated_at = CASE WHEN {{flips}} THEN now() ELSE updated_at END
    WHERE :name::text = '*' OR name = :name::text
    RETURNING {QUEUE_SELECT}
),
notified AS (
    SELECT count(pg_notify({_CONTROL}, :payload::text)) AS sent
    FROM (SELECT 1 WHERE :name::text = '*' OR EXISTS (SELECT 1 FROM updated)) AS hit
)
SELECT updated.* FROM notified LEFT JOIN updated ON true ORDER BY updated.name
"""
QUERIES["queue_pause"] = _QUEUE_TOGGLE.format(
    paused_at="coalesce(paused_at, now())", flips="paused_at IS NULL"
)
QUERIES["queue_resume"] = _QUEUE_TOGGLE.format(paused_at="NULL", flips="paused_at IS NOT NULL")

# River's QueueUpdate: metadata is replaced (not merged), and producers hear about it.
QUERIES["queue_update"] = f"""
WITH updated AS (
    UPDATE <schema>river_queue
    SET metadata = CASE WHEN :metadata_do_update::boolean THEN :metadata::jsonb
                        ELSE metadata END,
        updated_at = now()
    WHERE name = :name::text
    RETURNING {QUEUE_SELECT}
),
notified AS (
    SELECT count(pg_notify({_CONTROL}, :payload::text)) AS sent
    FROM updated
    WHERE :metadata_do_update::boolean
)
SELECT updated.* FROM updated CROSS JOIN notified
"""

# -- job list / delete many: composed from the filters actually given -----------------

# Filter name -> SQL condition on river_job. Filters left out are absent from the SQL (not
# "param IS NULL OR ..."), so a generic plan still uses the right index.
_FILTER_SQL: dict[str, str] = {
    "ids": "id = ANY(:ids::bigint[])",
    "kinds": "kind = ANY(:kinds::text[])",
    "queues": "queue = ANY(:queues::text[])",
    "states": "state = ANY(:states::text[]::<schema>river_job_state[])",
    "priorities": "priority = ANY(:priorities::smallint[])",
    "tags_all": "tags @> :tags_all::varchar[]",
    "tags_any": "tags && :tags_any::varchar[]",
    "metadata": "metadata @> :metadata::jsonb",
    # args holding every one of these top-level keys; args whose JSON text contains
    # this (case-insensitive, a LIKE pattern the admin layer escapes); created before.
    "args_keys": "args ?& :args_keys::text[]",
    # jsonb's text, compact (see _admin's args_text): no space after ':' or ','.
    "args_text": "replace(replace(args::text, ': ', ':'), ', ', ',') ILIKE :args_text::text",
    "created_before": "created_at < :created_before::timestamptz",
}
JOB_LIST_FILTERS = tuple(_FILTER_SQL)


def _update_picked(set_clause: str) -> str:
    """A batch update of the rows ``{where}`` picks (up to ``:max`` by id, rows another
    transaction holds skipped), the updated rows in the CTE ``updated``."""
    return f"""WITH picked AS (
    SELECT id FROM <schema>river_job
    WHERE {{where}}
    ORDER BY id
    LIMIT :max::integer
    FOR UPDATE SKIP LOCKED
),
updated AS (
    UPDATE <schema>river_job
    {set_clause}
    WHERE river_job.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING {job_columns("river_job")}
)"""


# A batch of River's JobRetry (see job_retry): rows another transaction holds are skipped
# (SKIP LOCKED), and the update goes by an array of ids, as delete_many's.
_RETRY_MANY = f"""{_update_picked(_RETRY_SET)}
SELECT * FROM updated ORDER BY id
"""

# A batch of River's JobCancel (see job_cancel); the producers of running jobs are told.
_CANCEL_MANY = f"""{_update_picked(_CANCEL_SET)},
notified AS (
    SELECT count(pg_notify({_CONTROL},
                 json_build_object('action', 'cancel', 'job_id', id, 'queue', queue)::text))
           AS sent
    FROM updated
    WHERE state = 'running'
)
SELECT updated.* FROM updated CROSS JOIN notified ORDER BY id
"""


class PostgresAdminSql(AdminSql):
    """Postgres's spelling of the admin statements built per call."""

    limit = ":max::integer"
    state_text = "state::text"

    @staticmethod
    def where(filters: Sequence[str]) -> list[str]:
        return [_FILTER_SQL[name] for name in filters]

    cursor_id = ":cursor_id::bigint"
    cursor_time = ":cursor_time::timestamptz"

    @staticmethod
    def time_key(expression: str) -> str:
        return expression

    @classmethod
    def cursor_bound(cls, column: str) -> str:
        # Timestamps are read clamped ('infinity' as 9999-12-29, '-infinity' and years BC
        # as 0001-01-03: _pg_common) but ordered and compared as stored, so a cursor
        # time at a clamp bound may stand for a value beyond it: the value its own row
        # holds is the bound then. Compared with the clamp itself, the rows past it
        # ('infinity' > 9999-12-29) came back on every page, which never ended (or, in
        # descending order, the first of them was skipped).
        cursor = cls.cursor_time
        return f"""(CASE WHEN {cursor} IN ({TIME_LOW}, {TIME_HIGH})
            THEN coalesce((SELECT c.{column} FROM <schema>river_job c
                           WHERE c.id = {cls.cursor_id}), {cursor})
            ELSE {cursor} END)"""

    retry_eligible = f"""state <> 'running' AND NOT (state = 'available' AND scheduled_at < now())
    AND attempt < 32767 AND NOT {unique_key_taken_sql(state_in_bitmask)}"""

    retry_many_sql = _RETRY_MANY
    cancel_many_sql = _CANCEL_MANY

    @staticmethod
    def delete_many(where: str) -> str:
        # Running jobs are skipped, and so are rows another transaction holds (SKIP
        # LOCKED): a job being retried or fetched right now is left alone, and the lock
        # re-checks the filters against the row's latest version.
        return f"""
WITH doomed AS (
    SELECT id FROM <schema>river_job
    WHERE {where}
    ORDER BY id
    LIMIT :max::integer
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    -- By an array of ids: a generic plan guesses the LIMIT as a tenth of the table, and
    -- a join would then scan all of river_job.
    DELETE FROM <schema>river_job
    WHERE river_job.id = ANY(ARRAY(SELECT id FROM doomed))
    RETURNING {job_columns("river_job")}
),
{cancel_orphans("deleted")}
SELECT * FROM deleted ORDER BY id
"""


class PostgresAdmin(DialectPart):
    """Postgres's half of :class:`~riverboat.dialect._admin_common.AdminStatements`:
    one statement per operation, NOTIFY sent by the statement itself."""

    _queries: ClassVar[dict[str, str]] = QUERIES
    admin_sql: ClassVar[type[AdminSql]] = PostgresAdminSql
    job_list_filters: ClassVar[tuple[str, ...]] = JOB_LIST_FILTERS
    job_reader: ClassVar[JobReader] = JOB_READER

    def job_cancel(self, job_id: int, cancel_attempted_at: str) -> Statement:
        return self.stmt(
            "job_cancel", id=job_id, cancel_attempted_at=cancel_attempted_at, schema=self.schema
        )

    def job_delete(self, job_id: int) -> Statement:
        return self.stmt("job_delete", id=job_id)

    def filter_params(self, filters: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in names:
            value = filters[name]
            if name == "metadata":
                out[name] = compact_json(value)
            elif name in ("args_text", "created_before"):
                out[name] = value
            else:
                out[name] = list(value)
        return out

    def cancel_many_statement(
        self, query: Query, params: dict[str, Any], cancel_attempted_at: str
    ) -> Statement:
        # The notification channel's name is bound from the schema (see CHANNEL).
        params = {**params, "cancel_attempted_at": cancel_attempted_at, "schema": self.schema}
        return Statement(query, params)

    def cursor_time_param(self, value: datetime) -> Any:
        return value

    def decode_throughput(self, rows: Sequence[Sequence[Any]]) -> list[tuple[datetime, int, int]]:
        return [(row[0], int(row[1]), int(row[2])) for row in rows]

    def decode_queue(self, row: Sequence[Any]) -> QueueRow:
        return QueueRow(row[0], row[1], json.loads(row[2]), row[3], row[4])

    def decode_timestamp(self, value: Any) -> datetime | None:
        return value if isinstance(value, datetime) else None

    def queue_with_control(
        self, query: str, params: dict[str, Any], payload: str, *, notify: bool = True
    ) -> Statement:
        # The statement decides whether to notify (queue_update: only when the metadata
        # is replaced), so the payload is always bound.
        return self.stmt(query, **params, payload=payload, schema=self.schema)
