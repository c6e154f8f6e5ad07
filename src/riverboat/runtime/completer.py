"""The batch completer: job outcomes are buffered and written one statement per batch.

Outcomes wait in a dict keyed by job id (a later outcome for the same job replaces an
earlier one). A flush starts when the backlog reaches ``batch_threshold`` or
``flush_delay`` after the first outcome arrived, so one lone job is written quickly and a
busy queue writes hundreds per statement. The statement only changes rows that are still
``running`` and runs without a wrapping transaction. A failed flush puts its batch back and
retries with backoff; nothing is dropped while the completer runs (except by a client
that lost its lease in the registry of live clients: runtime/registry.py), and ``stop``
flushes everything left.

Two things must not hold the other outcomes back (docs/reliability.md):

* An outcome the database refuses for what it holds (a data error: text jsonb can't
  store, a value out of range, a constraint) fails its whole statement. Such a batch is
  split in halves until the refused outcome is alone; the others are written at once,
  and the refused one is written again with its error text replaced and its staged
  metadata left out, or failed by id, or, if even that is refused, left ``running``
  for the rescuer. A data error is never retried as such.
* A row another session holds locked (``SELECT ... FOR UPDATE``) would make the
  statement wait for as long as the lock is held. On Postgres the statements lock their
  rows with ``SKIP LOCKED``: a locked row is skipped, noticed (it is still ``running``
  at the attempt this client claimed), and retried alone with backoff until its lock is
  released.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from riverboat._job import FAILED_STATES, FINALIZED_STATES, AttemptError, JobRow, JobState
from riverboat.dialect.base import JobStateUpdate, is_plain_completion
from riverboat.drivers.base import AsyncDriver
from riverboat.errors import DriverError
from riverboat.runtime._waiting import end_within, wait_event
from riverboat.runtime.data_errors import PYTHON_DATA_ERRORS, first_line, is_data_error
from riverboat.runtime.events import Event, EventKind, JobStatistics
from riverboat.runtime.outcomes import persisted_event_kind
from riverboat.runtime.supervise import supervised
from riverboat.wait import FinalizedSignals
from riverboat.workflow import WORKFLOW_METADATA_KEY, dependent_ids

__all__ = ["Completer", "PendingCompletion"]

log = logging.getLogger("riverboat.completer")

BATCH_MAX = 5000  # jobs per statement
BACKPRESSURE_HIGH = 10_000  # new outcomes wait above this backlog...
BACKPRESSURE_LOW = 5_000  # ...until it is down to this
# How long a stop keeps trying to write buffered outcomes: River's DrainTimeoutDefault.
DRAIN_TIMEOUT = 60.0
# Retry delays for an outcome whose row another session holds locked.
LOCKED_RETRY_BACKOFF = (0.05, 0.1, 0.25, 0.5, 1.0)


class _Unstorable(Exception):
    """A write the database refused for the values it carries (see is_data_error)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(slots=True)
class _Locked:
    """An outcome whose row was locked by another session when it was written."""

    pending: PendingCompletion
    since: float  # monotonic, when first skipped
    retries: int = 0
    due: float = 0.0  # monotonic


@dataclass(slots=True)
class PendingCompletion:
    update: JobStateUpdate
    job: JobRow
    event_kind: EventKind
    # time.time() when the job started (0 for one that never ran): its queue wait is
    # worked out only when an event needs it, not for every job.
    started_at: float
    run_duration: float
    finished_at: float  # monotonic
    # Set when a flow-controlled claim left this job out of its running count (its
    # outcome was still here): finalized_at is written no later than this, the job's end
    # on the wall clock (seconds since the epoch), so the table never shows it running
    # beside the job claimed in its place (dialect flow_complete_many).
    ended: float | None = None

    @property
    def queue_wait(self) -> float:
        """Seconds from the job's scheduled_at to its start."""
        if not self.started_at:
            return 0.0
        return max(0.0, self.started_at - self.job.scheduled_at.timestamp())


def _finalized(pending: PendingCompletion, row: JobRow | None) -> bool:
    """Whether ``pending``'s outcome finalized its job: its own state, or the row as the
    write left it (``row``, when read), which a cancel asked for meanwhile may have
    made cancelled."""
    return pending.update.finalized or (row is not None and row.state in FINALIZED_STATES)


def _at_claimed_attempt(pending: PendingCompletion) -> JobStateUpdate:
    """The outcome, written only while its row is at the attempt that produced it: a
    worker frozen past the rescuer's horizon must not finalize the attempt another
    worker has run since (River's completer checks only that the job is running). A row
    whose attempt could not be read (never decoded) is guarded by its state alone."""
    update = pending.update
    if update.claimed_attempt is not None or pending.job.attempt < 1:
        return update
    return dataclasses.replace(update, claimed_attempt=pending.job.attempt)


def _log_superseded(batch: list[PendingCompletion], current: Iterable[JobRow]) -> None:
    """One WARNING per outcome not written because its job is at a later attempt now:
    its worker was taken for dead (frozen, cut off) and the job rescued and claimed
    again meanwhile; the later attempt's outcome is the one that counts."""
    by_id = {p.update.id: p for p in batch}
    for job in current:
        pending = by_id.get(job.id)
        if pending is None or pending.job.attempt < 1 or job.attempt == pending.job.attempt:
            continue
        log.warning(
            "completer: job %d's attempt %d outcome (%s) not written: the job was rescued "
            "and is at attempt %d (%s) now",
            job.id,
            pending.job.attempt,
            pending.update.state.value,
            job.attempt,
            job.state.value,
        )


def _still_claimed(
    batch: list[PendingCompletion], current: Iterable[JobRow]
) -> list[PendingCompletion]:
    """The outcomes of ``batch`` whose rows (``current``) are still running at the
    attempt that produced them: a write that changed nothing for them skipped them."""
    by_id = {p.update.id: p for p in batch}
    return [
        by_id[job.id]
        for job in current
        if job.id in by_id
        and job.state is JobState.RUNNING
        and job.attempt == by_id[job.id].job.attempt
    ]


class Completer:
    def __init__(
        self,
        driver: AsyncDriver,
        *,
        emit: Callable[[Event], None] | None = None,
        want_events: Callable[[], bool] = lambda: False,
        batch_threshold: int = 100,
        flush_delay: float = 0.05,
        retry_backoff: tuple[float, ...] = (0.1, 0.5, 1.0, 2.0, 4.0),
        on_workflow_finalized: Callable[[Sequence[int], Sequence[int], str | None], Awaitable[None]]
        | None = None,
        finalized_signals: FinalizedSignals | None = None,
    ) -> None:
        self._driver = driver
        self._dialect = driver.dialect
        self._plain_statement = self._dialect.job_complete_many([], [], returning=False) is not None
        self._emit = emit
        self._want_events = want_events
        self._batch_threshold = batch_threshold
        self._flush_delay = flush_delay
        self._retry_backoff = retry_backoff
        self._on_workflow_finalized = on_workflow_finalized
        self._finalized_signals = finalized_signals
        self._buffer: dict[int, PendingCompletion] = {}
        # Outcomes skipped because another session held their row locked, retried alone.
        self._locked: dict[int, _Locked] = {}
        # The parts a write under way still holds unwritten (_write_parts' own list).
        self._writing: list[tuple[list[PendingCompletion], bool]] = []
        self._has_items = asyncio.Event()
        self._full = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._below_low = asyncio.Event()
        self._below_low.set()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.flushes = 0
        self.flush_errors = 0
        self.poisoned = 0  # outcomes the database refused, written sanitized or failed by id
        self.lock_skips = 0  # times an outcome's row was found locked and skipped
        # The registry's ClientRegistry.may_write (runtime/registry.py): False when this
        # client lost its lease, so outcomes may belong to runs handed to others.
        self.may_write: Callable[[], Awaitable[bool]] | None = None
        self.dropped = 0
        # Workflow promotions not run: every dependent waits on a task still running here.
        self.promotions_skipped = 0
        # Per workflow task id: how many of this client's running tasks depend on it.
        self._running_deps: dict[int, int] = {}

    @property
    def backlog(self) -> int:
        return len(self._buffer) + len(self._locked)

    def pending_ids(self) -> list[int]:
        """Jobs whose outcome is not written yet (for the registry): buffered, in a write
        under way, or waiting for another session's row lock. The leader's rescuer takes
        a running job of a live client that a heartbeat written after the claim did not
        list for one whose claim reply was lost: listing only the buffer let it rescue a
        job whose outcome was being written (a write failing and retried across the
        heartbeat) or held for a lock, and run it again though it had run here."""
        ids = list(self._buffer)
        for part, _ in self._writing:
            ids.extend(pending.update.id for pending in part)
        ids.extend(self._locked)
        return ids

    @property
    def idle(self) -> bool:
        """Nothing buffered and no write under way (a batch being written has already
        left the buffer)."""
        return not self._buffer and not self._locked and self._drained.is_set()

    def start(self) -> None:
        # Run again after any failure, stopping or not: a stop waits for the buffer to
        # drain (bounded by its drain_timeout).
        self._task = asyncio.create_task(
            supervised("completer", self._run, lambda: False), name="riverboat-completer"
        )

    async def add(self, pending: PendingCompletion) -> None:
        """Buffer one outcome; waits only when the backlog is past the high-water mark."""
        while not self.add_nowait(pending):
            self._below_low.clear()
            await self._below_low.wait()

    def add_nowait(self, pending: PendingCompletion, *, past_mark: bool = False) -> bool:
        """Buffer one outcome unless the backlog is past the high-water mark (then
        False: await :meth:`add`). Saves a coroutine per job on the hot path. With
        ``past_mark``, buffer it whatever the backlog (a wait for room that was cancelled:
        the outcome must not be lost)."""
        buffer = self._buffer
        if len(buffer) >= BACKPRESSURE_HIGH and not past_mark:
            return False
        buffer[pending.update.id] = pending
        self._drained.clear()
        self._has_items.set()
        if len(buffer) >= self._batch_threshold:
            self._full.set()
        elif (
            pending.update.finalized
            and (meta := pending.job.metadata.get(WORKFLOW_METADATA_KEY)) is not None
            and self._may_promote(meta)
        ):
            # Tasks may be waiting on this outcome alone: write it (and promote them)
            # now, not after the flush delay, so a chain moves at the speed of pick-up.
            self._full.set()
        return True

    def workflow_task_started(self, job: JobRow) -> None:
        """``job`` started running in this client (the producers tell it): while it
        runs, its dependents can't become available."""
        # Called for every job: a plain one costs one dict lookup.
        if (meta := job.metadata.get(WORKFLOW_METADATA_KEY)) is not None:
            self._count_running(meta, 1)

    def workflow_task_ended(self, job: JobRow) -> None:
        """``job``, started before, no longer runs: its outcome was handed to
        :meth:`add_nowait`, or dropped."""
        if (meta := job.metadata.get(WORKFLOW_METADATA_KEY)) is not None:
            self._count_running(meta, -1)

    def _count_running(self, meta: object, step: int) -> None:
        counts = self._running_deps
        for dependent in dependent_ids(meta):
            left = counts.get(dependent, 0) + step
            if left > 0:
                counts[dependent] = left
            else:
                counts.pop(dependent, None)

    def _may_promote(self, meta: object) -> bool:
        """Whether writing a workflow task's final outcome (its own job still counted
        as running) may make one of its dependents available: not when every dependent
        also waits on another task running in this client. A fan-in's leaves then
        go out in batches, as plain jobs do (one write and one promotion statement per
        leaf, each looking at a join still waiting for the others, cost a 1,000-task
        fan-out/fan-in about 20 ms), and the last of them is written at once. Only
        latency rides on this: a deferred outcome is still written within the flush
        delay. A task without dependents may end its workflow: written at once."""
        dependents = dependent_ids(meta)
        if not dependents:
            return True
        counts = self._running_deps
        return any(counts.get(dependent, 0) <= 1 for dependent in dependents)

    def _dependents_of_buffered(self) -> set[int]:
        """The dependents of the workflow tasks whose outcomes are buffered, not written:
        their rows are still running."""
        return {
            dependent
            for pending in self._buffer.values()
            if (meta := pending.job.metadata.get(WORKFLOW_METADATA_KEY)) is not None
            for dependent in dependent_ids(meta)
        }

    def buffered(self) -> Iterable[PendingCompletion]:
        """The outcomes waiting to be written (a view: read it before awaiting)."""
        return self._buffer.values()

    def flush_now(self) -> None:
        """Write the buffered outcomes without waiting out the flush delay (a
        flow-controlled claim counts a job as running until its outcome is written)."""
        if self._buffer:
            self._full.set()

    async def wait_drained(self) -> None:
        """Return once every buffered outcome has been written."""
        await self._drained.wait()

    async def _run(self) -> None:
        while True:
            if self._buffer or not self._locked:
                await self._has_items.wait()
            else:
                # Only locked outcomes left: sleep until their retry, or new outcomes.
                delay = max(0.0, min(x.due for x in self._locked.values()) - time.monotonic())
                await wait_event(self._has_items, delay)
            if self._buffer and not self._stopping and len(self._buffer) < self._batch_threshold:
                await wait_event(self._full, self._flush_delay)
            await self._flush_available()
            if self._locked:
                await self._retry_locked()
            if not self._buffer and not self._locked:
                self._drained.set()
                if self._stopping:
                    return

    async def _flush_available(self) -> None:
        attempt = 0
        while self._buffer:
            batch = self._take(BATCH_MAX)
            parts = self._split(batch)
            try:
                self._hold_locked(await self._write_parts(parts))
                attempt = 0
            except asyncio.CancelledError:
                for part, _ in parts:
                    self._put_back(part)  # still unwritten, and counted as such
                raise
            except DriverError as exc:
                self.flush_errors += 1
                for part, _ in parts:
                    self._put_back(part)
                delay = self._retry_backoff[min(attempt, len(self._retry_backoff) - 1)]
                delay *= 1 + random.uniform(-0.1, 0.1)
                attempt += 1
                log.warning(
                    "completer: writing %d job outcomes failed (attempt %d), retrying in %.2fs: %s",
                    len(batch),
                    attempt,
                    delay,
                    first_line(exc),
                )
                await asyncio.sleep(delay)
            except Exception:
                # Not the database's: a bug or an error no driver translated. Still
                # unwritten, so kept; the loop's supervisor logs it and runs it again.
                for part, _ in parts:
                    self._put_back(part)
                raise
        self._has_items.clear()
        self._full.clear()

    async def _write_parts(
        self, parts: list[tuple[list[PendingCompletion], bool]]
    ) -> list[PendingCompletion]:
        """Write every part, splitting one the database refuses for its data until the
        refused outcome is alone (then :meth:`_write_poisoned`). A part leaves ``parts``
        once written, so when this raises, ``parts`` holds exactly what is unwritten.
        Returns the outcomes skipped because their rows were locked."""
        skipped: list[PendingCompletion] = []
        # pending_ids lists what this write still holds while it awaits (a heartbeat
        # may run meanwhile); when it raises, the callers put back what is left.
        self._writing = parts
        try:
            if self.may_write is not None and not await self.may_write():
                dropped = sum(len(part) for part, _ in parts)
                self.dropped += dropped
                log.warning(
                    "completer: %d job outcomes not written (dropped): this client lost its "
                    "lease in the registry of live clients, so these jobs may run elsewhere "
                    "now; they stay running for the leader to rescue",
                    dropped,
                )
                parts.clear()
            while parts:
                part, plain = parts[0]
                try:
                    skipped.extend(await self._write(part, plain))
                except _Unstorable as exc:
                    if len(part) > 1:
                        middle = len(part) // 2
                        parts[0:1] = [(part[:middle], plain), (part[middle:], plain)]
                        continue
                    skipped.extend(await self._write_poisoned(part[0], exc.cause))
                parts.pop(0)
        finally:
            self._writing = []
        return skipped

    async def _write_poisoned(
        self, pending: PendingCompletion, cause: BaseException
    ) -> list[PendingCompletion]:
        """Write an outcome the database refused: first as is but with its error text
        replaced by a short ASCII note and its staged metadata left out, then failed by
        id (discarded, the same note), and if even that is refused, give it up: the row
        stays ``running`` and the rescuer retries the job. One WARNING (or ERROR) line
        per job; the database's full message and trace at DEBUG."""
        self.poisoned += 1
        update = pending.update
        job = pending.job
        reason = first_line(cause).encode("ascii", "backslashreplace").decode()[:300]
        note = AttemptError(
            datetime.now(UTC),
            max(job.attempt, 0),
            f"riverboat could not store this attempt's outcome ({update.state.value}"
            f"{', with its error text' if update.error else ''}"
            f"{', with staged metadata' if update.metadata_updates else ''}): {reason}",
        ).to_json()
        sanitized = dataclasses.replace(
            update, error=note if update.error else None, metadata_updates=None
        )
        failed = JobStateUpdate(update.id, JobState.DISCARDED, error=note, finalized=True)
        log.debug("completer: job %d's outcome was refused", update.id, exc_info=cause)
        dropped = [
            what
            for what, present in (
                ("its error text replaced by a note", update.error),
                ("its staged metadata left out", update.metadata_updates),
            )
            if present
        ]
        for how, replacement in (
            (f"written as {update.state.value}, " + (" and ".join(dropped) or "again"), sanitized),
            ("failed by id (discarded)", failed),
        ):
            try:
                skipped = await self._write(
                    [dataclasses.replace(pending, update=replacement)], False
                )
            except _Unstorable as exc:
                log.debug("completer: job %d: %s refused too", update.id, how, exc_info=exc)
                continue
            log.warning(
                "completer: job %d (%s): the database refused its outcome (%s); %s",
                update.id,
                job.kind or "?",
                reason,
                how,
            )
            return skipped  # a locked row: the replacement waits for its lock
        log.error(
            "completer: job %d (%s): the database refused its outcome (%s) and failing it "
            "by id; left running for the rescuer",
            update.id,
            job.kind or "?",
            reason,
        )
        return []

    def _hold_locked(self, skipped: list[PendingCompletion]) -> None:
        """Keep outcomes whose rows were locked, to retry them alone with backoff."""
        now = time.monotonic()
        for pending in skipped:
            self.lock_skips += 1
            held = self._locked.get(pending.update.id)
            if held is None:
                held = self._locked[pending.update.id] = _Locked(pending, now)
                log.warning(
                    "completer: job %d (%s): its row is locked by another session; its "
                    "outcome (%s) waits and is retried alone until the lock is released",
                    pending.update.id,
                    pending.job.kind or "?",
                    pending.update.state.value,
                )
            else:
                held.pending = pending
            delay = LOCKED_RETRY_BACKOFF[min(held.retries, len(LOCKED_RETRY_BACKOFF) - 1)]
            held.retries += 1
            held.due = now + delay

    async def _retry_locked(self) -> None:
        now = time.monotonic()
        due = [held for held in self._locked.values() if held.due <= now]
        if not due:
            return
        for held in due:
            del self._locked[held.pending.update.id]
        parts = self._split([held.pending for held in due])
        try:
            skipped = await self._write_parts(parts)
        except asyncio.CancelledError:
            self._return_locked(due, parts)
            raise
        except DriverError as exc:
            self.flush_errors += 1
            self._return_locked(due, parts)
            log.warning(
                "completer: retrying %d outcomes of locked rows failed: %s",
                len(parts),
                first_line(exc),
            )
            return
        still = {pending.update.id for pending in skipped}
        for held in due:
            if held.pending.update.id in still:
                self._locked[held.pending.update.id] = held
        self._hold_locked(skipped)
        for held in due:
            if held.pending.update.id not in still:
                log.info(
                    "completer: job %d: outcome written after its row lock was released "
                    "(waited %.1fs)",
                    held.pending.update.id,
                    time.monotonic() - held.since,
                )

    def _return_locked(
        self, due: list[_Locked], parts: list[tuple[list[PendingCompletion], bool]]
    ) -> None:
        unwritten = {p.update.id for part, _ in parts for p in part}
        now = time.monotonic()
        for held in due:
            if held.pending.update.id in unwritten:
                held.due = now + LOCKED_RETRY_BACKOFF[-1]
                self._locked[held.pending.update.id] = held

    def _take(self, limit: int) -> list[PendingCompletion]:
        if len(self._buffer) <= limit:
            batch = list(self._buffer.values())
            self._buffer.clear()
        else:
            batch = []
            for job_id in list(self._buffer)[:limit]:
                batch.append(self._buffer.pop(job_id))
        if len(self._buffer) <= BACKPRESSURE_LOW:
            self._below_low.set()
        if len(self._buffer) < self._batch_threshold:
            self._full.clear()
        return batch

    def _put_back(self, batch: list[PendingCompletion]) -> None:
        for pending in batch:
            # A newer outcome for the same job, added while we were writing, wins.
            self._buffer.setdefault(pending.update.id, pending)

    def _split(self, batch: list[PendingCompletion]) -> list[tuple[list[PendingCompletion], bool]]:
        """``(part, plain)`` pairs: plain completions go to the dialect's cheaper
        statement when it has one, everything else (and everything on a dialect without
        one) to the general statement. Usually one part."""
        if not self._plain_statement:
            return [(batch, False)]
        plain: list[PendingCompletion] = []
        other: list[PendingCompletion] = []
        for pending in batch:
            (plain if is_plain_completion(pending.update) else other).append(pending)
        return [(part, part is plain) for part in (plain, other) if part]

    async def _write(
        self, batch: list[PendingCompletion], plain: bool = False
    ) -> list[PendingCompletion]:
        """:meth:`_write_outcomes`, then the dependents of the workflow tasks it
        finalized; returns the outcomes skipped because their rows were locked."""
        signals = self._finalized_signals
        watched = signals is not None and signals.watching()
        # An outcome that leaves the job to run again (retryable, scheduled, available:
        # a failure, a snooze, a hand-back) is written as cancelled when a cancel was
        # asked for meanwhile (the cancel's notification missed, River 0.51.2): its
        # workflow dependents and waiters are then told from the row as written.
        may_end = not plain and any(
            not p.update.finalized and (watched or WORKFLOW_METADATA_KEY in p.job.metadata)
            for p in batch
        )
        promote = self._on_workflow_finalized is not None and any(
            WORKFLOW_METADATA_KEY in p.job.metadata and (p.update.finalized or may_end)
            for p in batch
        )
        # The rows as written are read only when the copies claimed say that no
        # promotion may be needed (a fan-in's leaves but the last): they confirm it.
        may_skip = promote and self._promotion_plan(batch, None)[2]
        skipped, current = await self._write_outcomes(
            batch, plain, want_current=may_skip or may_end
        )
        if promote or watched:
            waiting = {p.update.id for p in skipped}
            written = [p for p in batch if p.update.id not in waiting] if waiting else batch
            if promote:
                await self._promote_workflow_tasks(written, current)
            if watched:
                await self._signal_finalized(written, current)
        return skipped

    async def _signal_finalized(
        self, batch: list[PendingCompletion], current: dict[int, JobRow] | None
    ) -> None:
        """Wake whoever waits for the jobs this batch finalized (riverboat.wait); only
        called while someone waits. A failure costs the waiter a poll, nothing more."""
        assert self._finalized_signals is not None
        done = []
        for pending in batch:
            row = current.get(pending.update.id) if current is not None else None
            if _finalized(pending, row):
                meta = pending.job.metadata.get(WORKFLOW_METADATA_KEY)
                workflow_id = meta.get("id") if isinstance(meta, dict) else None
                done.append((pending.update.id, workflow_id))
        if not done:
            return
        try:
            await self._finalized_signals.after_finalized(done)
        except DriverError as exc:
            log.warning(
                "completer: notifying waiters of %d finalized jobs failed: %s", len(done), exc
            )

    def _promotion_plan(
        self, batch: list[PendingCompletion], current: dict[int, JobRow] | None
    ) -> tuple[list[int], list[int], bool]:
        """For the workflow tasks ``batch`` finalized: their ids, the dependents to
        skip (see :meth:`_promote_workflow_tasks`), and whether every dependent is
        skipped and none has a failed dependency. Each task's dependents are read from
        its row in ``current`` (the rows as the write left them) when there, else from
        the copy claimed."""
        finalized: list[int] = []
        known: set[int] = set()
        failed_dependents: set[int] = set()
        for p in batch:
            row = current.get(p.update.id) if current is not None else None
            if not _finalized(p, row):
                continue
            meta = (row or p.job).metadata.get(WORKFLOW_METADATA_KEY)
            if meta is None:
                continue
            finalized.append(p.update.id)
            dependents = dependent_ids(meta)
            state = row.state if row is not None else p.update.state
            (failed_dependents if state in FAILED_STATES else known).update(dependents)
        skip: list[int] = []
        counts = self._running_deps
        unwritten: set[int] | None = None  # read from the buffer only when needed
        for dependent in sorted(known - failed_dependents):
            if counts.get(dependent, 0) == 0:
                if unwritten is None:
                    unwritten = self._dependents_of_buffered()
                if dependent not in unwritten:
                    continue
            skip.append(dependent)
        return finalized, skip, not failed_dependents and len(skip) == len(known)

    async def _promote_workflow_tasks(
        self, batch: list[PendingCompletion], current: dict[int, JobRow] | None
    ) -> None:
        """Decide the dependents of the workflow tasks this batch finalized (see
        riverboat.workflow). The outcomes are written already: a failure here is left
        to the runtime's sweep of pending tasks, never retried with the batch.
        ``current``: the batch's rows as the write left them, when it returned them.

        The dependents known to wait on a task whose row this client still holds
        running (one it runs, or one whose outcome is buffered) are named to be skipped:
        they can't be decided yet, and that task's own write decides them. A fan-in's
        join was otherwise looked at after every batch of its leaves, each look probing
        its hundreds of dependencies for nothing (1.5 ms alone, 5 to 9 ms beside the
        leaves' claims on two cores). When every dependent is skipped, no statement
        runs at all, but only if the rows as written say so: a task added to the
        running workflow may depend on these, which only their rows (not the copies
        claimed) name. A dependent of a task that failed is never skipped: it may be
        cancelled now."""
        finalized, skip, all_skipped = self._promotion_plan(batch, current)
        if not finalized:
            return
        if all_skipped and current is not None and all(i in current for i in finalized):
            self.promotions_skipped += 1
            return
        assert self._on_workflow_finalized is not None
        # Where the dependents made ready may be claimed at once by this client: the
        # queue of the tasks just finalized (the first one's, when they differ).
        queue = next(p.job.queue for p in batch if p.update.id == finalized[0])
        try:
            await self._on_workflow_finalized(finalized, skip, queue)
        except DriverError as exc:
            log.warning(
                "completer: promoting the dependents of %d workflow tasks failed (the "
                "sweep of pending tasks will): %s",
                len(finalized),
                exc,
            )

    async def _write_outcomes(
        self, batch: list[PendingCompletion], plain: bool = False, *, want_current: bool = False
    ) -> tuple[list[PendingCompletion], dict[int, JobRow] | None]:
        """One statement for ``batch``; returns the outcomes it skipped because their
        rows were locked (still ``running`` at the claimed attempt afterwards), and, when
        events are wanted or ``want_current`` asks for them, the batch's rows as the write
        left them (None when not read). Raises :class:`_Unstorable` when the database
        refused the values."""
        want_events = self._emit is not None and self._want_events()
        want_rows = want_events or want_current
        try:
            if plain and any(p.ended is not None for p in batch):
                stmt = self._dialect.flow_complete_many(
                    [p.update.id for p in batch],
                    [p.job.attempt for p in batch],
                    [p.ended for p in batch],
                    returning=want_rows,
                )
            elif plain:
                complete = self._dialect.job_complete_many(
                    [p.update.id for p in batch],
                    [p.job.attempt for p in batch],
                    returning=want_rows,
                )
                assert complete is not None
                stmt = complete
            else:
                stmt = self._dialect.job_set_state_if_running_many(
                    [_at_claimed_attempt(p) for p in batch],
                    returning=want_rows,
                    skip_locked=True,
                )
            if not want_rows:
                count = await self._driver.execute(stmt)
            else:
                rows = list(await self._driver.fetch(stmt))
        except DriverError as exc:
            if is_data_error(exc):
                raise _Unstorable(exc) from exc
            raise
        except PYTHON_DATA_ERRORS as exc:  # a driver that let an encoding error through
            raise _Unstorable(exc) from exc
        self.flushes += 1
        if not want_rows:
            if count >= len(batch):
                return [], None
            # Fewer rows changed than outcomes sent: some jobs were no longer running
            # (rescued, cancelled...), or their rows were locked and skipped. Only the
            # latter are still running at the attempt this client claimed. (A failed
            # read raises: the batch is written again, a no-op for the rows done.)
            current = [
                self._dialect.decode_job(row)
                for row in await self._driver.fetch(
                    self._dialect.job_get_by_id_many([p.update.id for p in batch])
                )
            ]
            _log_superseded(batch, current)
            return _still_claimed(batch, current), None
        by_id = {p.update.id: p for p in batch}
        decode = self._dialect.decode_job
        jobs: list[JobRow] = []
        if plain:
            # Only what the completion changed came back: patch the claimed rows.
            patch = self._dialect.completed_job
            for row in rows:
                job = patch(by_id[row[0]].job, row)
                if job is not None:
                    jobs.append(job)
        else:
            jobs = [decode(row) for row in rows]
        # The statement returns only the rows it changed. As River does, a job that was
        # no longer running (rescued, cancelled, completed in a transaction...) still
        # gets its event, reporting what is stored. One still running at the claimed
        # attempt was skipped because its row was locked: no event yet.
        missing = by_id.keys() - {job.id for job in jobs}
        skipped: list[PendingCompletion] = []
        if missing:
            others = [
                decode(row)
                for row in await self._driver.fetch(
                    self._dialect.job_get_by_id_many(sorted(missing))
                )
            ]
            _log_superseded([by_id[i] for i in missing], others)
            skipped = _still_claimed([by_id[i] for i in missing], others)
            skipped_ids = {p.update.id for p in skipped}
            jobs.extend(job for job in others if job.id not in skipped_ids)
        written = {job.id: job for job in jobs}
        if not want_events:
            return skipped, written
        now = time.monotonic()
        assert self._emit is not None
        for job in jobs:
            pending = by_id.get(job.id)
            if pending is None:
                continue
            kind = persisted_event_kind(job.state, pending.event_kind)
            if kind is None:
                continue
            self._emit(
                Event(
                    kind,
                    job,
                    JobStatistics(
                        pending.queue_wait, pending.run_duration, now - pending.finished_at
                    ),
                )
            )
        return skipped, written

    async def stop(self, drain_timeout: float | None = DRAIN_TIMEOUT) -> None:
        """Flush everything buffered, then end the loop. A flush that can't finish in
        ``drain_timeout`` seconds (the database is gone) is given up, as River's
        completer does (its DrainTimeoutDefault): the jobs whose outcomes weren't written
        stay ``running`` in the table and the rescuer will retry them."""
        self._stopping = True
        self._has_items.set()
        self._full.set()
        task, self._task = self._task, None
        if task is None:
            return
        if not await end_within(task, drain_timeout):
            log.error(
                "completer: shutdown drain incomplete after %gs: %d job outcomes were not "
                "written; their jobs stay running and will be rescued",
                drain_timeout,
                len(self._buffer) + len(self._locked),
            )
