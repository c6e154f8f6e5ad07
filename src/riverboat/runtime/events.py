"""Events a client emits after job outcomes are written, and subscriptions to them."""

from __future__ import annotations

import asyncio
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
    falls behind by ``maxsize`` events, newer events are dropped (and counted)."""

    def __init__(self, kinds: Iterable[EventKind], maxsize: int, on_close: object) -> None:
        self.kinds = frozenset(kinds)
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize)
        self._on_close = on_close
        self.dropped = 0
        self.closed = False

    def _offer(self, event: Event) -> None:
        if event.kind in self.kinds:
            try:
                self._queue.put_nowait(event)
            except asyncio.QueueFull:
                self.dropped += 1

    async def get(self) -> Event:
        return await self._queue.get()

    def get_nowait(self) -> Event:
        return self._queue.get_nowait()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        while not self.closed:
            yield await self._queue.get()

    def close(self) -> None:
        self.closed = True
        if callable(self._on_close):
            self._on_close(self)
