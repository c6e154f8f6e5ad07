"""Runtime loops that outlive their own failures.

Each loop of the runtime (a queue's producer, the completer, the elector, the registry's
heartbeat, the workflow sweep) handles the database's failures itself
(:class:`~riverboat.errors.DriverError`, with its own backoff). Anything else escaping
one, a bug or a library error no driver translated, used to end its asyncio task
without a word until the client stopped: a queue that no longer claimed, outcomes that
were never written while their jobs' slots filled, a leader that no longer renewed.
:func:`supervised` runs such a loop again after logging the error with its traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from riverboat.runtime._waiting import wait_event

__all__ = ["RESTART_DELAY", "supervised"]

log = logging.getLogger("riverboat.runtime")

#: Seconds before a loop that raised runs again: a bug that raises at once every time
#: logs once a second, not in a busy loop.
RESTART_DELAY = 1.0


async def supervised(
    name: str,
    loop: Callable[[], Awaitable[None]],
    stopping: Callable[[], bool],
    woken_by_stop: asyncio.Event | None = None,
    *,
    restart_delay: float = RESTART_DELAY,
) -> None:
    """Await ``loop()`` until it returns. When it raises anything but cancellation, log
    it as ``name``'s error with the traceback and, unless ``stopping()`` says the
    runtime is stopping, run it again after ``restart_delay`` seconds, cut short when
    ``woken_by_stop`` is set (an event only a stop sets: one set in normal work too
    would make a loop that fails at once spin)."""
    restarts = 0
    while True:
        try:
            await loop()
            return
        except Exception:
            restarts += 1
            if stopping():
                log.exception("%s: failed while stopping; not restarted", name)
                return
            log.exception(
                "%s: unexpected error (restart %d); running it again in %gs",
                name,
                restarts,
                restart_delay,
            )
        if woken_by_stop is None:
            await asyncio.sleep(restart_delay)
        else:
            await wait_event(woken_by_stop, restart_delay)
        if stopping():
            return
