"""Waiting helpers the runtime's loops share (elector, maintenance services, notifier)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterable
from typing import Any

__all__ = ["backoff_delay", "cancel_and_wait", "end_within", "wait_any", "wait_event"]


def backoff_delay(errors: int, base: float, cap: float, *, jitter: bool = True) -> float:
    """Delay after the ``errors``-th consecutive failure: base, 2·base, 4·base ... ≤ cap,
    ±10% unless ``jitter`` is off (so clients that failed together don't retry together)."""
    delay = min(base * 2.0 ** max(errors - 1, 0), cap)
    return delay * random.uniform(0.9, 1.1) if jitter else delay


async def wait_any(events: Iterable[asyncio.Event], timeout: float) -> None:
    """Return once one of ``events`` is set or ``timeout`` seconds (at least 0) pass."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=max(timeout, 0.0), return_when="FIRST_COMPLETED")
    finally:
        for waiter in waiters:
            waiter.cancel()


# The runtime's loops bound their waits with asyncio.timeout, never asyncio.wait_for:
# on Python 3.11 wait_for runs its awaitable as a task of its own and, when that task
# finishes at the moment the loop is cancelled, returns its result and drops the
# cancellation (fixed in 3.12). A notifier stopped as a notification arrived then
# went on listening, and the stop waited for it for ever.

# How long a cancelled loop may take to unwind before it is cancelled again (a
# cancellation lost in a library's own wait_for; cleanups are bounded well below it).
RECANCEL_AFTER = 5.0


async def wait_event(event: asyncio.Event, timeout: float | None) -> None:
    """Return once ``event`` is set or ``timeout`` seconds pass, whichever is first."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel a service's loop and wait until it has unwound (its ``finally`` blocks
    ran), so that a stop returns only once nothing of the loop is left running. A loop
    still running ``RECANCEL_AFTER`` seconds after a cancellation is cancelled again:
    the first one was lost (see above), and waiting for it would never end."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_AFTER)
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def end_within(task: asyncio.Task[Any], timeout: float | None) -> bool:
    """Let a loop that was asked to stop end by itself within ``timeout`` seconds
    (``None``: as long as it takes); past that, cancel it and wait until it has unwound.
    Returns whether it ended by itself."""
    if timeout is None:
        await task
        return True
    try:
        async with asyncio.timeout(timeout):
            await asyncio.shield(task)
    except TimeoutError:
        await cancel_and_wait(task)
        return False
    return True
