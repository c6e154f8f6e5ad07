"""One insert, decided before any I/O.

An :class:`InsertPlan` holds the jobs of one insert call (validated and encoded, unique
keys computed: :mod:`riverboat._insert`), what each was made from (for insert hooks and
``insert_many`` middleware), and how it is to be written: rows read back or only
counted, ``COPY`` or not, which notification policy. :meth:`InsertPlan.writes` turns it
into the statements themselves once the hooks have run: batches of at most
:data:`INSERT_BATCH_MAX` jobs, unique twins collapsed, the queues to notify chosen.
:mod:`riverboat._insert_async` (and its generated sync twin) runs a plan; the client's
every insert path, the workflow insert, the periodic enqueuer and ``riverboat.testing``
all go through the two.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from riverboat._insert import InsertParams
from riverboat._job import InsertResult, JobState
from riverboat._sql import Statement
from riverboat.dialect.base import BulkCopy, CopyBatch, Dialect
from riverboat.errors import NotSupportedError
from riverboat.flow import check_args_keys

if TYPE_CHECKING:
    from riverboat.middleware import MiddlewareStack

__all__ = ["INSERT_BATCH_MAX", "InsertBatch", "InsertPlan", "InsertWrites", "NotifyLimiter"]

INSERT_BATCH_MAX = 5000  # River's insert batch size; also bounds one statement's arrays


class NotifyLimiter:
    """At most one insert notification per queue per cooldown, as River's notifylimiter
    (a cooldown of 0 notifies every insert). One per client, shared by its inserts and
    its periodic enqueuer."""

    __slots__ = ("_cooldown", "_last")

    def __init__(self, cooldown: float = 0.0) -> None:
        self._cooldown = cooldown
        self._last: dict[str, float] = {}

    def queues_to_notify(self, jobs: Sequence[InsertParams]) -> list[str]:
        now = time.monotonic()
        out: list[str] = []
        for job in jobs:
            if job.state != "available" or job.queue in out:
                continue
            last = self._last.get(job.queue)
            if last is None or now - last >= self._cooldown:
                self._last[job.queue] = now
                out.append(job.queue)
        return out


class InsertBatch:
    """One insert statement, and where each requested job's row is in its result."""

    __slots__ = ("dialect", "origin", "stmt", "unique")

    def __init__(
        self,
        dialect: Dialect,
        stmt: Statement,
        origin: list[tuple[int, bool]] | None,
        unique: bool,
    ) -> None:
        self.dialect = dialect
        self.stmt = stmt
        # (row position, is a twin) for each job asked for; None: one row per job.
        self.origin = origin
        self.unique = unique  # whether :meth:`count` must tell duplicates apart

    def decode(self, rows: Sequence[Any]) -> list[InsertResult]:
        """One result per job asked for: a twin gets its first's row, as a duplicate."""
        results: list[InsertResult] = self.dialect.decode_insert(rows)
        if self.origin is None:
            return results
        out = []
        for sent, twin in self.origin:
            first = results[sent]
            out.append(InsertResult(first.job, True) if twin else first)
        return out

    def count(self, rows: Sequence[Any]) -> int:
        """Jobs it inserted: unique duplicates (and twins in the batch) don't count."""
        if not self.unique:
            return len(rows)
        return sum(not r.unique_skipped_as_duplicate for r in self.decode(rows))


def collapse_unique_twins(
    jobs: list[InsertParams],
) -> tuple[list[InsertParams], list[tuple[int, bool]] | None]:
    """Send each unique key once per statement.

    Postgres's ON CONFLICT DO UPDATE cannot touch one row twice in a statement, so two
    jobs with the same unique key in one batch would fail the whole insert. The later
    twin is what a second insert would be: a duplicate of the first. ``origin`` maps each
    requested job to (its row's position in the result, whether it is such a twin).
    """
    first_by_key: dict[bytes, int] = {}
    sent: list[InsertParams] = []
    origin: list[tuple[int, bool]] = []
    twins = False
    for job in jobs:
        key = job.unique_key
        if key is not None:
            seen = first_by_key.get(key)
            if seen is not None:
                origin.append((seen, True))
                twins = True
                continue
            first_by_key[key] = len(sent)
        origin.append((len(sent), False))
        sent.append(job)
    return (sent, origin) if twins else (jobs, None)


@dataclass(slots=True)
class InsertWrites:
    """What one plan sends, in order: ``copies`` (then ``notify``), then ``batches``."""

    batches: list[InsertBatch]
    copies: list[CopyBatch]
    notify: Statement | None

    @property
    def needs_transaction(self) -> bool:
        """Several statements are all-or-nothing; a driver copies only in a transaction."""
        return bool(self.copies) or len(self.batches) + (self.notify is not None) > 1


@dataclass(slots=True)
class InsertPlan:
    """One insert call's jobs and how to write them (see the module docstring).

    ``notify``: the limiter choosing which queues an insert notifies (None: none; the
    test helpers claim the job they insert themselves). ``copy``: when only counting
    (``insert_many_fast``), jobs without a unique key go in by ``COPY`` (a ``BulkCopy``
    dialect on a driver that can). ``now``: a test clock's time for ``created_at``
    (None: the database's). ``middleware``: the insert hooks and ``insert_many`` layers
    the jobs go through. ``args_keys``: the args keys each queue's limits are
    partitioned by (riverboat.flow), checked again once the hooks ran."""

    dialect: Dialect
    jobs: list[InsertParams]
    args: Sequence[object]
    notify: NotifyLimiter | None
    now: datetime | None = None
    middleware: MiddlewareStack | None = None
    copy: bool = False
    args_keys: Mapping[str, tuple[str, ...]] | None = None

    def check_after_hooks(self) -> None:
        """Refuse, before anything is written, a job an insert hook moved into a queue
        whose limits are partitioned by an args key it lacks (or whose args it changed
        so): checked before the hooks only, such a job went into the partition of
        null, shared with every other job without the key."""
        if self.args_keys:
            check_args_keys(self.args_keys, self.jobs, many=len(self.jobs) > 1)

    def writes(self, *, rows: bool) -> InsertWrites:
        """The statements, built from the jobs as the insert hooks left them; ``rows``:
        whether the rows are read back (else only counted)."""
        jobs = self.jobs
        if not rows:
            unique = [j for j in jobs if j.unique_key is not None]
            plain = [j for j in jobs if j.unique_key is None] if unique else jobs
            if self.copy and plain:
                copies, notify = self._copies(plain)
                return InsertWrites(self._batches(unique, count=True), copies, notify)
            batches = self._batches(plain, count=True) + self._batches(unique, count=True)
            return InsertWrites(batches, [], None)
        return InsertWrites(self._batches(jobs), [], None)

    def _batches(self, jobs: list[InsertParams], *, count: bool = False) -> list[InsertBatch]:
        out = []
        for start in range(0, len(jobs), INSERT_BATCH_MAX):
            part = jobs if len(jobs) <= INSERT_BATCH_MAX else jobs[start : start + INSERT_BATCH_MAX]
            # One job has no twin: the usual single insert skips the search.
            batch, origin = collapse_unique_twins(part) if len(part) > 1 else (part, None)
            stmt = self.dialect.job_insert_many(batch, self._queues(batch), self.now)
            # Counting (rows=False) reads a batch's rows only when a job may be a duplicate.
            unique = count and any(j.unique_key is not None for j in batch)
            out.append(InsertBatch(self.dialect, stmt, origin, unique))
        return out

    def _copies(self, plain: list[InsertParams]) -> tuple[list[CopyBatch], Statement | None]:
        dialect = self.dialect
        if not isinstance(dialect, BulkCopy):  # a driver said copy=True over another dialect
            raise NotSupportedError(f"COPY is not supported by the {dialect.name} dialect")
        queues = self._queues(plain)
        return dialect.job_copy(plain), dialect.job_insert_notify(queues) if queues else None

    def _queues(self, jobs: Sequence[InsertParams]) -> list[str]:
        return self.notify.queues_to_notify(jobs) if self.notify is not None else []

    def available_queues(self) -> list[str]:
        """The queues that got available jobs: the ones to wake locally after commit."""
        return sorted({j.queue for j in self.jobs if j.state == JobState.AVAILABLE})
