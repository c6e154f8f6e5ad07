"""The batch completer: job outcomes are buffered and written one statement per batch.

Outcomes wait in a dict keyed by job id (a later outcome for the same job replaces an
earlier one). A flush starts when the backlog reaches ``batch_threshold`` or
``flush_delay`` after the first outcome arrived, so one lone job is written quickly and a
busy queue writes hundreds per statement. The statement only changes rows that are still
``running`` and runs without a wrapping transaction. A failed flush puts its batch back and
retries with backoff; nothing is dropped while the completer runs, and ``stop`` flushes
everything left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from riverboat._job import JobRow, JobState
from riverboat.dialect.base import JobStateUpdate, is_plain_completion
from riverboat.errors import DriverError
from riverboat.runtime.events import Event, EventKind, JobStatistics
from riverboat.workflow import WORKFLOW_METADATA_KEY

__all__ = ["Completer", "PendingCompletion", "persisted_event_kind"]

log = logging.getLogger("riverboat.completer")

BATCH_MAX = 5000  # jobs per statement
BACKPRESSURE_HIGH = 10_000  # new outcomes wait above this backlog...
BACKPRESSURE_LOW = 5_000  # ...until it falls below this
# How long a stop keeps trying to write buffered outcomes: River's DrainTimeoutDefault.
DRAIN_TIMEOUT = 60.0


def persisted_event_kind(state: JobState, requested: EventKind) -> EventKind | None:
    """The event for a job's stored outcome, not the one its worker asked for (River
    0.44.0, internal/jobcompleter): ``available`` is ambiguous (a retry due soon, a short
    snooze, an interruption) so it keeps the requested kind unless that was a completion
    or cancellation; every other finished state names its own event. A row that is
    running again or pending was not finished by this attempt: no event (River panics)."""
    if state is JobState.AVAILABLE:
        if requested in (EventKind.JOB_COMPLETED, EventKind.JOB_CANCELLED):
            return EventKind.JOB_FAILED
        return requested
    return _EVENT_BY_STATE.get(state)


_EVENT_BY_STATE = {
    JobState.CANCELLED: EventKind.JOB_CANCELLED,
    JobState.COMPLETED: EventKind.JOB_COMPLETED,
    JobState.DISCARDED: EventKind.JOB_FAILED,
    JobState.RETRYABLE: EventKind.JOB_FAILED,
    JobState.SCHEDULED: EventKind.JOB_SNOOZED,
}


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

    @property
    def queue_wait(self) -> float:
        """Seconds from the job's scheduled_at to its start."""
        if not self.started_at:
            return 0.0
        return max(0.0, self.started_at - self.job.scheduled_at.timestamp())


class Completer:
    def __init__(
        self,
        driver: Any,
        *,
        emit: Callable[[Event], None] | None = None,
        want_events: Callable[[], bool] = lambda: False,
        batch_threshold: int = 100,
        flush_delay: float = 0.05,
        retry_backoff: tuple[float, ...] = (0.1, 0.5, 1.0, 2.0, 4.0),
        on_workflow_finalized: Callable[[Sequence[int]], Awaitable[None]] | None = None,
    ) -> None:
        self._driver = driver
        self._dialect = driver.dialect
        self._plain_statement = self._dialect.job_complete_many([], returning=False) is not None
        self._emit = emit
        self._want_events = want_events
        self._batch_threshold = batch_threshold
        self._flush_delay = flush_delay
        self._retry_backoff = retry_backoff
        self._on_workflow_finalized = on_workflow_finalized
        self._buffer: dict[int, PendingCompletion] = {}
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

    @property
    def backlog(self) -> int:
        return len(self._buffer)

    @property
    def idle(self) -> bool:
        """Nothing buffered and no write under way (a batch being written has already
        left the buffer)."""
        return not self._buffer and self._drained.is_set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="riverboat-completer")

    async def add(self, pending: PendingCompletion) -> None:
        """Buffer one outcome; waits only when the backlog is past the high-water mark."""
        while not self.add_nowait(pending):
            self._below_low.clear()
            await self._below_low.wait()

    def add_nowait(self, pending: PendingCompletion) -> bool:
        """Buffer one outcome unless the backlog is past the high-water mark (then
        False: await :meth:`add`). Saves a coroutine per job on the hot path."""
        buffer = self._buffer
        if len(buffer) >= BACKPRESSURE_HIGH:
            return False
        buffer[pending.update.id] = pending
        self._drained.clear()
        self._has_items.set()
        if len(buffer) >= self._batch_threshold:
            self._full.set()
        elif WORKFLOW_METADATA_KEY in pending.job.metadata and pending.update.finalized:
            # Tasks wait on this outcome: write it (and promote them) now, not after
            # the flush delay, so a chain moves at the speed of pick-up.
            self._full.set()
        return True

    async def wait_drained(self) -> None:
        """Return once every buffered outcome has been written."""
        await self._drained.wait()

    async def _run(self) -> None:
        while True:
            await self._has_items.wait()
            if not self._stopping and len(self._buffer) < self._batch_threshold:
                try:
                    await asyncio.wait_for(self._full.wait(), self._flush_delay)
                except TimeoutError:
                    pass
            await self._flush_available()
            if self._stopping and not self._buffer:
                return

    async def _flush_available(self) -> None:
        attempt = 0
        while self._buffer:
            batch = self._take(BATCH_MAX)
            parts = self._split(batch)
            try:
                while parts:
                    await self._write(*parts[0])
                    parts.pop(0)  # written: a failure later must not write it again
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
                    exc,
                )
                await asyncio.sleep(delay)
        self._has_items.clear()
        self._full.clear()
        self._drained.set()

    def _take(self, limit: int) -> list[PendingCompletion]:
        if len(self._buffer) <= limit:
            batch = list(self._buffer.values())
            self._buffer.clear()
        else:
            batch = []
            for job_id in list(self._buffer)[:limit]:
                batch.append(self._buffer.pop(job_id))
        if len(self._buffer) < BACKPRESSURE_LOW:
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

    async def _write(self, batch: list[PendingCompletion], plain: bool = False) -> None:
        await self._write_outcomes(batch, plain)
        if self._on_workflow_finalized is not None:
            await self._promote_workflow_tasks(batch)

    async def _promote_workflow_tasks(self, batch: list[PendingCompletion]) -> None:
        """Decide the dependents of the workflow tasks this batch finalized (see
        riverboat.workflow). The outcomes are written already: a failure here is left
        to the runtime's sweep of pending tasks, never retried with the batch."""
        finalized = [
            p.update.id
            for p in batch
            if p.update.finalized and WORKFLOW_METADATA_KEY in p.job.metadata
        ]
        if not finalized:
            return
        assert self._on_workflow_finalized is not None
        try:
            await self._on_workflow_finalized(finalized)
        except DriverError as exc:
            log.warning(
                "completer: promoting the dependents of %d workflow tasks failed (the "
                "sweep of pending tasks will): %s",
                len(finalized),
                exc,
            )

    async def _write_outcomes(self, batch: list[PendingCompletion], plain: bool = False) -> None:
        want_rows = self._emit is not None and self._want_events()
        if plain:
            stmt = self._dialect.job_complete_many(
                [p.update.id for p in batch], returning=want_rows
            )
            assert stmt is not None
        else:
            stmt = self._dialect.job_set_state_if_running_many(
                [p.update for p in batch], returning=want_rows
            )
        if not want_rows:
            await self._driver.execute(stmt)
            self.flushes += 1
            return
        rows = list(await self._driver.fetch(stmt))
        self.flushes += 1
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
        # gets its event, reporting what is stored.
        missing = by_id.keys() - {job.id for job in jobs}
        if missing:
            try:
                others = await self._driver.fetch(self._dialect.job_get_by_id_many(sorted(missing)))
                jobs.extend(decode(row) for row in others)
            except DriverError as exc:
                log.warning(
                    "completer: reading %d jobs for their events failed: %s", len(missing), exc
                )
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
        if drain_timeout is None:
            await task
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), drain_timeout)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            log.error(
                "completer: shutdown drain incomplete after %gs: %d job outcomes were not "
                "written; their jobs stay running and will be rescued",
                drain_timeout,
                len(self._buffer),
            )
