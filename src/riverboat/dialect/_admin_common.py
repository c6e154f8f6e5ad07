"""The Python half of job and queue administration, shared by both dialects.

Each admin operation validates its input, encodes parameters and picks (or builds and
caches) its SQL the same way on Postgres and SQLite; only the SQL and a few encodings
differ. This module holds that shared half once: :class:`AdminStatements`, which
:class:`~riverboat.dialect.base.Dialect` inherits (so every operation stays part of the
typed contract), and the builders of the statements whose SQL depends on the call
(``job_list``, ``job_delete_many``, the per-state counts). A dialect supplies an
:class:`AdminSql` (how its SQL spells filters, cursors, orders and limits) and the
hooks declared abstract below; its fixed statements live in ``dialect/<name>_admin.py``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from riverboat._job import JobRow, JobState
from riverboat._queue import QueueRow
from riverboat._sql import Query, Statement, render_schema
from riverboat.dialect._part import DialectPart
from riverboat.dialect._rows import JobReader

__all__ = [
    "ORDER_COLUMNS",
    "AdminSql",
    "AdminStatements",
    "compact_json",
    "control_payload",
    "queue_activity_sql",
    "unique_key_taken_sql",
]

# Columns a list can be ordered by (besides id, always the tiebreak). scheduled_at is NOT
# NULL; attempted_at and finalized_at may be NULL and sort last ascending, first
# descending (Postgres's default), which both dialects' keyset conditions follow.
ORDER_COLUMNS = ("id", "scheduled_at", "attempted_at", "finalized_at", "created_at")
NOT_NULL_COLUMNS = frozenset({"id", "scheduled_at", "created_at"})
ALL_STATES = tuple(state.value for state in JobState)


def queue_activity_sql(oldest: str, done: str) -> str:
    """The ``queue_activity`` statement: per queue, ``oldest`` (the dialect's reading of
    the least ``scheduled_at`` of its available jobs, the queue's latency) beside ``done``
    (the dialect's ``SELECT queue, completed_1h, ..., discarded_7d`` over the jobs
    finalized in the last week: each dialect spells its own time arithmetic), one row
    per queue that has either."""
    return f"""
WITH waiting AS (
    SELECT queue, min({oldest}) AS oldest
    FROM <schema>river_job
    WHERE state = 'available'
    GROUP BY queue
),
done AS ({done})
SELECT coalesce(waiting.queue, done.queue), waiting.oldest,
       coalesce(completed_1h, 0), coalesce(completed_24h, 0), coalesce(completed_7d, 0),
       coalesce(discarded_1h, 0), coalesce(discarded_24h, 0), coalesce(discarded_7d, 0)
FROM waiting FULL JOIN done ON waiting.queue = done.queue
ORDER BY 1"""


def unique_key_taken_sql(in_bitmask: Callable[[str, str], str]) -> str:
    """The condition, on a ``river_job`` row a bulk retry looks at, that its unique key
    is another job's now: a job whose state River's unique index covers holds it, or a
    twin with a lower id (the same key, not holding it) that a batch would retry first.
    Retried, the row would take the key too and the statement would fail on the index,
    failing the whole batch; a bulk retry leaves it alone, and a dry run counts it out
    (retried alone, by job_retry, it fails as River's JobRetry does). ``in_bitmask``
    spells River's ``river_job_state_in_bitmask(states, state)`` for the dialect."""
    return f"""(river_job.unique_key IS NOT NULL AND river_job.unique_states IS NOT NULL
         AND EXISTS (
             SELECT 1 FROM <schema>river_job held
             WHERE held.unique_key = river_job.unique_key AND held.id <> river_job.id
               AND (held.id < river_job.id OR (
                   held.unique_states IS NOT NULL
                   AND {in_bitmask("held.unique_states", "held.state")}))))"""


def compact_json(value: Any) -> str:
    """JSON as Go's encoding/json writes it: no spaces, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def control_payload(action: str, queue: str, **extra: Any) -> str:
    """River's river_control payload, fields in its Go struct's order."""
    return compact_json({"action": action, **extra, "queue": queue})


def states_literal(states: Sequence[str]) -> str:
    """``state IN ('a', 'b')`` with the states written out, so the planner sees them: a
    bound list is opaque to Postgres's generic plans and to SQLite's planner, which then
    walk every row instead of a rare state's index entries. The names come from the enum,
    never from input."""
    for state in states:
        if state not in ALL_STATES:
            raise ValueError(f"{state!r} is not a job state")
    return "state IN (" + ", ".join(f"'{state}'" for state in states) + ")"


class AdminSql(ABC):
    """How one dialect spells the variable parts of the admin SQL. Used as a class (it
    keys the statement caches); never instantiated."""

    # ``LIMIT`` with the bound maximum, e.g. ``:max::integer``.
    limit: ClassVar[str]
    # The state column as text in a result row.
    state_text: ClassVar[str]
    # The keyset cursor's bound id and time, cast as the dialect needs.
    cursor_id: ClassVar[str]
    cursor_time: ClassVar[str]

    @staticmethod
    @abstractmethod
    def where(filters: Sequence[str]) -> list[str]:
        """One condition per filter name (raising for a filter the dialect lacks)."""

    @staticmethod
    @abstractmethod
    def time_key(expression: str) -> str:
        """``expression`` (a timestamp column or the bound cursor time) as it is ordered
        and compared."""

    @staticmethod
    @abstractmethod
    def delete_many(where: str) -> str:
        """Delete at most ``:max`` jobs matching ``where``, lowest ids first, returning
        them in id order."""

    # Which matching rows each bulk action changes (the rest it leaves alone): the same
    # rules as the one-job operations (River's JobRetry and JobCancel).
    retry_eligible: ClassVar[str]
    cancel_eligible: ClassVar[str] = (
        "state NOT IN ('cancelled', 'completed', 'discarded') AND finalized_at IS NULL"
    )
    delete_eligible: ClassVar[str] = "state <> 'running'"

    # The bulk actions' statements, each with a ``{where}`` slot (see the methods below).
    retry_many_sql: ClassVar[str]
    cancel_many_sql: ClassVar[str]

    @classmethod
    def retry_many(cls, where: str) -> str:
        """Make at most ``:max`` jobs matching ``where`` (which holds the eligibility and
        the ``id > :after_id`` keyset) available now, lowest ids first; returns them."""
        return cls.retry_many_sql.format(where=where)

    @classmethod
    def cancel_many(cls, where: str) -> str:
        """Cancel at most ``:max`` jobs matching ``where`` (as :meth:`retry_many`):
        cancelled now, or for a running one ``cancel_attempted_at`` set and its producer
        told; returns them."""
        return cls.cancel_many_sql.format(where=where)

    @classmethod
    def cursor_bound(cls, column: str) -> str:
        """The cursor's time as ``column``'s values are compared with it."""
        return cls.time_key(cls.cursor_time)

    @classmethod
    def keyset(cls, column: str, descending: bool, cursor_time_null: bool) -> str:
        """Rows strictly after the cursor ``(cursor_time, cursor_id)`` in list order:
        NULL times last ascending and first descending (Postgres's default order)."""
        cursor_id = cls.cursor_id
        if column == "id":
            return f"id < {cursor_id}" if descending else f"id > {cursor_id}"
        # The NULL-ness of the time key, not of the column: on SQLite a value that can't
        # be read sorts with the NULLs, so it must page with them too.
        time = cls.time_key(column)
        key = f"({time}, id)"
        after = f"({cls.cursor_bound(column)}, {cursor_id})"
        nullable = column not in NOT_NULL_COLUMNS
        if not descending:
            if cursor_time_null:  # in the NULL tail already
                return f"({time} IS NULL AND id > {cursor_id})"
            tail = f" OR {time} IS NULL" if nullable else ""
            return f"({key} > {after}{tail})"
        if cursor_time_null:  # NULLs come first descending
            return f"(({time} IS NULL AND id < {cursor_id}) OR {time} IS NOT NULL)"
        return f"{key} < {after}"

    @classmethod
    def order_by(cls, column: str, descending: bool) -> str:
        if column == "id":
            return "id DESC" if descending else "id ASC"
        if descending:
            return f"{cls.time_key(column)} DESC NULLS FIRST, id DESC"
        return f"{cls.time_key(column)} ASC NULLS LAST, id ASC"


@lru_cache(maxsize=1024)
def job_list_query(
    sql: type[AdminSql],
    schema: str | None,
    filters: tuple[str, ...],
    column: str,
    descending: bool,
    cursor: str,  # "" (none), "time" or "null" (the cursor row's column was NULL)
    states: tuple[str, ...],
    where_sql: str,  # the caller's trusted fragment (job_list(where=...))
    columns: str,
) -> Query:
    conditions = sql.where([name for name in filters if name != "states"])
    if "states" in filters:
        conditions.insert(0, states_literal(states))
    if where_sql:
        conditions.append(f"({where_sql})")
    if cursor:
        conditions.append(sql.keyset(column, descending, cursor == "null"))
    where = " AND ".join(conditions) or "true"
    text = (
        f"SELECT {columns} FROM <schema>river_job WHERE {where} "
        f"ORDER BY {sql.order_by(column, descending)} LIMIT {sql.limit}"
    )
    return Query("job_list", render_schema(text, schema))


@lru_cache(maxsize=512)
def job_delete_many_query(
    sql: type[AdminSql], schema: str | None, filters: tuple[str, ...], where_sql: str
) -> Query:
    extra = [f"({where_sql})"] if where_sql else []
    where = " AND ".join([*sql.where(filters), *extra, "state <> 'running'"])
    return Query("job_delete_many", render_schema(sql.delete_many(where), schema))


_BULK_ACTIONS = ("retry", "cancel", "delete")


def _bulk_where(sql: type[AdminSql], filters: tuple[str, ...], where_sql: str, action: str) -> str:
    if action not in _BULK_ACTIONS:
        raise ValueError(f"{action!r} is not a bulk action")
    conditions = sql.where(filters)
    if where_sql:
        conditions.append(f"({where_sql})")
    conditions.append(f"({getattr(sql, action + '_eligible')})")
    return " AND ".join(conditions)


@lru_cache(maxsize=512)
def job_bulk_query(
    sql: type[AdminSql], schema: str | None, filters: tuple[str, ...], where_sql: str, action: str
) -> Query:
    """A bounded batch of a bulk retry or cancel: at most ``:max`` rows after the keyset
    ``:after_id``, so repeated calls walk the matching rows once each."""
    where = _bulk_where(sql, filters, where_sql, action) + f" AND id > {sql.cursor_id}"
    builder = sql.retry_many if action == "retry" else sql.cancel_many
    return Query(f"job_{action}_many", render_schema(builder(where), schema))


@lru_cache(maxsize=512)
def job_count_matching_query(
    sql: type[AdminSql], schema: str | None, filters: tuple[str, ...], where_sql: str, action: str
) -> Query:
    """How many jobs a bulk action would change (``action``), or match at all (``""``)."""
    if action:
        where = _bulk_where(sql, filters, where_sql, action)
    else:
        where = " AND ".join([*sql.where(filters), *([f"({where_sql})"] if where_sql else [])])
    text = f"SELECT count(*) FROM <schema>river_job WHERE {where or 'true'}"
    return Query("job_count_matching", render_schema(text, schema))


@lru_cache(maxsize=512)
def job_count_grouped_query(
    sql: type[AdminSql], schema: str | None, filters: tuple[str, ...], where_sql: str
) -> Query:
    """Matching jobs per (state, queue, kind): reads every matching row (an operator's
    question, not a dashboard refresh)."""
    conditions = [*sql.where(filters), *([f"({where_sql})"] if where_sql else [])]
    text = (
        f"SELECT {sql.state_text}, queue, kind, count(*) FROM <schema>river_job "
        f"WHERE {' AND '.join(conditions) or 'true'} GROUP BY state, queue, kind"
    )
    return Query("job_count_grouped", render_schema(text, schema))


# Jobs per (queue, state) for the given states: metrics sample it (contrib.prometheus),
# at most once per interval and only on the leader, and riverboat ui's overview. Served
# by the (state, queue, ...) index.
@lru_cache(maxsize=256)
def count_by_queue_query(sql: type[AdminSql], schema: str | None, states: tuple[str, ...]) -> Query:
    text = (
        f"SELECT queue, {sql.state_text}, count(*) "
        f"FROM <schema>river_job WHERE {states_literal(states)} GROUP BY queue, state"
    )
    return Query("job_count_by_queue_and_state", render_schema(text, schema))


class AdminStatements(DialectPart, ABC):
    """Administration operations; each returns one :class:`Statement` (on SQLite possibly
    one with ``then``: see :mod:`~riverboat.dialect.sqlite_admin`)."""

    admin_sql: ClassVar[type[AdminSql]]
    # How this dialect reads the job row: the columns a list selects (job_list(preview=)).
    job_reader: ClassVar[JobReader]
    # Filter names job_list and job_delete_many accept, in the order they are applied.
    job_list_filters: ClassVar[tuple[str, ...]]

    if TYPE_CHECKING:  # provided by Dialect; declared for mypy only

        def decode_job(self, row: Sequence[Any], /) -> JobRow: ...

    # -- what each dialect spells its own way --------------------------------------------
    @abstractmethod
    def job_cancel(self, job_id: int, cancel_attempted_at: str) -> Statement:
        """``cancel_attempted_at`` is an RFC3339Nano string (River writes the Go clock)."""

    @abstractmethod
    def job_delete(self, job_id: int) -> Statement:
        """Rows are a job plus a trailing ``was_deleted`` flag (see :meth:`decode_deleted`)."""

    @abstractmethod
    def decode_throughput(
        self, rows: Sequence[Sequence[Any]]
    ) -> list[tuple[datetime, int, int]]: ...

    @abstractmethod
    def decode_queue(self, row: Sequence[Any]) -> QueueRow: ...

    @abstractmethod
    def decode_timestamp(self, value: Any) -> datetime | None:
        """A timestamp column as read (a datetime on Postgres, River's text on SQLite)."""

    @abstractmethod
    def filter_params(self, filters: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
        """The bound parameters of the named filters (lists, or a JSON object)."""

    @abstractmethod
    def cursor_time_param(self, value: datetime) -> Any: ...

    @abstractmethod
    def queue_with_control(
        self, query: str, params: dict[str, Any], payload: str, *, notify: bool = True
    ) -> Statement:
        """``query`` plus the river_control notification ``payload`` (when ``notify``)."""

    # -- shared --------------------------------------------------------------------------
    def job_retry(self, job_id: int) -> Statement:
        return self.stmt("job_retry", id=job_id)

    def decode_deleted(self, row: Sequence[Any]) -> tuple[JobRow, bool]:
        return self.decode_job(row), bool(row[-1])

    def job_update(self, job_id: int, metadata_merge: Mapping[str, Any]) -> Statement:
        """Merge into metadata (how recorded output is written): top-level keys are
        replaced whole and nulls kept, on Postgres (``||``) and SQLite alike (River 0.50)."""
        return self.stmt("job_update", id=job_id, metadata=compact_json(metadata_merge))

    def _filter_names(self, filters: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(name for name in self.job_list_filters if filters.get(name) is not None)

    def _filtered(
        self, filters: Mapping[str, Any], where: tuple[str, Mapping[str, Any]] | None
    ) -> tuple[tuple[str, ...], str, dict[str, Any]]:
        """The filters given, the caller's extra condition, and both's parameters."""
        names = self._filter_names(filters)
        where_sql, where_params = where if where is not None else ("", {})
        return names, where_sql, {**self.filter_params(filters, names), **where_params}

    def job_list(
        self,
        *,
        filters: Mapping[str, Any],
        order_column: str,
        descending: bool,
        limit: int,
        after: tuple[int, datetime | None] | None = None,
        where: tuple[str, Mapping[str, Any]] | None = None,
        preview: bool = False,
    ) -> Statement:
        """``filters`` maps names in ``job_list_filters`` to validated values (lists;
        ``metadata`` a JSON object). ``after`` is the keyset cursor ``(id, column value)``.
        ``preview``: the heavy columns read as a listing reads them (PREVIEW_ARGS_MAX)."""
        if order_column not in ORDER_COLUMNS:
            raise ValueError(f"cannot order jobs by {order_column!r}")
        names, where_sql, params = self._filtered(filters, where)
        params.pop("states", None)  # spelled out in the SQL (states_literal)
        states = tuple(filters["states"]) if "states" in names else ()
        cursor = ""
        if after is not None:
            cursor_id, cursor_time = after
            params["cursor_id"] = cursor_id
            cursor = "null" if cursor_time is None and order_column != "id" else "time"
            if cursor_time is not None and order_column != "id":
                params["cursor_time"] = self.cursor_time_param(cursor_time)
        query = job_list_query(
            self.admin_sql,
            self.schema,
            names,
            order_column,
            descending,
            cursor,
            states,
            where_sql,
            self.job_reader.columns(preview=preview),
        )
        return Statement(query, {**params, "max": limit})

    def job_delete_many(
        self,
        *,
        filters: Mapping[str, Any],
        limit: int,
        where: tuple[str, Mapping[str, Any]] | None = None,
    ) -> Statement:
        names, where_sql, params = self._filtered(filters, where)
        query = job_delete_many_query(self.admin_sql, self.schema, names, where_sql)
        return Statement(query, {**params, "max": limit})

    def job_bulk(
        self,
        action: str,
        *,
        filters: Mapping[str, Any],
        limit: int,
        after_id: int,
        cancel_attempted_at: str = "",
        where: tuple[str, Mapping[str, Any]] | None = None,
    ) -> Statement:
        """One batch of a bulk ``retry`` or ``cancel`` (see :func:`job_bulk_query`)."""
        names, where_sql, params = self._filtered(filters, where)
        query = job_bulk_query(self.admin_sql, self.schema, names, where_sql, action)
        params.update(max=limit, cursor_id=after_id)
        if action == "cancel":
            return self.cancel_many_statement(query, params, cancel_attempted_at)
        return Statement(query, params)

    @abstractmethod
    def cancel_many_statement(
        self, query: Query, params: dict[str, Any], cancel_attempted_at: str
    ) -> Statement:
        """The bulk cancel batch with its producer notifications (SQLite: an outbox row
        per running job, in the same transaction)."""

    def job_count_matching(
        self,
        *,
        filters: Mapping[str, Any],
        action: str = "",
        where: tuple[str, Mapping[str, Any]] | None = None,
    ) -> Statement:
        """One row ``(count,)``: the jobs matching, or those ``action`` would change."""
        names, where_sql, params = self._filtered(filters, where)
        return Statement(
            job_count_matching_query(self.admin_sql, self.schema, names, where_sql, action), params
        )

    def job_count_grouped(
        self, *, filters: Mapping[str, Any], where: tuple[str, Mapping[str, Any]] | None = None
    ) -> Statement:
        """Rows of ``(state, queue, kind, count)`` for the matching jobs."""
        names, where_sql, params = self._filtered(filters, where)
        return Statement(
            job_count_grouped_query(self.admin_sql, self.schema, names, where_sql), params
        )

    def job_set_running(self, job_id: int, client_id: str) -> Statement:
        """Claim one job by id (for tests); no row when it is running or finalized."""
        return self.stmt("job_set_running", id=job_id, attempted_by=client_id)

    def job_count_by_queue_and_state(self, states: Sequence[str]) -> Statement:
        """Rows of ``(queue, state, count)`` for jobs in ``states``."""
        # The states spelled out: a bound list hides them from Postgres's generic plan,
        # which then scanned a million finalized rows for 400 ms.
        return Statement(count_by_queue_query(self.admin_sql, self.schema, tuple(states)), {})

    def job_count_by_state_capped(self, cap: int) -> Statement:
        """Rows of ``(state, count)`` for every state, each count at most ``cap``."""
        return self.stmt("job_count_by_state_capped", cap=cap)

    def queue_activity(self) -> Statement:
        """Rows of ``(queue, oldest available scheduled_at, completed 1h/24h/7d,
        discarded 1h/24h/7d)``."""
        return self.stmt("queue_activity")

    def job_throughput(self, minutes: int) -> Statement:
        """Rows of ``(minute, completed, discarded)`` for the last ``minutes`` minutes."""
        return self.stmt("job_throughput", minutes=minutes)

    # -- queues --------------------------------------------------------------------------
    def decode_queues(self, rows: Sequence[Sequence[Any]]) -> list[QueueRow]:
        """Queue rows by name. Postgres's pause/resume return one all-NULL row when
        nothing matched; SQLite's RETURNING has no order."""
        out = [self.decode_queue(row) for row in rows if row[0] is not None]
        out.sort(key=lambda queue: queue.name)
        return out

    def queue_get(self, name: str) -> Statement:
        return self.stmt("queue_get", name=name)

    def queue_list(self, limit: int) -> Statement:
        return self.stmt("queue_list", max=limit)

    def queue_pause(self, name: str) -> Statement:
        return self.queue_with_control(
            "queue_pause", {"name": name}, control_payload("pause", name)
        )

    def queue_resume(self, name: str) -> Statement:
        return self.queue_with_control(
            "queue_resume", {"name": name}, control_payload("resume", name)
        )

    def queue_update(self, name: str, metadata: Mapping[str, Any] | None) -> Statement:
        """Replace the metadata and tell producers (``metadata_changed``); without
        metadata only updated_at moves and nobody is told."""
        do_update = metadata is not None
        replacement = dict(metadata or {})
        params = {
            "name": name,
            "metadata_do_update": do_update,
            "metadata": compact_json(replacement),
        }
        payload = control_payload("metadata_changed", name, metadata=replacement)
        return self.queue_with_control("queue_update", params, payload, notify=do_update)
