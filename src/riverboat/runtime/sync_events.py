"""Event subscriptions for the sync :class:`~riverboat.Client`, whose runtime runs on
its own event loop thread: events cross to the subscriber's thread through a
thread-safe queue. Same rules as :class:`~riverboat.runtime.events.Subscription`:
sends never block, and a subscriber ``maxsize`` events behind loses newer ones
(counted in ``dropped``)."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterable, Iterator

from riverboat.runtime.events import Event, EventKind

__all__ = ["SyncSubscription"]


class SyncSubscription:
    def __init__(
        self,
        kinds: Iterable[EventKind],
        maxsize: int,
        on_close: Callable[[SyncSubscription], None],
    ) -> None:
        self.kinds = frozenset(kinds)
        self._queue: queue.Queue[Event] = queue.Queue(maxsize)
        self._on_close = on_close
        self.dropped = 0
        self.closed = False

    def _offer(self, event: Event) -> None:  # called on the runtime's loop thread
        if event.kind in self.kinds:
            try:
                self._queue.put_nowait(event)
            except queue.Full:
                self.dropped += 1

    def get(self, timeout: float | None = None) -> Event:
        """The next event; waits up to ``timeout`` seconds (``None``: for ever) and
        raises ``queue.Empty`` when none came."""
        return self._queue.get(timeout=timeout)

    def get_nowait(self) -> Event:
        return self._queue.get_nowait()

    def __iter__(self) -> Iterator[Event]:
        while not self.closed:
            yield self._queue.get()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._on_close(self)
