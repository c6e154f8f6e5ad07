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
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from riverboat._job import JobRow, JobState
from riverboat._queue import QueueRow
from riverboat._sql import Query, Statement, render_schema
from riverboat.dialect._pg_common import CHANNEL, job_columns

__all__ = ["JOB_LIST_FILTERS", "QUEUE_COLUMNS", "PostgresAdmin"]

QUEUE_COLUMNS = "name, created_at, metadata::text AS metadata, paused_at, updated_at"
_CONTROL = CHANNEL.format(topic="river_control")
_FINALIZED = "('cancelled', 'completed', 'discarded')"
_ALL_STATES = tuple(state.value for state in JobState)

QUERIES: dict[str, str] = {}

# River's JobCancel. A finalized job is returned untouched and nothing is sent. Otherwise
# the owning producer is told over river_control, cancel_attempted_at is recorded (the
# completer and rescuer honour it), and a job that is not running is cancelled at once; a
# running one keeps its state until its producer reports the outcome.
QUERIES["job_cancel"] = f"""
WITH locked AS (
    SELECT {job_columns()}
    FROM <schema>river_job
    WHERE id = :id::bigint
    FOR UPDATE
),
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
    SET state = CASE WHEN river_job.state = 'running' THEN river_job.state
                     ELSE 'cancelled'::<schema>river_job_state END,
        finalized_at = CASE WHEN river_job.state = 'running' THEN river_job.finalized_at
                            ELSE now() END,
        metadata = jsonb_set(river_job.metadata, '{{cancel_attempted_at}}'::text[],
                             to_jsonb(:cancel_attempted_at::text), true)
    FROM notified
    WHERE river_job.id = :id::bigint AND river_job.id = notified.id
    RETURNING {job_columns("river_job")}
)
SELECT * FROM updated
UNION ALL
SELECT * FROM locked WHERE NOT EXISTS (SELECT 1 FROM updated)
"""

# River's JobRetry: anything but a running job, or an available one already due, goes
# back to available now; a job that used its last attempt gets one more.
QUERIES["job_retry"] = f"""
WITH locked AS (
    SELECT {job_columns()}
    FROM <schema>river_job
    WHERE id = :id::bigint
    FOR UPDATE
),
updated AS (
    UPDATE <schema>river_job
    SET state = 'available',
        max_attempts = CASE WHEN river_job.attempt = river_job.max_attempts
                            THEN river_job.max_attempts + 1
                            ELSE river_job.max_attempts END,
        finalized_at = NULL,
        scheduled_at = now()
    FROM locked
    WHERE river_job.id = :id::bigint
      AND river_job.id = locked.id
      AND river_job.state <> 'running'
      AND NOT (river_job.state = 'available' AND river_job.scheduled_at < now())
    RETURNING {job_columns("river_job")}
)
SELECT * FROM updated
UNION ALL
SELECT * FROM locked WHERE NOT EXISTS (SELECT 1 FROM updated)
"""

# River's JobDelete: a running job is returned (still running) instead of deleted; the
# client turns that into JobRunningError. The extra column says which case it was.
QUERIES["job_delete"] = f"""
WITH locked AS (
    SELECT {job_columns()}
    FROM <schema>river_job
    WHERE id = :id::bigint
    FOR UPDATE
),
deleted AS (
    DELETE FROM <schema>river_job
    USING locked
    WHERE river_job.id = :id::bigint
      AND river_job.id = locked.id
      AND river_job.state <> 'running'
    RETURNING {job_columns("river_job")}
)
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

QUERIES["queue_get"] = f"SELECT {QUEUE_COLUMNS} FROM <schema>river_queue WHERE name = :name::text"

# One job by id set running, as JobGetAvailable would (riverboat.testing.work_job runs a
# test's job inline); a job that is running or finalized is left alone and not returned.
QUERIES["job_set_running"] = f"""
UPDATE <schema>river_job
SET state = 'running',
    attempt = river_job.attempt + 1,
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
    for state in _ALL_STATES
)

# Jobs finalized per minute over the last :minutes minutes, by the (state, finalized_at)
# index: rows of (minute, completed, discarded).
QUERIES["job_throughput"] = """
SELECT date_trunc('minute', finalized_at) AS minute,
       count(*) FILTER (WHERE state = 'completed') AS completed,
       count(*) FILTER (WHERE state = 'discarded') AS discarded
FROM <schema>river_job
WHERE state IN ('completed', 'discarded')
  AND finalized_at IS NOT NULL
  AND finalized_at >= now() - make_interval(mins => :minutes::integer)
GROUP BY 1
ORDER BY 1
"""


QUERIES["queue_list"] = (
    f"SELECT {QUEUE_COLUMNS} FROM <schema>river_queue ORDER BY name ASC LIMIT :max::integer"
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
    RETURNING {QUEUE_COLUMNS}
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
    RETURNING {QUEUE_COLUMNS}
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
}
JOB_LIST_FILTERS = tuple(_FILTER_SQL)

# Columns a list can be ordered by (besides id, always the tiebreak). scheduled_at is NOT
# NULL; attempted_at and finalized_at may be NULL and sort last ascending, first descending
# (Postgres's default), which the keyset conditions below follow.
_ORDER_COLUMNS = ("id", "scheduled_at", "attempted_at", "finalized_at", "created_at")
_NOT_NULL_COLUMNS = frozenset({"id", "scheduled_at", "created_at"})


def _where(filters: Sequence[str]) -> list[str]:
    return [_FILTER_SQL[name] for name in filters]


def _keyset(column: str, descending: bool, cursor_time_null: bool) -> str:
    """Rows strictly after the cursor ``(:cursor_time, :cursor_id)`` in list order."""
    if column == "id":
        return "id < :cursor_id::bigint" if descending else "id > :cursor_id::bigint"
    key = f"({column}, id)"
    after = "(:cursor_time::timestamptz, :cursor_id::bigint)"
    nullable = column not in _NOT_NULL_COLUMNS
    if not descending:
        if cursor_time_null:  # in the NULL tail already
            return f"({column} IS NULL AND id > :cursor_id::bigint)"
        tail = f" OR {column} IS NULL" if nullable else ""
        return f"({key} > {after}{tail})"
    if cursor_time_null:  # NULLs come first descending
        return f"(({column} IS NULL AND id < :cursor_id::bigint) OR {column} IS NOT NULL)"
    return f"{key} < {after}"


def _order_by(column: str, descending: bool) -> str:
    direction = "DESC" if descending else "ASC"
    if column == "id":
        return f"id {direction}"
    return f"{column} {direction}, id {direction}"


def _states_literal(states: Sequence[str]) -> str:
    """``state IN ('a', 'b')`` with the states written out. The driver runs generic plans,
    which cannot see a bound value; spelled out, each state's statistics choose between
    walking river_job_pkey (a common state) and reading the state's index entries (a
    rare one) for a page ordered by id. The names come from the enum, never from input."""
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
        "SELECT queue, state::text, count(*) "
        f"FROM <schema>river_job WHERE {_states_literal(states)} GROUP BY queue, state"
    )
    return Query("job_count_by_queue_and_state", render_schema(text, schema))


@lru_cache(maxsize=1024)
def _job_list_query(
    schema: str | None,
    filters: tuple[str, ...],
    column: str,
    descending: bool,
    cursor: str,  # "" (none), "time" or "null" (the cursor row's column was NULL)
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
        f"ORDER BY {_order_by(column, descending)} LIMIT :max::integer"
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
    # Running jobs are skipped, and so are rows another transaction holds (SKIP LOCKED): a
    # job being retried or fetched right now is left alone, and the lock re-checks the
    # filters against the row's latest version.
    text = f"""
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
)
SELECT * FROM deleted ORDER BY id
"""
    return Query("job_delete_many", render_schema(text, schema))


def _control_payload(action: str, queue: str, **extra: Any) -> str:
    # Go's encoding/json of River's control payload: fields in struct order, no spaces.
    body: dict[str, Any] = {"action": action, **extra, "queue": queue}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


class PostgresAdmin:
    """Administration statements; each method returns one :class:`Statement`."""

    _queries: ClassVar[dict[str, str]] = QUERIES

    schema: str | None

    if TYPE_CHECKING:  # provided by Dialect and PostgresDialect; declared for mypy only

        def stmt(self, query_name: str, /, **params: Any) -> Statement: ...

        def decode_job(self, row: Sequence[Any]) -> JobRow: ...

    # -- jobs --------------------------------------------------------------------------
    def job_cancel(self, job_id: int, cancel_attempted_at: str) -> Statement:
        """``cancel_attempted_at`` is an RFC3339Nano string (River writes the Go clock)."""
        return self.stmt(
            "job_cancel", id=job_id, cancel_attempted_at=cancel_attempted_at, schema=self.schema
        )

    def job_retry(self, job_id: int) -> Statement:
        return self.stmt("job_retry", id=job_id)

    def job_delete(self, job_id: int) -> Statement:
        """Rows are a job plus a trailing ``was_deleted`` flag (see :meth:`decode_deleted`)."""
        return self.stmt("job_delete", id=job_id)

    def decode_deleted(self, row: Sequence[Any]) -> tuple[JobRow, bool]:
        return self.decode_job(row), bool(row[-1])

    def job_update(self, job_id: int, metadata_merge: Mapping[str, Any]) -> Statement:
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
        """``filters`` maps names in :data:`JOB_LIST_FILTERS` to validated values (lists;
        ``metadata`` a JSON object). ``after`` is the keyset cursor ``(id, column value)``."""
        if order_column not in _ORDER_COLUMNS:
            raise ValueError(f"cannot order jobs by {order_column!r}")
        names = tuple(name for name in JOB_LIST_FILTERS if filters.get(name) is not None)
        params = self._filter_params(filters, names)
        cursor = ""
        if after is not None:
            cursor_id, cursor_time = after
            cursor = "null" if cursor_time is None and order_column != "id" else "time"
            params["cursor_id"] = cursor_id
            if cursor == "time" and order_column != "id":
                params["cursor_time"] = cursor_time
        states = tuple(params.pop("states", ()))
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
        params: dict[str, Any] = {}
        for name in names:
            value = filters[name]
            if name == "metadata":
                value = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            else:
                value = list(value)
            params[name] = value
        return params

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
        return [(row[0], int(row[1]), int(row[2])) for row in rows]

    # -- queues ------------------------------------------------------------------------
    def decode_queue(self, row: Sequence[Any]) -> QueueRow:
        return QueueRow(row[0], row[1], json.loads(row[2]), row[3], row[4])

    def decode_queues(self, rows: Sequence[Sequence[Any]]) -> list[QueueRow]:
        # Pause/resume return one all-NULL row when nothing matched.
        return [self.decode_queue(row) for row in rows if row[0] is not None]

    def queue_get(self, name: str) -> Statement:
        return self.stmt("queue_get", name=name)

    def queue_list(self, limit: int) -> Statement:
        return self.stmt("queue_list", max=limit)

    def queue_pause(self, name: str) -> Statement:
        return self.stmt(
            "queue_pause", name=name, payload=_control_payload("pause", name), schema=self.schema
        )

    def queue_resume(self, name: str) -> Statement:
        return self.stmt(
            "queue_resume",
            name=name,
            payload=_control_payload("resume", name),
            schema=self.schema,
        )

    def queue_update(self, name: str, metadata: Mapping[str, Any] | None) -> Statement:
        do_update = metadata is not None
        encoded = json.dumps(dict(metadata or {}), separators=(",", ":"), ensure_ascii=False)
        payload = _control_payload("metadata_changed", name, metadata=dict(metadata or {}))
        return self.stmt(
            "queue_update",
            name=name,
            metadata_do_update=do_update,
            metadata=encoded,
            payload=payload,
            schema=self.schema,
        )
