"""SQLite statements for job and queue administration, the twins of
:mod:`~riverboat.dialect.postgres_admin` (same method names, arguments and rows). A mixin
of :class:`~riverboat.dialect.sqlite.SqliteDialect`.

Where SQLite can do an operation in one statement it does, returning full rows, with no
transaction around it. SQLite allows no data-modifying CTEs and one table per DML
statement, so an operation that must also write a ``river_notification`` outbox row (the
stand-in for Postgres's NOTIFY), or must report on a row it may not touch, is a
:class:`~riverboat._sql.Statement` with ``then`` the driver runs in one
``BEGIN IMMEDIATE`` transaction (or in the caller's, for ``*_tx``).

Differences from Postgres, all as in River's SQLite driver:

* ``job_list`` and ``job_delete_many`` have no ``metadata`` containment filter
  (:class:`~riverboat.errors.NotSupportedError`);
* timestamps have millisecond precision.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

from riverboat._queue import QueueRow
from riverboat._sql import Query, Statement
from riverboat.dialect._admin_common import (
    ALL_STATES,
    AdminSql,
    queue_activity_sql,
    unique_key_taken_sql,
)
from riverboat.dialect._part import DialectPart
from riverboat.dialect._rows import JobReader
from riverboat.dialect._sqlite_common import (
    JOB_READER,
    NOW,
    QUEUE_SELECT,
    format_timestamp,
    job_columns,
    metadata_merge,
    parse_timestamp,
    state_in_bitmask,
    ts_exact,
    ts_key,
    valid_json_or,
)
from riverboat.dialect.sqlite_workflow import RETRIED_METADATA, RETRIED_STATE
from riverboat.errors import NotSupportedError

__all__ = ["JOB_LIST_FILTERS", "SqliteAdmin", "SqliteAdminSql"]

_FINALIZED = "('cancelled', 'completed', 'discarded')"

QUERIES: dict[str, str] = {}

# River's JobCancel. One UPDATE that always returns the row: a finalized job is written
# back unchanged (SQLite cannot UPDATE in a CTE and SELECT the untouched row in the same
# statement, so the CASEs do the "leave it alone"). A job that is not running is cancelled
# at once; a running one keeps its state and gets cancel_attempted_at, which its producer,
# the completer and the rescuer honour.
_JOB_WAS_FINALIZED = f"(river_job.state IN {_FINALIZED} OR river_job.finalized_at IS NOT NULL)"
QUERIES["job_cancel"] = f"""
UPDATE <schema>river_job
SET state = CASE WHEN {_JOB_WAS_FINALIZED} OR river_job.state = 'running'
                 THEN river_job.state ELSE 'cancelled' END,
    finalized_at = CASE WHEN {_JOB_WAS_FINALIZED} OR river_job.state = 'running'
                        THEN river_job.finalized_at ELSE {NOW} END,
    metadata = CASE WHEN {_JOB_WAS_FINALIZED} THEN river_job.metadata
                    ELSE jsonb_set(river_job.metadata, '$.cancel_attempted_at',
                                   :cancel_attempted_at) END
WHERE id = :id
RETURNING {job_columns()}
"""

# The river_control "cancel" outbox row, run right after job_cancel in its transaction.
# River's SQLite driver writes none, so there a remote cancel of a running job only lands
# when the job ends (or the rescuer finds it); riverboat tells the owning producer within a
# listener poll. The row is written only if job_cancel just stamped *this* call's
# cancel_attempted_at, i.e. the job was not finalized, as Postgres's pg_notify does.
QUERIES["job_cancel_notify"] = """
INSERT INTO <schema>river_notification (payload, topic)
SELECT json_object('action', 'cancel', 'job_id', id, 'queue', queue), 'river_control'
FROM <schema>river_job
WHERE id = :id
  AND metadata ->> '$.cancel_attempted_at' = :cancel_attempted_at
"""

# River's JobRetry in one UPDATE that always returns the row: anything but a running job,
# or an available one already due, goes back to available now; a job that used its last
# attempt gets one more. Every SET expression sees the row as it was before the statement.
_RETRYABLE = (
    "(river_job.state <> 'running' AND river_job.attempt < 32767"
    " AND NOT (river_job.state = 'available'"
    f" AND {ts_key('river_job.scheduled_at', unreadable_first=False)} < {NOW}))"
)
QUERIES["job_retry"] = f"""
UPDATE <schema>river_job
SET state = CASE WHEN {_RETRYABLE} THEN {RETRIED_STATE} ELSE river_job.state END,
    max_attempts = CASE WHEN {_RETRYABLE} AND river_job.attempt = river_job.max_attempts
                        THEN river_job.max_attempts + 1
                        ELSE river_job.max_attempts END,
    finalized_at = CASE WHEN {_RETRYABLE} THEN NULL ELSE river_job.finalized_at END,
    -- River 0.51: a cancellation asked of an earlier attempt must not cancel the next.
    metadata = CASE WHEN {_RETRYABLE} THEN {RETRIED_METADATA} ELSE river_job.metadata END,
    scheduled_at = CASE WHEN {_RETRYABLE} THEN {NOW} ELSE river_job.scheduled_at END
WHERE id = :id
RETURNING {job_columns()}
"""

# River's JobDelete: the row (with whether it goes) is read first, then deleted unless it
# is running, in one transaction. A DELETE ... RETURNING alone could not tell a running
# job from a missing one.
QUERIES["job_delete"] = f"""
SELECT {job_columns()}, state <> 'running' AS was_deleted
FROM <schema>river_job
WHERE id = :id
"""
QUERIES["job_delete_apply"] = """
DELETE FROM <schema>river_job WHERE id = :id AND state <> 'running'
"""

_METADATA_OBJECT = valid_json_or("river_job.metadata", "jsonb('{}')", "object")

# River's JobUpdate on SQLite: top-level keys replaced, nulls kept (River 0.50).
QUERIES["job_update"] = f"""
UPDATE <schema>river_job
SET metadata = {metadata_merge(_METADATA_OBJECT, "json(:metadata)")}
WHERE id = :id
RETURNING {job_columns()}
"""

QUERIES["queue_get"] = f"SELECT {QUEUE_SELECT} FROM <schema>river_queue WHERE name = :name"

# One job by id set running, as JobGetAvailable would (riverboat.testing.work_job runs a
# test's job inline); a job that is running or finalized is left alone and not returned.
QUERIES["job_set_running"] = f"""
UPDATE <schema>river_job
SET attempt = river_job.attempt + 1,
    attempted_at = {NOW},
    attempted_by = jsonb_insert(coalesce(river_job.attempted_by, jsonb('[]')), '$[#]',
                                :attempted_by),
    state = 'running'
WHERE id = :id AND state IN ('available', 'pending', 'retryable', 'scheduled')
RETURNING {job_columns()}
"""

# Jobs per state, each count stopping at :cap rows: see postgres_admin.
QUERIES["job_count_by_state_capped"] = "\nUNION ALL\n".join(
    f"SELECT '{state}', (SELECT count(*) FROM (SELECT 1 FROM <schema>river_job "
    f"WHERE state = '{state}' LIMIT :cap))"
    for state in ALL_STATES
)

# Jobs finalized per minute over the last :minutes minutes, by the (state, finalized_at)
# index. River's timestamp text compares as text; its first 16 characters are the minute.
QUERIES["job_throughput"] = """
SELECT substr(finalized_at, 1, 16) AS minute,
       sum(state = 'completed') AS completed,
       sum(state = 'discarded') AS discarded
FROM <schema>river_job
WHERE state IN ('completed', 'discarded')
  AND finalized_at IS NOT NULL
  AND finalized_at >= datetime('now', '-' || :minutes || ' minutes')
  AND finalized_at < datetime('now', '+1 day')
GROUP BY 1
ORDER BY 1
"""


# Per queue: the oldest available job's scheduled_at (the queue's latency) and jobs
# completed and discarded over the last hour, day and week, for the dashboard (which
# caches it: the week reads every job finalized in it, by the finalized_at index).
QUERIES["queue_activity"] = queue_activity_sql(
    ts_exact("scheduled_at"),
    """
    SELECT queue,
           sum(state = 'completed' AND finalized_at >= datetime('now', '-1 hours'))
               AS completed_1h,
           sum(state = 'completed' AND finalized_at >= datetime('now', '-1 days'))
               AS completed_24h,
           sum(state = 'completed') AS completed_7d,
           sum(state = 'discarded' AND finalized_at >= datetime('now', '-1 hours'))
               AS discarded_1h,
           sum(state = 'discarded' AND finalized_at >= datetime('now', '-1 days'))
               AS discarded_24h,
           sum(state = 'discarded') AS discarded_7d
    FROM <schema>river_job
    WHERE state IN ('completed', 'discarded')
      AND finalized_at IS NOT NULL
      AND finalized_at >= datetime('now', '-7 days')
    GROUP BY queue
""",
)

QUERIES["queue_list"] = (
    f"SELECT {QUEUE_SELECT} FROM <schema>river_queue ORDER BY name ASC LIMIT :max"
)

# River's QueuePause / QueueResume. paused_at and updated_at change only for a queue whose
# state flips. RETURNING order is SQLite's; decode_queues sorts by name.
_QUEUE_TOGGLE = f"""
UPDATE <schema>river_queue
SET paused_at = {{paused_at}},
    updated_at = CASE WHEN {{flips}} THEN {NOW} ELSE updated_at END
WHERE name = :name OR :name = '*'
RETURNING {QUEUE_SELECT}
"""
QUERIES["queue_pause"] = _QUEUE_TOGGLE.format(
    paused_at=f"coalesce(paused_at, {NOW})", flips="paused_at IS NULL"
)
QUERIES["queue_resume"] = _QUEUE_TOGGLE.format(paused_at="NULL", flips="paused_at IS NOT NULL")

# The river_control outbox row for pause/resume/metadata_changed: for "*" always (as
# River does, even with no queue rows), else only when the named queue exists.
QUERIES["queue_control_notify"] = """
INSERT INTO <schema>river_notification (payload, topic)
SELECT :payload, 'river_control'
WHERE :name = '*' OR EXISTS (SELECT 1 FROM <schema>river_queue WHERE name = :name)
"""

# River's QueueUpdate: metadata is replaced (not merged); updated_at always moves.
QUERIES["queue_update"] = f"""
UPDATE <schema>river_queue
SET metadata = CASE WHEN :metadata_do_update THEN jsonb(:metadata) ELSE metadata END,
    updated_at = {NOW}
WHERE name = :name
RETURNING {QUEUE_SELECT}
"""

# -- job list / delete many: composed from the filters actually given -----------------

# Arrays travel as one JSON array parameter each (SQLite binds no arrays). tags is a JSONB
# array: "all" means no wanted tag is missing, "any" that one of them is present.
# A column's JSON only where it is valid: one row with malformed JSON (written by another
# client) made json_each and json() raise 'malformed JSON', and every search by args or
# tags failed, the dashboard's too (503). Such a row matches no args or tags filter.
_TAGS = "CASE WHEN json_valid(river_job.tags, 10) THEN river_job.tags END"
_ARGS = "CASE WHEN json_valid(river_job.args, 10) THEN river_job.args END"
_FILTER_SQL: dict[str, str] = {
    "ids": "id IN (SELECT value FROM json_each(:ids))",
    "kinds": "kind IN (SELECT value FROM json_each(:kinds))",
    "queues": "queue IN (SELECT value FROM json_each(:queues))",
    "states": "state IN (SELECT value FROM json_each(:states))",
    "priorities": "priority IN (SELECT value FROM json_each(:priorities))",
    "tags_all": (
        "NOT EXISTS (SELECT 1 FROM json_each(:tags_all) AS wanted"
        f" WHERE NOT EXISTS (SELECT 1 FROM json_each({_TAGS}) AS have"
        " WHERE have.value = wanted.value))"
    ),
    "tags_any": (
        f"EXISTS (SELECT 1 FROM json_each({_TAGS}) AS have"
        " JOIN json_each(:tags_any) AS wanted ON have.value = wanted.value)"
    ),
    # See postgres_admin. SQLite's LIKE is case-insensitive for ASCII letters.
    "args_keys": (
        "NOT EXISTS (SELECT 1 FROM json_each(:args_keys) AS wanted"
        f" WHERE NOT EXISTS (SELECT 1 FROM json_each({_ARGS}) AS have"
        " WHERE have.key = wanted.value))"
    ),
    # The args' JSON as Postgres prints it, but compact (see _admin's args_text): the
    # <, > and & that riverboat and Go write escaped (\u003c, as Go's encoder does) read
    # as themselves, and no space after ':' or ','. SQLite folds case for ASCII only.
    "args_text": (
        f"replace(replace(replace(replace(replace(json({_ARGS}), '\\u003c', '<'),"
        " '\\u003e', '>'), '\\u0026', '&'), ': ', ':'), ', ', ',')"
        " LIKE :args_text ESCAPE '\\'"
    ),
    "created_before": f"{ts_exact('created_at')} < :created_before",
}
JOB_LIST_FILTERS = (*_FILTER_SQL, "metadata")


# A batch of River's JobRetry / JobCancel (see job_retry, job_cancel). SQLite's single
# write lock is held throughout, so nothing is skipped; RETURNING order is SQLite's and
# the client sorts by id.
_RETRY_MANY = f"""
UPDATE <schema>river_job
SET state = {RETRIED_STATE},
    max_attempts = CASE WHEN attempt = max_attempts THEN max_attempts + 1
                        ELSE max_attempts END,
    finalized_at = NULL,
    -- As job_retry: a cancellation asked of an earlier attempt must not cancel the next.
    metadata = {RETRIED_METADATA},
    scheduled_at = {NOW}
WHERE id IN (SELECT id FROM <schema>river_job WHERE {{where}} ORDER BY id LIMIT :max)
RETURNING {job_columns()}
"""
_CANCEL_MANY = f"""
UPDATE <schema>river_job
SET state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
    finalized_at = CASE WHEN state = 'running' THEN finalized_at ELSE {NOW} END,
    metadata = jsonb_set(metadata, '$.cancel_attempted_at', :cancel_attempted_at)
WHERE id IN (SELECT id FROM <schema>river_job WHERE {{where}} ORDER BY id LIMIT :max)
RETURNING {job_columns()}
"""
# The outbox rows telling the producers of the running jobs that batch just stamped.
QUERIES["job_cancel_many_notify"] = """
INSERT INTO <schema>river_notification (payload, topic)
SELECT json_object('action', 'cancel', 'job_id', id, 'queue', queue), 'river_control'
FROM <schema>river_job
WHERE state = 'running' AND id > :cursor_id
  AND metadata ->> '$.cancel_attempted_at' = :cancel_attempted_at
"""


class SqliteAdminSql(AdminSql):
    """SQLite's spelling of the admin statements built per call."""

    limit = ":max"
    state_text = "state"
    cursor_id = ":cursor_id"
    cursor_time = ":cursor_time"

    @staticmethod
    def where(filters: Sequence[str]) -> list[str]:
        if "metadata" in filters:
            raise NotSupportedError(
                "the metadata filter (JSON containment) is not supported by the sqlite "
                "dialect (nor by River's SQLite driver); filter on ids, kinds, queues, "
                "states, priorities or tags instead"
            )
        return [_FILTER_SQL[name] for name in filters]

    @staticmethod
    def time_key(expression: str) -> str:
        # Ordered and compared as normalised text: rows written by Go drop trailing zeros
        # of the milliseconds ("...:05.5", which would otherwise sort before
        # "...:05.500") or use another spelling (Go's "+0000 UTC", an offset, a T):
        # ts_exact reads them all.
        return ts_exact(expression)

    retry_eligible = (
        "state <> 'running' AND attempt < 32767 AND NOT (state = 'available'"
        f" AND {ts_key('scheduled_at', unreadable_first=False)} < {NOW})"
        f" AND NOT {unique_key_taken_sql(state_in_bitmask)}"
    )

    retry_many_sql = _RETRY_MANY
    cancel_many_sql = _CANCEL_MANY

    @staticmethod
    def delete_many(where: str) -> str:
        # No SKIP LOCKED is needed: the DELETE holds SQLite's single write lock
        # throughout. RETURNING order is unspecified in SQLite, but both plans it can
        # pick here (rowid lookups from the sorted IN list, or a rowid-order scan) visit
        # rows by ascending id, which is the order Postgres returns (a test checks it).
        return f"""
DELETE FROM <schema>river_job
WHERE id IN (
    SELECT id FROM <schema>river_job
    WHERE {where}
    ORDER BY id
    LIMIT :max
)
RETURNING {job_columns()}
"""


class SqliteAdmin(DialectPart):
    """SQLite's half of :class:`~riverboat.dialect._admin_common.AdminStatements`: an
    operation that also writes a river_notification outbox row (the stand-in for
    NOTIFY) or reads a row it may not touch is a :class:`Statement` with ``then``."""

    _queries: ClassVar[dict[str, str]] = QUERIES
    admin_sql: ClassVar[type[AdminSql]] = SqliteAdminSql
    job_list_filters: ClassVar[tuple[str, ...]] = JOB_LIST_FILTERS
    job_reader: ClassVar[JobReader] = JOB_READER

    def job_cancel(self, job_id: int, cancel_attempted_at: str) -> Statement:
        params = {"id": job_id, "cancel_attempted_at": cancel_attempted_at}
        notify = self.stmt("job_cancel_notify", **params)
        return Statement(self.q["job_cancel"], params, (notify,))

    def job_delete(self, job_id: int) -> Statement:
        return Statement(
            self.q["job_delete"], {"id": job_id}, (self.stmt("job_delete_apply", id=job_id),)
        )

    def filter_params(self, filters: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
        # One JSON array parameter per list filter: SQLite binds no arrays.
        out: dict[str, Any] = {}
        for name in names:
            value = filters[name]
            if name == "args_text":
                out[name] = value
            elif name == "created_before":
                out[name] = format_timestamp(value)
            else:
                out[name] = json.dumps(list(value))
        return out

    def cancel_many_statement(
        self, query: Query, params: dict[str, Any], cancel_attempted_at: str
    ) -> Statement:
        params = {**params, "cancel_attempted_at": cancel_attempted_at}
        notify = self.stmt(
            "job_cancel_many_notify",
            cursor_id=params["cursor_id"],
            cancel_attempted_at=cancel_attempted_at,
        )
        return Statement(query, params, (notify,))

    def cursor_time_param(self, value: datetime) -> Any:
        return format_timestamp(value)

    def decode_throughput(self, rows: Sequence[Sequence[Any]]) -> list[tuple[datetime, int, int]]:
        return [
            (
                datetime.strptime(row[0], "%Y-%m-%d %H:%M").replace(tzinfo=UTC),
                int(row[1]),
                int(row[2]),
            )
            for row in rows
            if isinstance(row[0], str) and len(row[0]) == 16
        ]

    def decode_timestamp(self, value: Any) -> datetime | None:
        return parse_timestamp(value) if isinstance(value, str) else None

    def decode_queue(self, row: Sequence[Any]) -> QueueRow:
        """One ``river_queue`` row, its text timestamps as datetimes (as on Postgres)."""
        return QueueRow(
            row[0],
            parse_timestamp(row[1]),  # type: ignore[arg-type]
            json.loads(row[2]) if row[2] else {},
            parse_timestamp(row[3]),
            parse_timestamp(row[4]),  # type: ignore[arg-type]
        )

    def queue_with_control(
        self, query: str, params: dict[str, Any], payload: str, *, notify: bool = True
    ) -> Statement:
        if not notify:
            return Statement(self.q[query], params)
        outbox = self.stmt("queue_control_notify", name=params["name"], payload=payload)
        return Statement(self.q[query], params, (outbox,))
