"""Events a client emits after job outcomes are written, and subscriptions to them."""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from enum import StrEnum

from riverboat._job import JobRow

__all__ = ["Event", "EventKind", "JobStatistics", "Subscription"]


class EventKind(StrEnum):
    JOB_CANCELLED = "job_cancelled"
    JOB_COMPLETED = "job_completed"
    JOB_FAILED = "job_failed"
    JOB_INTERRUPTED = "job_interrupted"
    JOB_SNOOZED = "job_snoozed"
    QUEUE_PAUSED = "queue_paused"
    QUEUE_RESUMED = "queue_resumed"


@dataclass(slots=True, frozen=True)
class JobStatistics:
    """Seconds spent waiting (scheduled_at → start), running, and until written."""

    queue_wait: float
    run_duration: float
    complete_duration: float


@dataclass(slots=True, frozen=True)
class Event:
    kind: EventKind
    job: JobRow | None = None
    stats: JobStatistics | None = None
    queue: str | None = None


class Subscription:
    """A bounded queue of events. Like River, sends never block: when the subscriber
    falls behind by ``maxsize`` events, newer events are dropped (and counted).

    A deque and the futures of waiting readers rather than an ``asyncio.Queue``: an event
    is offered for every finished job, and the queue's task accounting (``task_done``,
    ``join``), which nothing here uses, was most of the cost of an offer."""

    def __init__(self, kinds: Iterable[EventKind], maxsize: int, on_close: object) -> None:
        self.kinds = frozenset(kinds)
        self._events: deque[Event] = deque()
        self._maxsize = maxsize if maxsize > 0 else math.inf  # asyncio.Queue's meaning
        self._readers: deque[asyncio.Future[None]] = deque()
        self._on_close = on_close
        self.dropped = 0
        self.closed = False

    def _offer(self, event: Event) -> None:
        if event.kind in self.kinds:
            if len(self._events) >= self._maxsize:
                self.dropped += 1
                return
            self._events.append(event)
            if self._readers:
                self._wake_next()

    async def get(self) -> Event:
        """The next event, waiting for one."""
        events = self._events
        while not events:
            reader = asyncio.get_running_loop().create_future()
            self._readers.append(reader)
            try:
                await reader
            except BaseException:
                reader.cancel()
                try:
                    self._readers.remove(reader)  # a timed-out get must not pile up
                except ValueError:
                    pass  # already taken by an offer: woken, then cancelled
                # The event it may have been woken for goes to the next reader instead
                # of waiting for another offer.
                if events and self._readers:
                    self._wake_next()
                raise
        return events.popleft()

    def _wake_next(self) -> None:
        while self._readers:
            reader = self._readers.popleft()
            if not reader.done():
                reader.set_result(None)
                return

    def get_nowait(self) -> Event:
        """The next event; ``asyncio.QueueEmpty`` when there is none."""
        if not self._events:
            raise asyncio.QueueEmpty
        return self._events.popleft()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        while not self.closed:
            yield await self.get()

    def close(self) -> None:
        self.closed = True
        if callable(self._on_close):
            self._on_close(self)
