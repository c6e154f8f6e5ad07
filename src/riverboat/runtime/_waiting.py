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


async def wait_event(event: asyncio.Event, timeout: float) -> None:
    """Return once ``event`` is set or ``timeout`` seconds pass, whichever is first."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        pass


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel a service's loop and wait until it has unwound (its ``finally`` blocks
    ran), so that a stop returns only once nothing of the loop is left running."""
    task.cancel()
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
        await asyncio.wait_for(asyncio.shield(task), timeout)
    except TimeoutError:
        await cancel_and_wait(task)
        return False
    return True
