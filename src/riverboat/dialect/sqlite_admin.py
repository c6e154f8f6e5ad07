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

* metadata merges (``job_update``) use ``jsonb_patch`` (RFC 7396): nested objects merge
  recursively, and a ``null`` value removes its key, where Postgres's ``||`` replaces
  top-level keys and keeps nulls;
* ``job_list`` and ``job_delete_many`` have no ``metadata`` containment filter
  (:class:`~riverboat.errors.NotSupportedError`);
* timestamps have millisecond precision.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from riverboat._job import JobRow, JobState
from riverboat._queue import QueueRow
from riverboat._sql import Query, Statement, render_schema
from riverboat.dialect._sqlite_common import (
    NOW,
    format_timestamp,
    job_columns,
    parse_timestamp,
    ts_exact,
    ts_key,
)
from riverboat.errors import NotSupportedError

__all__ = ["JOB_LIST_FILTERS", "QUEUE_COLUMNS", "SqliteAdmin"]

QUEUE_COLUMNS = "name, created_at, json(metadata) AS metadata, paused_at, updated_at"
_FINALIZED = "('cancelled', 'completed', 'discarded')"

QUERIES: dict[str, str] = {}
_ALL_STATES = tuple(state.value for state in JobState)

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
    "(river_job.state <> 'running'"
    " AND NOT (river_job.state = 'available'"
    f" AND {ts_key('river_job.scheduled_at', unreadable_first=False)} < {NOW}))"
)
QUERIES["job_retry"] = f"""
UPDATE <schema>river_job
SET state = CASE WHEN {_RETRYABLE} THEN 'available' ELSE river_job.state END,
    max_attempts = CASE WHEN {_RETRYABLE} AND river_job.attempt = river_job.max_attempts
                        THEN river_job.max_attempts + 1
                        ELSE river_job.max_attempts END,
    finalized_at = CASE WHEN {_RETRYABLE} THEN NULL ELSE river_job.finalized_at END,
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

# River's JobUpdate on SQLite: metadata merged with jsonb_patch (recursive, RFC 7396).
QUERIES["job_update"] = f"""
UPDATE <schema>river_job
SET metadata = jsonb_patch(river_job.metadata, :metadata)
WHERE id = :id
RETURNING {job_columns()}
"""

QUERIES["queue_get"] = f"SELECT {QUEUE_COLUMNS} FROM <schema>river_queue WHERE name = :name"

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
    for state in _ALL_STATES
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
GROUP BY 1
ORDER BY 1
"""


QUERIES["queue_list"] = (
    f"SELECT {QUEUE_COLUMNS} FROM <schema>river_queue ORDER BY name ASC LIMIT :max"
)

# River's QueuePause / QueueResume. paused_at and updated_at change only for a queue whose
# state flips. RETURNING order is SQLite's; decode_queues sorts by name.
_QUEUE_TOGGLE = f"""
UPDATE <schema>river_queue
SET paused_at = {{paused_at}},
    updated_at = CASE WHEN {{flips}} THEN {NOW} ELSE updated_at END
WHERE name = :name OR :name = '*'
RETURNING {QUEUE_COLUMNS}
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
RETURNING {QUEUE_COLUMNS}
"""

# -- job list / delete many: composed from the filters actually given -----------------

# Arrays travel as one JSON array parameter each (SQLite binds no arrays). tags is a JSONB
# array: "all" means no wanted tag is missing, "any" that one of them is present.
_FILTER_SQL: dict[str, str] = {
    "ids": "id IN (SELECT value FROM json_each(:ids))",
    "kinds": "kind IN (SELECT value FROM json_each(:kinds))",
    "queues": "queue IN (SELECT value FROM json_each(:queues))",
    "states": "state IN (SELECT value FROM json_each(:states))",
    "priorities": "priority IN (SELECT value FROM json_each(:priorities))",
    "tags_all": (
        "NOT EXISTS (SELECT 1 FROM json_each(:tags_all) AS wanted"
        " WHERE NOT EXISTS (SELECT 1 FROM json_each(river_job.tags) AS have"
        " WHERE have.value = wanted.value))"
    ),
    "tags_any": (
        "EXISTS (SELECT 1 FROM json_each(river_job.tags) AS have"
        " JOIN json_each(:tags_any) AS wanted ON have.value = wanted.value)"
    ),
}
JOB_LIST_FILTERS = (*_FILTER_SQL, "metadata")

_ORDER_COLUMNS = ("id", "scheduled_at", "attempted_at", "finalized_at", "created_at")
_NOT_NULL_COLUMNS = frozenset({"id", "scheduled_at", "created_at"})


def _time_key(column: str) -> str:
    # Ordered and compared as normalised text: rows written by Go drop trailing zeros of
    # the milliseconds ("...:05.5", which would otherwise sort before "...:05.500") or
    # use another spelling (Go's "+0000 UTC", an offset, a T): ts_exact reads them all.
    return ts_exact(column)


def _where(filters: Sequence[str]) -> list[str]:
    if "metadata" in filters:
        raise NotSupportedError(
            "the metadata filter (JSON containment) is not supported by the sqlite dialect "
            "(nor by River's SQLite driver); filter on ids, kinds, queues, states, "
            "priorities or tags instead"
        )
    return [_FILTER_SQL[name] for name in filters]


def _keyset(column: str, descending: bool, cursor_time_null: bool) -> str:
    """Rows strictly after the cursor ``(:cursor_time, :cursor_id)`` in list order (NULLs
    last ascending, first descending, as on Postgres)."""
    if column == "id":
        return "id < :cursor_id" if descending else "id > :cursor_id"
    time = _time_key(column)
    key = f"({time}, id)"
    after = f"({_time_key(':cursor_time')}, :cursor_id)"
    # NULL-ness of the normalised time, not of the column: a value SQLite can't read
    # sorts with the NULLs, so it must page with them too.
    nullable = column not in _NOT_NULL_COLUMNS
    if not descending:
        if cursor_time_null:
            return f"({time} IS NULL AND id > :cursor_id)"
        tail = f" OR {time} IS NULL" if nullable else ""
        return f"({key} > {after}{tail})"
    if cursor_time_null:
        return f"(({time} IS NULL AND id < :cursor_id) OR {time} IS NOT NULL)"
    return f"{key} < {after}"


def _order_by(column: str, descending: bool) -> str:
    if column == "id":
        return "id DESC" if descending else "id ASC"
    if descending:
        return f"{_time_key(column)} DESC NULLS FIRST, id DESC"
    return f"{_time_key(column)} ASC NULLS LAST, id ASC"


def _states_literal(states: Sequence[str]) -> str:
    """``state IN ('a', 'b')`` with the states written out: SQLite's planner can then read
    the state's index entries for a rare state instead of walking every rowid (it cannot
    look into json_each). The names come from the enum, never from input."""
    for state in states:
        if state not in _ALL_STATES:
            raise ValueError(f"{state!r} is not a job state")
    return "state IN (" + ", ".join(f"'{state}'" for state in states) + ")"


# Jobs per (queue, state) for the given states: metrics sample it (contrib.prometheus),
# at most once per interval and only on the leader, and riverboat ui's overview. Served
# by the (state, queue, ...) index.
@lru_cache(maxsize=256)
def _count_by_queue_query(schema: str | None, states: tuple[str, ...]) -> Query:
    text = (
        "SELECT queue, state, count(*) "
        f"FROM <schema>river_job WHERE {_states_literal(states)} GROUP BY queue, state"
    )
    return Query("job_count_by_queue_and_state", render_schema(text, schema))


@lru_cache(maxsize=1024)
def _job_list_query(
    schema: str | None,
    filters: tuple[str, ...],
    column: str,
    descending: bool,
    cursor: str,
    states: tuple[str, ...] = (),
    where_sql: str = "",  # the caller's trusted fragment (job_list(where=...))
) -> Query:
    conditions = _where([name for name in filters if name != "states"])
    if "states" in filters:
        conditions.insert(0, _states_literal(states))
    if where_sql:
        conditions.append(f"({where_sql})")
    if cursor:
        conditions.append(_keyset(column, descending, cursor == "null"))
    where = " AND ".join(conditions) or "true"
    text = (
        f"SELECT {job_columns()} FROM <schema>river_job WHERE {where} "
        f"ORDER BY {_order_by(column, descending)} LIMIT :max"
    )
    return Query("job_list", render_schema(text, schema))


@lru_cache(maxsize=512)
def _job_delete_many_query(
    schema: str | None,
    filters: tuple[str, ...],
    where_sql: str = "",  # the caller's trusted fragment (job_delete_many(where=...))
) -> Query:
    extra = [f"({where_sql})"] if where_sql else []
    where = " AND ".join([*_where(filters), *extra, "state <> 'running'"])
    # No SKIP LOCKED is needed: the DELETE holds SQLite's single write lock throughout.
    # RETURNING order is unspecified in SQLite, but both plans it can pick here (rowid
    # lookups from the sorted IN list, or a rowid-order scan) visit rows by ascending id,
    # which is the order Postgres returns (a test checks it).
    text = f"""
DELETE FROM <schema>river_job
WHERE id IN (
    SELECT id FROM <schema>river_job
    WHERE {where}
    ORDER BY id
    LIMIT :max
)
RETURNING {job_columns()}
"""
    return Query("job_delete_many", render_schema(text, schema))


def _control_payload(action: str, queue: str, **extra: Any) -> str:
    # Go's encoding/json of River's control payload: fields in struct order, no spaces.
    body: dict[str, Any] = {"action": action, **extra, "queue": queue}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


class SqliteAdmin:
    """Administration statements; each method returns one :class:`Statement` (possibly a
    :class:`~riverboat._sql.Statement` with ``then``)."""

    _queries: ClassVar[dict[str, str]] = QUERIES

    if TYPE_CHECKING:  # provided by Dialect and SqliteDialect; declared for mypy only
        schema: str | None
        q: dict[str, Query]

        def stmt(self, query_name: str, /, **params: Any) -> Statement: ...

        def decode_job(self, row: Sequence[Any]) -> JobRow: ...

    # -- jobs --------------------------------------------------------------------------
    def job_cancel(self, job_id: int, cancel_attempted_at: str) -> Statement:
        """``cancel_attempted_at`` is an RFC3339Nano string (River writes the Go clock)."""
        params = {"id": job_id, "cancel_attempted_at": cancel_attempted_at}
        notify = self.stmt("job_cancel_notify", **params)
        return Statement(self.q["job_cancel"], params, (notify,))

    def job_retry(self, job_id: int) -> Statement:
        return self.stmt("job_retry", id=job_id)

    def job_delete(self, job_id: int) -> Statement:
        """Rows are a job plus a trailing ``was_deleted`` flag (see :meth:`decode_deleted`)."""
        return Statement(
            self.q["job_delete"], {"id": job_id}, (self.stmt("job_delete_apply", id=job_id),)
        )

    def decode_deleted(self, row: Sequence[Any]) -> tuple[JobRow, bool]:
        return self.decode_job(row), bool(row[-1])

    def job_update(self, job_id: int, metadata_merge: Mapping[str, Any]) -> Statement:
        """Merge with ``jsonb_patch`` (recursive; a null value removes its key), as
        River's SQLite driver does."""
        return self.stmt(
            "job_update",
            id=job_id,
            metadata=json.dumps(metadata_merge, separators=(",", ":"), ensure_ascii=False),
        )

    def job_list(
        self,
        *,
        filters: Mapping[str, Any],
        order_column: str,
        descending: bool,
        limit: int,
        after: tuple[int, datetime | None] | None = None,
        where: tuple[str, Mapping[str, Any]] | None = None,
    ) -> Statement:
        """As :meth:`PostgresAdmin.job_list`; a ``metadata`` filter raises
        :class:`~riverboat.errors.NotSupportedError`."""
        if order_column not in _ORDER_COLUMNS:
            raise ValueError(f"cannot order jobs by {order_column!r}")
        names = tuple(name for name in JOB_LIST_FILTERS if filters.get(name) is not None)
        params = self._filter_params(filters, names)
        cursor = ""
        if after is not None:
            cursor_id, cursor_time = after
            params["cursor_id"] = cursor_id
            if order_column != "id":
                cursor = "null" if cursor_time is None else "time"
                if cursor_time is not None:
                    params["cursor_time"] = format_timestamp(cursor_time)
            else:
                cursor = "time"
        params.pop("states", None)
        states = tuple(filters["states"]) if "states" in names else ()
        where_sql, where_params = where if where is not None else ("", {})
        query = _job_list_query(
            self.schema, names, order_column, descending, cursor, states, where_sql
        )
        return Statement(query, {**params, **where_params, "max": limit})

    def job_delete_many(
        self,
        *,
        filters: Mapping[str, Any],
        limit: int,
        where: tuple[str, Mapping[str, Any]] | None = None,
    ) -> Statement:
        names = tuple(name for name in JOB_LIST_FILTERS if filters.get(name) is not None)
        where_sql, where_params = where if where is not None else ("", {})
        query = _job_delete_many_query(self.schema, names, where_sql)
        params = self._filter_params(filters, names)
        return Statement(query, {**params, **where_params, "max": limit})

    @staticmethod
    def _filter_params(filters: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
        return {name: json.dumps(list(filters[name])) for name in names}

    def job_set_running(self, job_id: int, client_id: str) -> Statement:
        """Claim one job by id (for tests); no row when it is running or finalized."""
        return self.stmt("job_set_running", id=job_id, attempted_by=client_id)

    def job_count_by_queue_and_state(self, states: Sequence[str]) -> Statement:
        """Rows of ``(queue, state, count)`` for jobs in ``states``."""
        # The states spelled out (see _states_literal): a bound list hides them from
        # the generic plan, which then scanned a million finalized rows for 400 ms.
        return Statement(_count_by_queue_query(self.schema, tuple(states)), {})

    def job_count_by_state_capped(self, cap: int) -> Statement:
        """Rows of ``(state, count)`` for every state, each count at most ``cap``."""
        return self.stmt("job_count_by_state_capped", cap=cap)

    def job_throughput(self, minutes: int) -> Statement:
        """Rows of ``(minute, completed, discarded)`` for the last ``minutes`` minutes."""
        return self.stmt("job_throughput", minutes=minutes)

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

    # -- queues ------------------------------------------------------------------------
    def decode_queue(self, row: Sequence[Any]) -> QueueRow:
        """One ``river_queue`` row, its text timestamps as datetimes (as on Postgres)."""
        return QueueRow(
            row[0],
            parse_timestamp(row[1]),  # type: ignore[arg-type]
            json.loads(row[2]) if row[2] else {},
            parse_timestamp(row[3]),
            parse_timestamp(row[4]),  # type: ignore[arg-type]
        )

    def decode_queues(self, rows: Sequence[Sequence[Any]]) -> list[QueueRow]:
        """Queue rows by name (SQLite's RETURNING has no order)."""
        out = [self.decode_queue(row) for row in rows if row[0] is not None]
        out.sort(key=lambda queue: queue.name)
        return out

    def queue_get(self, name: str) -> Statement:
        return self.stmt("queue_get", name=name)

    def queue_list(self, limit: int) -> Statement:
        return self.stmt("queue_list", max=limit)

    def _queue_with_control(self, query: str, params: dict[str, Any], payload: str) -> Statement:
        notify = self.stmt("queue_control_notify", name=params["name"], payload=payload)
        return Statement(self.q[query], params, (notify,))

    def queue_pause(self, name: str) -> Statement:
        return self._queue_with_control(
            "queue_pause", {"name": name}, _control_payload("pause", name)
        )

    def queue_resume(self, name: str) -> Statement:
        return self._queue_with_control(
            "queue_resume", {"name": name}, _control_payload("resume", name)
        )

    def queue_update(self, name: str, metadata: Mapping[str, Any] | None) -> Statement:
        """Replace the metadata and tell producers (``metadata_changed``); without
        metadata only updated_at moves and nobody is told."""
        do_update = metadata is not None
        encoded = json.dumps(dict(metadata or {}), separators=(",", ":"), ensure_ascii=False)
        params = {"name": name, "metadata_do_update": do_update, "metadata": encoded}
        if not do_update:
            return Statement(self.q["queue_update"], params)
        payload = _control_payload("metadata_changed", name, metadata=dict(metadata or {}))
        return self._queue_with_control("queue_update", params, payload)
