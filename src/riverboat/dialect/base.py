"""What every dialect provides, and the pure pieces dialects share."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from riverboat._job import InsertResult, JobRow, JobState, decode_metadata
from riverboat._sql import Query, Statement, render_schema
from riverboat.dialect._admin_common import AdminStatements
from riverboat.dialect._fleet_common import FleetStatements
from riverboat.dialect._flow_common import FlowStatements
from riverboat.dialect._periodic_common import PeriodicStatements
from riverboat.dialect._rows import COMPLETION_COLUMNS, job_patcher
from riverboat.dialect._workflow_common import WorkflowStatements
from riverboat.errors import InvalidInputError

if TYPE_CHECKING:
    from riverboat._insert import InsertParams

__all__ = [
    "BulkCopy",
    "CopyBatch",
    "Dialect",
    "JobStateUpdate",
    "Leader",
    "NotificationOutbox",
    "RescueUpdate",
    "is_plain_completion",
    "validate_schema_name",
]

# River: a schema must be a plain identifier, short enough that "<schema>.river_leadership"
# still fits Postgres's 63-byte channel names.
_SCHEMA_RE = re.compile(r"\A[a-zA-Z_][a-zA-Z0-9_]*\Z")
SCHEMA_MAX = 46


def validate_schema_name(schema: str | None) -> str | None:
    if schema is None or schema == "":
        return None
    if not isinstance(schema, str):
        raise InvalidInputError("schema", f"must be a str, not {type(schema).__name__}")
    if len(schema) > SCHEMA_MAX or not _SCHEMA_RE.match(schema):
        raise InvalidInputError(
            "schema",
            f"{schema!r} must be an identifier ([a-zA-Z_][a-zA-Z0-9_]*) of at most "
            f"{SCHEMA_MAX} characters",
        )
    return schema


@dataclass(slots=True)
class JobStateUpdate:
    """One outcome for the completer: River's JobSetStateIfRunning parameters.

    ``None`` means "leave as is". ``finalized`` stamps finalized_at with the database's
    now(). ``error`` is an encoded :class:`AttemptError`; ``metadata_updates`` an encoded
    JSON object merged into metadata, even when the row is no longer running.
    ``claimed_attempt`` (riverboat's, not River's): nothing is written unless the row is
    still at the attempt that produced the outcome. A worker frozen past the rescuer's
    horizon would otherwise finalize the attempt another worker is running since.
    """

    id: int
    state: JobState
    attempt: int | None = None
    error: str | None = None
    finalized: bool = False
    metadata_updates: str | None = None
    scheduled_at: datetime | None = None
    claimed_attempt: int | None = None


def is_plain_completion(update: JobStateUpdate) -> bool:
    """A successful job's outcome with nothing else to write: what most outcomes are,
    and what :meth:`Dialect.job_complete_many` writes."""
    return (
        update.state is JobState.COMPLETED
        and update.metadata_updates is None
        and update.error is None
        and update.attempt is None
        and update.scheduled_at is None
    )


@dataclass(slots=True, frozen=True)
class Leader:
    """The ``river_leader`` row: which client runs maintenance, and until when."""

    leader_id: str
    elected_at: datetime
    expires_at: datetime


@dataclass(slots=True, frozen=True)
class RescueUpdate:
    """One stuck job's fate, decided by the rescuer (River's JobRescueMany row)."""

    id: int
    error: str
    finalized_at: datetime | None
    scheduled_at: datetime
    state: str


@dataclass(slots=True, frozen=True)
class CopyBatch:
    """Rows for one ``COPY <schema>.<table> (<columns>) FROM STDIN``; each driver that can
    COPY builds the command its own way (psycopg's Copy, asyncpg's copy_records_to_table)."""

    schema: str | None
    table: str
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]


# How many client ids a job's attempted_by keeps (River's JobGetAvailable trims it).
MAX_ATTEMPTED_BY = 100

# The row a plain completion leaves: the claimed one with what job_complete_many changed.
_completed = job_patcher("finalized_at", "metadata", "state")
_COMPLETED_ATTEMPT, _COMPLETED_AT, _COMPLETED_METADATA = (
    COMPLETION_COLUMNS.index(name) for name in ("attempt", "finalized_at", "metadata")
)


class Dialect(
    AdminStatements,
    FleetStatements,
    FlowStatements,
    PeriodicStatements,
    WorkflowStatements,
    ABC,
):
    """The contract every dialect fulfils: each operation the client, the runtime, the
    maintenance services and the admin API ask of a database, with its signature.

    An operation builds a :class:`~riverboat._sql.Statement` (SQL of this dialect plus
    its encoded arguments) or decodes the rows one returned; no operation does I/O.
    They are abstract here, so a dialect that lacks one (or renamed it) can't be
    instantiated (a ``TypeError`` naming it) and fails mypy, instead of turning into a
    silently disabled service or a skipped test. Where an operation goes: its SQL and
    encoding in ``dialect/<name>*.py``, its declaration here, its call in the layer that
    needs it (see docs/architecture.md). The administration operations (list, cancel,
    retry, delete, queues) come from :class:`AdminStatements`, whose encoding both
    dialects share; their SQL-specific hooks are abstract there.
    """

    name: ClassVar[str]
    # Whether a statement can skip rows another session holds locked (SQLite has no row
    # locks: its single writer holds the whole database, so there is nothing to skip).
    row_locks: ClassVar[bool] = True
    schema: str | None
    # Each class in the hierarchy (the dialect and its per-entity mixins, such as
    # PostgresAdmin) contributes its own statements; they are merged here.
    _queries: ClassVar[dict[str, str]] = {}

    def __init__(self, schema: str | None = None) -> None:
        self.schema = validate_schema_name(schema)
        texts: dict[str, str] = {}
        for klass in reversed(type(self).__mro__):
            texts.update(klass.__dict__.get("_queries", {}))
        self.q = {
            name: Query(name, render_schema(text, self.schema)) for name, text in texts.items()
        }

    def stmt(self, query_name: str, /, **params: Any) -> Statement:
        return Statement(self.q[query_name], params)

    # -- inserting and reading jobs ------------------------------------------------------
    @abstractmethod
    def job_insert_many(
        self, jobs: Sequence[InsertParams], notify: Sequence[str], now: datetime | None = None
    ) -> Statement:
        """One statement inserting ``jobs`` and returning their rows (for unique jobs
        already present, the existing row, flagged as a duplicate). It also sends the
        insert notification for each queue in ``notify`` that gets an available job.
        ``now`` (a test clock's time, else None for the database's) is ``created_at``."""

    @abstractmethod
    def decode_insert(self, rows: Sequence[Sequence[Any]]) -> list[InsertResult]: ...

    @abstractmethod
    def decode_job(self, row: Sequence[Any], /) -> JobRow: ...

    def decode_jobs(self, rows: Sequence[Sequence[Any]]) -> list[JobRow]:
        decode = self.decode_job
        return [decode(row) for row in rows]

    @abstractmethod
    def job_get_by_id(self, job_id: int) -> Statement: ...

    @abstractmethod
    def job_get_by_id_many(self, job_ids: Sequence[int]) -> Statement: ...

    @abstractmethod
    def job_get_cancel_requested(self, job_ids: Sequence[int]) -> Statement:
        """River's JobGetCancelRequested: rows ``(id,)`` of the given jobs that are
        running with a cancellation requested (``cancel_attempted_at`` in metadata)."""

    # -- the runtime: claim, run, complete -----------------------------------------------
    def job_get_available(
        self,
        *,
        queue: str,
        max_to_lock: int,
        client_id: str,
        now: datetime | None = None,
        kinds: Sequence[str] | None = None,
    ) -> Statement:
        """River's JobGetAvailable: claim up to ``max_to_lock`` jobs of ``queue``, due by
        ``now`` (the database's clock when None), for ``client_id``; full rows back.
        With ``kinds``, only jobs of those kinds (River's FetchOnlyKnownKinds), through a
        statement of its own so the usual claim keeps its plan."""
        name = "job_get_available"
        params = {
            "queue": queue,
            "max_to_lock": max_to_lock,
            "max_attempted_by": MAX_ATTEMPTED_BY,
            "attempted_by": client_id,
            "now": self.time_param(now),
        }
        if kinds is not None:
            name = "job_get_available_kinds"
            params["kinds"] = self.text_list_param(kinds)
        return Statement(self.q[name], params)  # stmt(), without copying params again

    def job_set_state_if_running_many(
        self,
        updates: Sequence[JobStateUpdate],
        *,
        returning: bool = True,
        skip_locked: bool = False,
    ) -> Statement:
        """River's JobSetStateIfRunningMany. With ``skip_locked`` (the completer), a row
        another session holds locked is left as it is instead of waited for: it stays
        ``running``, which is how the caller knows to try it again."""
        name = (
            "job_set_state_if_running_many"
            if returning
            else "job_set_state_if_running_many_no_return"
        )
        if skip_locked and self.row_locks:
            name += "_skip_locked"
        return Statement(self.q[name], self.state_updates_params(updates))

    @abstractmethod
    def state_updates_params(self, updates: Sequence[JobStateUpdate]) -> dict[str, Any]:
        """The parameters of :meth:`job_set_state_if_running_many`'s statements."""

    def job_complete_many(
        self, job_ids: Sequence[int], attempts: Sequence[int], *, returning: bool
    ) -> Statement | None:
        """A cheaper :meth:`job_set_state_if_running_many` for plain completions only
        (``completed``, finalized, no error, metadata, attempt or time; see
        :func:`is_plain_completion`) of jobs still running at their claimed ``attempts``
        (one per id; see ``JobStateUpdate.claimed_attempt``), or ``None`` when this
        dialect has none and the
        general statement serves. It skips rows another session holds locked (it is the
        completer's alone). With ``returning``, its rows are the jobs' columns in
        :data:`~riverboat.dialect._rows.COMPLETION_COLUMNS` (the id first), for
        :meth:`completed_job` to patch onto the claimed rows."""
        return None

    def completed_job(self, claimed: JobRow, row: Sequence[Any]) -> JobRow | None:
        """The stored row after a plain completion: ``claimed`` with the state, the
        finalized time and the metadata from ``row`` (a :meth:`job_complete_many` row).
        ``None`` when the row's attempt isn't the claimed one (another client claimed
        the job again after a rescue): the caller then reads the whole row."""
        if row[_COMPLETED_ATTEMPT] != claimed.attempt:
            return None
        return _completed(
            claimed,
            row[_COMPLETED_AT],
            decode_metadata(row[_COMPLETED_METADATA]),
            JobState.COMPLETED,
        )

    @abstractmethod
    def job_count_upcoming(self, queues: Sequence[str], horizon: float) -> Statement: ...

    @abstractmethod
    def job_due_exists(self, queues: Sequence[str], horizon: float) -> Statement: ...

    @abstractmethod
    def queue_create_or_set_updated_at(self, name: str) -> Statement: ...

    # -- leadership and maintenance ------------------------------------------------------
    def leader_attempt_elect(self, *, leader_id: str, ttl: float) -> Statement:
        return self.stmt("leader_attempt_elect", leader_id=leader_id, ttl=self.duration_param(ttl))

    def leader_attempt_reelect(
        self, *, leader_id: str, elected_at: datetime, ttl: float
    ) -> Statement:
        return self.stmt(
            "leader_attempt_reelect",
            leader_id=leader_id,
            elected_at=self.time_param(elected_at),
            ttl=self.duration_param(ttl),
        )

    def leader_get_elected(self) -> Statement:
        return self.stmt("leader_get_elected")

    @abstractmethod
    def leader_resign(self, *, leader_id: str, elected_at: datetime) -> Statement: ...

    def leader_request_resign(self) -> Statement:
        # Postgres names the notification channel after the schema.
        return self.stmt("leader_request_resign", schema=self.schema)

    @abstractmethod
    def decode_leader(self, row: Sequence[Any]) -> Leader: ...

    @abstractmethod
    def job_schedule(
        self, *, max: int, lookahead: float = 5.0, now: datetime | None = None
    ) -> Statement:
        """``now``: a test clock's time, else None for the database's (or the host's)."""

    @abstractmethod
    def job_get_stuck(self, *, after_id: int, stuck_horizon: datetime, max: int) -> Statement: ...

    @abstractmethod
    def job_rescue_many(
        self, updates: Sequence[RescueUpdate], *, stuck_horizon: datetime
    ) -> Statement: ...

    def job_delete_before(
        self,
        *,
        cancelled_retention: float | None,
        completed_retention: float | None,
        discarded_retention: float | None,
        max: int,
        queues_excluded: Sequence[str] | None = None,
    ) -> Statement:
        """The cleaner's batch: at most ``max`` finalized jobs past their state's
        retention (``None`` keeps that state forever), outside ``queues_excluded``."""
        return self.stmt(
            "job_delete_before",
            cancelled_retention=self.retention_param(cancelled_retention),
            completed_retention=self.retention_param(completed_retention),
            discarded_retention=self.retention_param(discarded_retention),
            queues_excluded=self.text_list_param(queues_excluded),
            max=max,
        )

    def queue_delete_expired(self, *, retention: float, max: int) -> Statement:
        return self.stmt("queue_delete_expired", retention=self.retention_param(retention), max=max)

    # -- how this dialect binds values the statements above share ----------------------
    @abstractmethod
    def time_param(self, value: datetime | None) -> Any:
        """A timestamp parameter (None stays None: the database's clock)."""

    @abstractmethod
    def duration_param(self, seconds: float) -> Any:
        """A length of time in seconds, as the dialect's SQL adds it to a timestamp."""

    @abstractmethod
    def retention_param(self, seconds: float | None) -> Any:
        """A retention in seconds, as the dialect's SQL compares it with a timestamp."""

    @abstractmethod
    def text_list_param(self, values: Sequence[str] | None) -> Any:
        """A list of strings (None stays None)."""


class NotificationOutbox(ABC):
    """What a dialect without LISTEN/NOTIFY (SQLite) adds: River's ``river_notification``
    outbox, which its driver polls and its leader cleans. Checked with ``isinstance``."""

    @abstractmethod
    def notification_insert_many(self, notifications: Sequence[tuple[str, str]]) -> Statement: ...

    @abstractmethod
    def notification_get_after(self, after: int, max: int = ...) -> Statement: ...

    @abstractmethod
    def notification_get_last_id(self) -> Statement: ...

    @abstractmethod
    def notification_delete_before(self, *, retention: float, max: int) -> Statement: ...


class BulkCopy(ABC):
    """What a dialect whose database can ``COPY`` adds (Postgres), for
    ``insert_many_fast`` on drivers whose capabilities say ``copy``. Checked with
    ``isinstance``."""

    @abstractmethod
    def job_copy(self, jobs: Sequence[InsertParams]) -> list[CopyBatch]: ...

    @abstractmethod
    def job_insert_notify(self, queues: Sequence[str]) -> Statement: ...
