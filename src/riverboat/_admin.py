"""Job and queue administration: everything but the I/O.

:class:`_Ops` validates the inputs, asks the dialect for the statement and returns a
:class:`_Plan` whose ``finish`` turns the rows into the result (raising NotFoundError and
friends). The clients' admin mixins only run the statement: :class:`AsyncAdmin` in
``_admin_async.py``, written by hand, and ``SyncAdmin`` in ``_admin_sync.py``, generated
from it by ``scripts/async_to_sync.py``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar

from riverboat._insert import validate_queue
from riverboat._job import STATE_BY_NAME, JobRow, JobState, format_rfc3339_nano, parse_rfc3339
from riverboat._json import INT64_MAX, INT64_MIN, check_json_value, check_text_param
from riverboat._options import check_option_names
from riverboat._queue import QueueRow
from riverboat._sql import Statement
from riverboat.dialect.base import Leader
from riverboat.errors import (
    InvalidInputError,
    JobRunningError,
    NotFoundError,
)
from riverboat.runtime.worker import check_output_size
from riverboat.workflow import orphaned_dependents, workflow_meta

if TYPE_CHECKING:
    from riverboat._client_core import _ClientCore
    from riverboat.dialect.base import Dialect
    from riverboat.runtime.runner import Runtime

__all__ = [
    "JobBulkOptions",
    "JobBulkResult",
    "JobCountRow",
    "JobDeleteManyOptions",
    "JobFilters",
    "JobListCursor",
    "JobListOptions",
    "JobListResult",
    "Leader",
    "QueueActivity",
    "ThroughputMinute",
]

T = TypeVar("T")
Row = Sequence[Any]

JobListOrder = Literal["id", "time", "scheduled_at", "finalized_at"]
_ORDER_BY = ("id", "time", "scheduled_at", "finalized_at")
JOB_LIST_LIMIT_DEFAULT = 100
JOB_LIST_LIMIT_MAX = 10_000
QUEUE_LIST_LIMIT_DEFAULT = 100
JOB_COUNT_CAP_DEFAULT = 10_000
THROUGHPUT_MINUTES_MAX = 24 * 60
ALL_QUEUES = "*"
_FINALIZED_STATES = (JobState.CANCELLED, JobState.COMPLETED, JobState.DISCARDED)


def _time_column(order_by: str, states: Sequence[JobState] | None) -> str:
    """The column an order sorts on. ``time`` follows River: the first listed state decides
    (scheduled_at for jobs waiting to run, attempted_at for running, finalized_at for
    finalized); with no state filter it is scheduled_at (River lists available first)."""
    if order_by == "id":
        return "id"
    if order_by != "time":
        return order_by
    first = states[0] if states else JobState.AVAILABLE
    if first == JobState.RUNNING:
        return "attempted_at"
    if first in (JobState.CANCELLED, JobState.COMPLETED, JobState.DISCARDED):
        return "finalized_at"
    return "scheduled_at"


CURSOR_TEXT_MAX = 1000  # characters of a job list cursor


@dataclass(slots=True, frozen=True)
class JobListCursor:
    """Where a job list left off: the last job's id and the value of the sorted column.

    Pass it (or its string form, ``str(cursor)``) as ``cursor=`` to get the rows after it
    in the same order. A cursor is only valid with the ``order_by`` it was made for.
    """

    id: int
    order_by: str = "id"
    column: str = "id"
    time: datetime | None = None

    @classmethod
    def from_job(
        cls,
        job: JobRow,
        order_by: JobListOrder = "id",
        states: Sequence[JobState | str] | None = None,
    ) -> JobListCursor:
        """The cursor just after ``job`` in a list ordered by ``order_by``."""
        if order_by not in _ORDER_BY:
            raise InvalidInputError("order_by", f"must be one of {', '.join(_ORDER_BY)}")
        column = _time_column(order_by, [_state(s, "states") for s in states or ()])
        value = None if column == "id" else getattr(job, column)
        return cls(job.id, order_by, column, value)

    def encode(self) -> str:
        body: dict[str, Any] = {"id": self.id, "order_by": self.order_by, "column": self.column}
        if self.column != "id":
            body["time"] = None if self.time is None else format_rfc3339_nano(self.time)
        raw = json.dumps(body, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> JobListCursor:
        # A cursor this module wrote is under 200 characters. A crafted one of nested
        # arrays reached json.loads' recursion limit: a traceback in the CLI, a 500 in
        # the dashboard.
        if len(text) > CURSOR_TEXT_MAX:
            raise InvalidInputError("cursor", "is not a job list cursor")
        try:
            padded = text + "=" * (-len(text) % 4)
            body = json.loads(base64.urlsafe_b64decode(padded.encode()))
            job_id, order_by, column = body["id"], body["order_by"], body["column"]
            raw_time = body.get("time")
            moment = parse_rfc3339(raw_time) if isinstance(raw_time, str) else None
        except (ValueError, KeyError, TypeError, RecursionError, binascii.Error) as exc:
            raise InvalidInputError("cursor", "is not a job list cursor") from exc
        if (
            isinstance(job_id, bool)
            or not isinstance(job_id, int)
            or not INT64_MIN <= job_id <= INT64_MAX
            or order_by not in _ORDER_BY
            or column not in ("id", "scheduled_at", "attempted_at", "finalized_at")
        ):
            raise InvalidInputError("cursor", "is not a job list cursor")
        return cls(job_id, order_by, column, moment)

    def __str__(self) -> str:
        return self.encode()


@dataclass(slots=True, frozen=True)
class JobListResult:
    """One page of jobs. ``next_cursor`` is set when more rows may follow (pass it back as
    ``cursor=``); ``last_cursor`` points after the last job of the page whenever it has
    one (for tailing a list that grows)."""

    jobs: list[JobRow]
    next_cursor: JobListCursor | None
    last_cursor: JobListCursor | None


@dataclass(slots=True, frozen=True)
class ThroughputMinute:
    """Jobs finalized in one minute (UTC, truncated): completed, and discarded (failed for
    good)."""

    minute: datetime
    completed: int
    discarded: int


@dataclass(slots=True, frozen=True)
class _Plan(Generic[T]):
    """A statement and how to turn its rows into the operation's result. ``local`` is the
    effect on this client's own producers when their notifier cannot hear the NOTIFY.
    ``then``: given the result, a statement that must commit with this one (or None);
    with it, the plan runs in a transaction. ``after``: given the result, a statement
    to run once it is written, on the same connection (or None): work that may be done
    again later, as a promotion the sweep would also do; then ``cascade``, given each
    such statement's rows, the next one (or None), at most WORKFLOW_TASKS_MAX times.
    ``reread``: given the result and the rows of the ``after`` statement, a statement
    reading again the result's rows that it changed (or None), and ``refresh``, given
    the result and those rows, the result as they are now (a retried task decided at
    once is returned as decided, not as the ``pending`` the retry wrote)."""

    stmt: Statement
    finish: Callable[[list[Row]], T]
    local: Callable[[T, Runtime], None] | None = None
    then: Callable[[T], Statement | None] | None = None
    after: Callable[[T], Statement | None] | None = None
    cascade: Callable[[list[Row]], Statement | None] | None = None
    reread: Callable[[T, list[Row]], Statement | None] | None = None
    refresh: Callable[[T, list[Row]], T] | None = None


# -- validation ---------------------------------------------------------------------------
def _job_id(value: object, field: str = "job_id") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(field, f"must be an int, not {type(value).__name__}")
    if not INT64_MIN <= value <= INT64_MAX:
        # A bigint column: Postgres would fail the statement, SQLite find nothing.
        raise InvalidInputError(field, f"{value} is outside the range of job ids (int64)")
    return int(value)


def _state(value: object, field: str) -> JobState:
    if isinstance(value, JobState):
        return value
    if isinstance(value, str) and value in STATE_BY_NAME:
        return STATE_BY_NAME[value]
    raise InvalidInputError(field, f"{value!r} is not a job state ({', '.join(STATE_BY_NAME)})")


def _str_list(value: object, field: str) -> list[str]:
    items = _list(value, field)
    for item in items:
        if not isinstance(item, str) or not item:
            raise InvalidInputError(field, "must contain non-empty strings")
        check_text_param(item, field)
    return items  # type: ignore[return-value]


def _list(value: object, field: str) -> list[object]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidInputError(field, f"must be a list, not {type(value).__name__}")
    items = list(value)
    if not items:
        raise InvalidInputError(field, "must not be empty (leave it out to match everything)")
    return items


def _json_object(value: object, field: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInputError(field, f"must be a dict, not {type(value).__name__}")
    try:
        text = _json_text(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(field, f"cannot be encoded as JSON: {exc}") from exc
    check_text_param(text, field)
    return dict(value)


def _json_text(value: object) -> str:
    """``value`` as JSON text, or a ValueError (TypeError) for what a job's row can't
    hold as either database and a Go worker read it back: check_json_value's refusals,
    then NaN and infinities, which aren't JSON (Postgres refused them late, with a
    driver error; SQLite stored them, as 9e999 and null)."""
    check_json_value(value)  # first: it refuses what would make json.dumps hang or recurse
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


# The longest queue name looked up as written when it is not one River would insert.
_FOREIGN_QUEUE_NAME_MAX = 1024


# The longest args text a search takes, on both databases (its escaped LIKE pattern, up
# to 4 bytes a character and two per escape, stays under SQLite's 50,000-byte limit).
ARGS_TEXT_MAX = 5000


def _queue_name(name: object, *, allow_all: bool) -> str:
    """The queue an action names. River's inserts refuse a name outside its pattern but
    its queue table holds any text, as another client wrote it: such a name is looked
    up as written (not found if no row has it), as River's QueuePause does. Refused: a
    name no row can hold (not text, empty, a NUL or a lone surrogate), and one over a
    kilobyte (not looked up; River's own names are at most 64 characters)."""
    if allow_all and name == ALL_QUEUES:
        return ALL_QUEUES
    if isinstance(name, str) and 0 < len(name) <= _FOREIGN_QUEUE_NAME_MAX:
        return check_text_param(name, "name")
    return validate_queue(name, "name")


def _limit(value: object, default: int) -> int:
    if value is None:
        return default
    return check_limit(value, JOB_LIST_LIMIT_MAX)


def check_limit(value: object, most: int) -> int:
    """A page size: an int from 1 to ``most``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise InvalidInputError("limit", f"must be an int between 1 and {most}")
    return value


class JobFilters(TypedDict, total=False):
    """The filters :meth:`~riverboat.AsyncClient.job_list` and ``job_delete_many`` take.
    Those given combine with AND; ``None`` is the same as not given.

    ``tags_all`` needs every tag, ``tags_any`` one of them, ``metadata`` is JSON
    containment (``@>``, Postgres only). ``args_keys`` needs every key at the top of the
    args, ``args_text`` is a case-insensitive substring of the args' JSON text (a search
    box: it reads every row the other filters leave), ``created_before`` an aware
    datetime (jobs older than that). ``where`` adds a SQL condition on ``river_job``'s columns, its
    values bound from ``where_params`` as ``:name`` (River's ``JobListParams.Where``). It
    is written into the statement as is: pass only trusted text, never user input;
    values always go through ``where_params``."""

    ids: Iterable[int] | None
    kinds: Iterable[str] | None
    queues: Iterable[str] | None
    states: Iterable[JobState | str] | None
    priorities: Iterable[int] | None
    tags_all: Iterable[str] | None
    tags_any: Iterable[str] | None
    metadata: Mapping[str, Any] | None
    args_keys: Iterable[str] | None
    args_text: str | None
    created_before: datetime | None
    where: str | None
    where_params: Mapping[str, Any] | None


class JobListOptions(JobFilters, total=False):
    """``job_list``'s keyword arguments: the :class:`JobFilters`, the order, the page size
    (``limit``, default 100) and the ``cursor`` a previous page returned. ``preview=True``
    reads rows for a listing: args longer than 16,384 characters cut to one more (such a
    row's ``encoded_args`` is longer than that and no longer JSON, so ``args`` raises),
    ``metadata`` empty and ``errors`` only the last attempt's, so a page of jobs
    carrying megabytes each (args, recorded output, logs) reads kilobytes."""

    order_by: JobListOrder
    descending: bool
    limit: int | None
    cursor: JobListCursor | str | None
    preview: bool


class JobDeleteManyOptions(JobFilters, total=False):
    """``job_delete_many``'s keyword arguments: the :class:`JobFilters`, how many at most
    (``limit``, default 100), and ``all=True`` to allow no filter at all."""

    limit: int | None
    all: bool


class JobBulkOptions(JobFilters, total=False):
    """``job_retry_many`` / ``job_cancel_many``'s keyword arguments: the
    :class:`JobFilters`, the batch size (``limit``, default 100), the keyset ``after_id``
    (the ``next_after_id`` of the previous batch), and ``all=True`` to allow no filter."""

    limit: int | None
    after_id: int
    all: bool


@dataclass(slots=True, frozen=True)
class JobBulkResult:
    """One batch of a bulk action: the jobs it changed (id order) and where the next
    batch starts (``None`` when no matching row is left after this batch)."""

    jobs: list[JobRow]
    next_after_id: int | None


@dataclass(slots=True, frozen=True)
class QueueActivity:
    """One queue's latency and throughput: when its oldest available job was due
    (``None``: nothing available), and jobs completed and discarded over the last hour,
    day and week (``{"1h": n, "24h": n, "7d": n}``)."""

    queue: str
    oldest_available_at: datetime | None
    completed: dict[str, int]
    discarded: dict[str, int]

    def latency(self, now: datetime) -> float | None:
        """Seconds the oldest available job has been due (0 if not yet due)."""
        if self.oldest_available_at is None:
            return None
        return max(0.0, (now - self.oldest_available_at).total_seconds())


@dataclass(slots=True, frozen=True)
class JobCountRow:
    state: JobState
    queue: str
    kind: str
    count: int


def _filters(options: JobFilters) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if (ids := options.get("ids")) is not None:
        out["ids"] = [_job_id(i, "ids") for i in _list(ids, "ids")]
    if (kinds := options.get("kinds")) is not None:
        out["kinds"] = _str_list(kinds, "kinds")
    if (queues := options.get("queues")) is not None:
        out["queues"] = [validate_queue(q, "queues") for q in _list(queues, "queues")]
    if (states := options.get("states")) is not None:
        out["states"] = [_state(s, "states").value for s in _list(states, "states")]
    if (priorities := options.get("priorities")) is not None:
        out["priorities"] = []
        for p in _list(priorities, "priorities"):
            if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 4:
                raise InvalidInputError("priorities", "must contain ints from 1 to 4")
            out["priorities"].append(p)
    if (tags_all := options.get("tags_all")) is not None:
        out["tags_all"] = _str_list(tags_all, "tags_all")
    if (tags_any := options.get("tags_any")) is not None:
        out["tags_any"] = _str_list(tags_any, "tags_any")
    if (metadata := options.get("metadata")) is not None:
        out["metadata"] = _json_object(metadata, "metadata")
    if (args_keys := options.get("args_keys")) is not None:
        out["args_keys"] = _str_list(args_keys, "args_keys")
    if (args_text := options.get("args_text")) is not None:
        if not isinstance(args_text, str) or not args_text.strip():
            raise InvalidInputError("args_text", "must be a non-empty string")
        check_text_param(args_text, "args_text")
        if len(args_text) > ARGS_TEXT_MAX:
            # SQLite refuses a LIKE pattern past 50,000 bytes ("pattern too complex"),
            # which reached the dashboard as a 503 and the CLI as a database error.
            raise InvalidInputError("args_text", f"must be at most {ARGS_TEXT_MAX} characters")
        # A LIKE pattern: the text itself, its wildcards escaped, anywhere in the args,
        # with JSON's separators written compactly, as the dialects write the args'
        # text they search (Postgres prints jsonb with a space after ':' and ',',
        # SQLite without: "order":1 and "order": 1 each found on one only).
        compact = args_text.replace(": ", ":").replace(", ", ",")
        escaped = compact.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        out["args_text"] = f"%{escaped}%"
    if (created_before := options.get("created_before")) is not None:
        if not isinstance(created_before, datetime) or created_before.tzinfo is None:
            raise InvalidInputError("created_before", "must be a timezone-aware datetime")
        out["created_before"] = created_before.astimezone(UTC)
    return out


_BULK_NEEDS_FILTER = (
    "needs at least one filter (or where=), or all=True to act on every job it applies to"
)


# -- local effects (poll-only / no LISTEN) --------------------------------------------------
def _local_pause(paused: bool, name: str) -> Callable[[Any, Runtime], None]:
    def apply(_result: Any, runtime: Runtime) -> None:
        for queue, producer in runtime.producers.items():
            if name in (ALL_QUEUES, queue):
                producer.set_paused(paused)

    return apply


def _local_cancel(job: JobRow, runtime: Runtime) -> None:
    if job.state == JobState.RUNNING:
        producer = runtime.producers.get(job.queue)
        if producer is not None:
            producer.cancel_job(job.id)


def _hears_notifications(runtime: Runtime) -> bool:
    driver = runtime.driver
    return bool(driver.capabilities.listen) and not runtime.config.poll_only


class _Ops:
    """The pure half of every admin operation, shared by the sync and async mixins."""

    __slots__ = ("dialect",)

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def _one_job(self, job_id: int) -> Callable[[list[Row]], JobRow]:
        decode = self.dialect.decode_job

        def finish(rows: list[Row]) -> JobRow:
            if not rows:
                raise NotFoundError(f"job {job_id} not found")
            job: JobRow = decode(rows[0])
            return job

        return finish

    # -- jobs --------------------------------------------------------------------------
    def job_cancel(self, job_id: object) -> _Plan[JobRow]:
        jid = _job_id(job_id)
        now = format_rfc3339_nano(datetime.now(UTC))
        return _Plan(
            self.dialect.job_cancel(jid, now),
            self._one_job(jid),
            _local_cancel,
            after=self._decide(lambda job: [job], retried=False),
            cascade=self.dialect.workflow_cascade,
        )

    def job_retry(self, job_id: object) -> _Plan[JobRow]:
        jid = _job_id(job_id)
        decode = self.dialect.decode_jobs
        return _Plan(
            self.dialect.job_retry(jid),
            self._one_job(jid),
            after=self._decide(lambda job: [job], retried=True),
            cascade=self.dialect.workflow_cascade,
            reread=self._reread_decided(lambda job: [job]),
            refresh=lambda job, rows: next(iter(decode(rows)), job),
        )

    def _reread_decided(
        self, jobs_of: Callable[[T], Iterable[JobRow]]
    ) -> Callable[[T, list[Row]], Statement | None]:
        """For a retry's plan: the statement reading again the retried tasks that the
        decision right after it changed (made available, or cancelled again)."""
        dialect = self.dialect

        def reread(result: T, promoted: list[Row]) -> Statement | None:
            retried = {job.id for job in jobs_of(result)}
            changed = [job_id for job_id, _, _ in dialect.decode_promoted(promoted)]
            ids = sorted(retried.intersection(changed))
            return dialect.job_get_by_id_many(ids) if ids else None

        return reread

    def _decide(
        self, jobs_of: Callable[[T], Iterable[JobRow]], *, retried: bool
    ) -> Callable[[T], Statement | None]:
        """For a retry's or a cancel's plan: its workflow tasks are decided right after,
        as promotion would. A task with dependencies is retried ``pending`` (it runs only
        once they completed): available, or cancelled again under its policy when one
        failed. A task cancelled at once (not running) has its dependents decided, as
        when a completer finalizes one. Left undone (a client that died), the runtime's
        sweep decides them."""
        dialect = self.dialect
        state = JobState.PENDING if retried else JobState.CANCELLED

        def decide(result: T) -> Statement | None:
            ids = [
                job.id
                for job in jobs_of(result)
                if job.state is state and workflow_meta(job) is not None
            ]
            if not ids:
                return None
            return dialect.workflow_promote((), ids) if retried else dialect.workflow_promote(ids)

        return decide

    def job_delete(self, job_id: object) -> _Plan[JobRow]:
        jid = _job_id(job_id)
        stmt = self.dialect.job_delete(jid)
        decode_deleted = self.dialect.decode_deleted

        def finish(rows: list[Row]) -> JobRow:
            if not rows:
                raise NotFoundError(f"job {jid} not found")
            job, deleted = decode_deleted(rows[0])
            if not deleted:
                raise JobRunningError(f"job {jid} is running; running jobs cannot be deleted")
            return job

        return _Plan(
            stmt,
            finish,
            then=self._orphans_of(lambda job: [job]),
            after=self._orphans_decided(lambda job: [job]),
            cascade=self.dialect.workflow_cascade,
        )

    def job_delete_many(self, options: JobDeleteManyOptions) -> _Plan[list[JobRow]]:
        check_option_names(options, JobDeleteManyOptions.__optional_keys__, "a job filter")
        chosen = _filters(options)
        fragment = _where_fragment(options.get("where"), options.get("where_params"))
        limit = options.get("limit")
        if not chosen and fragment is None and options.get("all") is not True:
            raise InvalidInputError(
                "filters",
                "job_delete_many needs at least one filter (or where=), or all=True to "
                "delete every job that is not running",
            )
        stmt = self.dialect.job_delete_many(
            filters=chosen,
            limit=_limit(limit, JOB_LIST_LIMIT_DEFAULT),
            **({"where": fragment} if fragment is not None else {}),
        )
        return _Plan(
            stmt,
            self.dialect.decode_jobs,
            then=self._orphans_of(lambda jobs: jobs),
            after=self._orphans_decided(lambda jobs: jobs),
            cascade=self.dialect.workflow_cascade,
        )

    def _orphans_of(
        self, deleted: Callable[[T], Iterable[JobRow]]
    ) -> Callable[[T], Statement | None] | None:
        """For a delete's plan: what cancels the dependents of the workflow tasks it
        deleted unfinished, where the dialect's delete statements do not do it."""
        if self.dialect.delete_cancels_orphans:
            return None
        dialect = self.dialect

        def cancel(result: T) -> Statement | None:
            orphans = orphaned_dependents(deleted(result))
            return dialect.workflow_cancel_orphans(orphans) if orphans else None

        return cancel

    def _orphans_decided(
        self, deleted: Callable[[T], Iterable[JobRow]]
    ) -> Callable[[T], Statement | None]:
        """For a delete's plan: once the dependents of the tasks it deleted unfinished
        are cancelled (the orphans under the ``cancel`` policy), those under ``run`` are
        decided and the cancelled ones' own dependents too, and so on down the cascade,
        as when a completer's promotion cancels a task. They waited for the runtime's
        sweep (for ever, with no client working the queues)."""
        dialect = self.dialect

        def decide(result: T) -> Statement | None:
            orphans = sorted({task_id for task_id, _ in orphaned_dependents(deleted(result))})
            # Named too: those under the "run" policy are decided now (their deleted
            # dependency counts as completed), and the cancelled ones' dependents next.
            return dialect.workflow_promote(orphans, orphans) if orphans else None

        return decide

    def _bulk_filters(
        self, options: JobFilters, allowed: Iterable[str], operation: str
    ) -> tuple[dict[str, Any], tuple[str, dict[str, Any]] | None]:
        check_option_names(options, frozenset(allowed), "a job filter")
        chosen = _filters(options)
        fragment = _where_fragment(options.get("where"), options.get("where_params"))
        if not chosen and fragment is None and options.get("all") is not True:
            raise InvalidInputError("filters", f"{operation} {_BULK_NEEDS_FILTER}")
        return chosen, fragment

    def job_bulk(self, action: str, options: JobBulkOptions) -> _Plan[JobBulkResult]:
        chosen, fragment = self._bulk_filters(
            options, JobBulkOptions.__optional_keys__, f"job_{action}_many"
        )
        count = _limit(options.get("limit"), JOB_LIST_LIMIT_DEFAULT)
        after_id = options.get("after_id", 0)
        if isinstance(after_id, bool) or not isinstance(after_id, int) or after_id < 0:
            raise InvalidInputError("after_id", "must be an int >= 0")
        stmt = self.dialect.job_bulk(
            action,
            filters=chosen,
            limit=count,
            after_id=after_id,
            cancel_attempted_at=format_rfc3339_nano(datetime.now(UTC)),
            **({"where": fragment} if fragment is not None else {}),
        )
        decode_jobs = self.dialect.decode_jobs

        def finish(rows: list[Row]) -> JobBulkResult:
            jobs: list[JobRow] = sorted(decode_jobs(rows), key=lambda job: job.id)
            # A full batch may have more after it; a short one was the last.
            return JobBulkResult(jobs, jobs[-1].id if len(jobs) == count else None)

        def local(result: JobBulkResult, runtime: Runtime) -> None:
            for job in result.jobs:
                _local_cancel(job, runtime)

        cascade = self.dialect.workflow_cascade
        if action == "cancel":
            decide = self._decide(_bulk_jobs, retried=False)
            return _Plan(stmt, finish, local, after=decide, cascade=cascade)

        def refresh(result: JobBulkResult, rows: list[Row]) -> JobBulkResult:
            now = {job.id: job for job in decode_jobs(rows)}
            jobs = [now.get(job.id, job) for job in result.jobs]
            return JobBulkResult(jobs, result.next_after_id)

        return _Plan(
            stmt,
            finish,
            after=self._decide(_bulk_jobs, retried=True),
            cascade=cascade,
            reread=self._reread_decided(_bulk_jobs),
            refresh=refresh,
        )

    def job_count_matching(self, action: str, options: JobFilters) -> _Plan[int]:
        if action not in ("", "retry", "cancel", "delete"):
            raise InvalidInputError("action", "must be '', 'retry', 'cancel' or 'delete'")
        check_option_names(options, JobFilters.__optional_keys__, "a job filter")
        chosen = _filters(options)
        fragment = _where_fragment(options.get("where"), options.get("where_params"))
        stmt = self.dialect.job_count_matching(
            filters=chosen, action=action, **({"where": fragment} if fragment else {})
        )
        return _Plan(stmt, lambda rows: int(rows[0][0]))

    def job_count_grouped(self, options: JobFilters) -> _Plan[list[JobCountRow]]:
        check_option_names(options, JobFilters.__optional_keys__, "a job filter")
        chosen = _filters(options)
        fragment = _where_fragment(options.get("where"), options.get("where_params"))
        stmt = self.dialect.job_count_grouped(
            filters=chosen, **({"where": fragment} if fragment else {})
        )

        def finish(rows: list[Row]) -> list[JobCountRow]:
            out = [
                JobCountRow(STATE_BY_NAME[str(state)], str(queue), str(kind), int(count))
                for state, queue, kind, count in rows
            ]
            out.sort(key=lambda r: (list(JobState).index(r.state), r.queue, r.kind))
            return out

        return _Plan(stmt, finish)

    def job_list(self, options: JobListOptions) -> _Plan[JobListResult]:
        check_option_names(options, JobListOptions.__optional_keys__, "a job filter")
        chosen = _filters(options)
        fragment = _where_fragment(options.get("where"), options.get("where_params"))
        order_by = options.get("order_by", "id")
        descending = options.get("descending", False)
        limit = options.get("limit")
        cursor = options.get("cursor")
        if order_by not in _ORDER_BY:
            raise InvalidInputError("order_by", f"must be one of {', '.join(_ORDER_BY)}")
        if not isinstance(descending, bool):
            raise InvalidInputError("descending", "must be a bool")
        preview = options.get("preview", False)
        if not isinstance(preview, bool):
            raise InvalidInputError("preview", "must be a bool")
        states = [STATE_BY_NAME[s] for s in chosen.get("states", ())]
        column = _time_column(order_by, states)
        count = _limit(limit, JOB_LIST_LIMIT_DEFAULT)
        after: tuple[int, datetime | None] | None = None
        if cursor is not None:
            if isinstance(cursor, str):
                cursor = JobListCursor.decode(cursor)
            elif not isinstance(cursor, JobListCursor):
                raise InvalidInputError("cursor", "must be a JobListCursor or its string form")
            if cursor.order_by != order_by or cursor.column != column:
                raise InvalidInputError(
                    "cursor",
                    f"was made for order_by={cursor.order_by!r} ({cursor.column}), "
                    f"not {order_by!r} ({column})",
                )
            after = (cursor.id, cursor.time)
        # One row more than asked tells whether another page follows.
        stmt = self.dialect.job_list(
            filters=chosen,
            order_column=column,
            descending=descending,
            limit=count + 1,
            after=after,
            **({"where": fragment} if fragment is not None else {}),
            preview=preview,
        )
        decode_jobs = self.dialect.decode_jobs

        def finish(rows: list[Row]) -> JobListResult:
            jobs: list[JobRow] = decode_jobs(rows[:count])
            last = None
            if jobs:
                tail = jobs[-1]
                last = JobListCursor(
                    tail.id, order_by, column, None if column == "id" else getattr(tail, column)
                )
            return JobListResult(jobs, last if len(rows) > count else None, last)

        return _Plan(stmt, finish)

    def job_update(
        self, job_id: object, *, output: Any, metadata: Mapping[str, Any] | None, unset: Any
    ) -> _Plan[JobRow]:
        jid = _job_id(job_id)
        merge = _json_object(metadata, "metadata") if metadata is not None else {}
        if output is not unset:
            # What record_output() refuses in a job, refused here before any SQL: the
            # output was stored as given (NaN, a NUL, nesting past what riverboat reads).
            try:
                text = _json_text(output)
            except (TypeError, ValueError) as exc:
                raise InvalidInputError("output", f"cannot be encoded as JSON: {exc}") from exc
            check_text_param(text, "output")
            check_output_size(text)
            merge["output"] = output
        if not merge:  # nothing to write: read the row instead of rewriting it
            return _Plan(self.dialect.job_get_by_id(jid), self._one_job(jid))
        return _Plan(self.dialect.job_update(jid, merge), self._one_job(jid))

    # -- counts and activity (dashboards) -----------------------------------------------
    def job_count_by_state(self, cap: object) -> _Plan[dict[JobState, int]]:
        if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= 2**31 - 2:
            raise InvalidInputError("cap", "must be a positive int")
        # One row over the cap tells "more than cap" apart from "exactly cap".
        stmt = self.dialect.job_count_by_state_capped(cap + 1)

        def finish(rows: list[Row]) -> dict[JobState, int]:
            return {STATE_BY_NAME[str(state)]: int(count) for state, count in rows}

        return _Plan(stmt, finish)

    def job_count_by_queue(
        self, states: Iterable[JobState | str] | None
    ) -> _Plan[dict[str, dict[JobState, int]]]:
        chosen = [_state(s, "states") for s in _list(states, "states")] if states else None
        if chosen is None:
            chosen = [s for s in JobState if s not in _FINALIZED_STATES]
        stmt = self.dialect.job_count_by_queue_and_state([s.value for s in chosen])

        def finish(rows: list[Row]) -> dict[str, dict[JobState, int]]:
            out: dict[str, dict[JobState, int]] = {}
            for queue, state, count in rows:
                out.setdefault(str(queue), {})[STATE_BY_NAME[str(state)]] = int(count)
            return out

        return _Plan(stmt, finish)

    def job_throughput(self, minutes: object) -> _Plan[list[ThroughputMinute]]:
        if (
            isinstance(minutes, bool)
            or not isinstance(minutes, int)
            or not 1 <= minutes <= THROUGHPUT_MINUTES_MAX
        ):
            raise InvalidInputError("minutes", f"must be an int from 1 to {THROUGHPUT_MINUTES_MAX}")
        stmt = self.dialect.job_throughput(minutes)
        decode = self.dialect.decode_throughput

        def finish(rows: list[Row]) -> list[ThroughputMinute]:
            return [ThroughputMinute(*row) for row in decode(rows)]

        return _Plan(stmt, finish)

    def queue_activity(self) -> _Plan[list[QueueActivity]]:
        decode_timestamp = self.dialect.decode_timestamp

        def finish(rows: list[Row]) -> list[QueueActivity]:
            out = []
            for queue, oldest, c1, c24, c7, d1, d24, d7 in rows:
                out.append(
                    QueueActivity(
                        str(queue),
                        decode_timestamp(oldest),
                        {"1h": int(c1), "24h": int(c24), "7d": int(c7)},
                        {"1h": int(d1), "24h": int(d24), "7d": int(d7)},
                    )
                )
            return out

        return _Plan(self.dialect.queue_activity(), finish)

    def leader_get(self) -> _Plan[Leader | None]:
        stmt = self.dialect.leader_get_elected()
        decode = self.dialect.decode_leader

        def finish(rows: list[Row]) -> Leader | None:
            if not rows:
                return None
            return decode(rows[0])

        return _Plan(stmt, finish)

    # -- queues ------------------------------------------------------------------------
    def _one_queue(self, name: str) -> Callable[[list[Row]], QueueRow]:
        decode_queues = self.dialect.decode_queues

        def finish(rows: list[Row]) -> QueueRow:
            queues: list[QueueRow] = decode_queues(rows)
            if not queues:
                raise NotFoundError(f"queue {name!r} not found")
            return queues[0]

        return finish

    def queue_get(self, name: object) -> _Plan[QueueRow]:
        queue = _queue_name(name, allow_all=False)
        return _Plan(self.dialect.queue_get(queue), self._one_queue(queue))

    def queue_list(self, limit: int | None) -> _Plan[list[QueueRow]]:
        stmt = self.dialect.queue_list(_limit(limit, QUEUE_LIST_LIMIT_DEFAULT))
        return _Plan(stmt, self.dialect.decode_queues)

    def _queue_toggle(self, name: object, paused: bool) -> _Plan[list[QueueRow]]:
        queue = _queue_name(name, allow_all=True)
        dialect = self.dialect
        stmt = dialect.queue_pause(queue) if paused else dialect.queue_resume(queue)
        decode_queues = self.dialect.decode_queues

        def finish(rows: list[Row]) -> list[QueueRow]:
            queues: list[QueueRow] = decode_queues(rows)
            if not queues and queue != ALL_QUEUES:
                raise NotFoundError(f"queue {queue!r} not found")
            return queues

        return _Plan(stmt, finish, _local_pause(paused, queue))

    def queue_pause(self, name: object) -> _Plan[list[QueueRow]]:
        return self._queue_toggle(name, True)

    def queue_resume(self, name: object) -> _Plan[list[QueueRow]]:
        return self._queue_toggle(name, False)

    def queue_update(self, name: object, metadata: Mapping[str, Any] | None) -> _Plan[QueueRow]:
        queue = _queue_name(name, allow_all=False)
        meta = _json_object(metadata, "metadata") if metadata is not None else None
        return _Plan(self.dialect.queue_update(queue, meta), self._one_queue(queue))


_UNSET: Any = object()


def _bulk_jobs(result: JobBulkResult) -> list[JobRow]:
    return result.jobs


def _ops(core: _ClientCore) -> _Ops:
    return _Ops(core.dialect)


_WHERE_PARAM_RE = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


def _where_fragment(
    where: str | None, params: Mapping[str, Any] | None
) -> tuple[str, dict[str, Any]] | None:
    """River's ``JobListParams.Where``: a SQL condition from trusted code, its values
    bound as ``:name`` parameters. Each name is renamed ``where_<name>`` so it can't
    collide with riverboat's own parameters; a name without a value (or a value without
    a name) is refused before anything runs."""
    if where is None:
        if params:
            raise InvalidInputError("where_params", "given without where")
        return None
    if not isinstance(where, str) or not where.strip():
        raise InvalidInputError("where", "must be a non-empty SQL condition")
    if ";" in where:
        raise InvalidInputError("where", "must be one condition, without ';'")
    values = dict(params or {})
    used = set(_WHERE_PARAM_RE.findall(where))
    missing = sorted(used - values.keys())
    if missing:
        raise InvalidInputError("where_params", f"no value for {', '.join(missing)}")
    unused = sorted(set(values) - used)
    if unused:
        raise InvalidInputError("where_params", f"not used in where: {', '.join(unused)}")
    text = _WHERE_PARAM_RE.sub(lambda m: f":where_{m.group(1)}", where)
    return text, {f"where_{name}": value for name, value in values.items()}
