"""Waiting in tests for something no event announces: poll a condition until a deadline.

Where the code under test announces what a test waits for (a client subscription, an
``asyncio.Event`` or ``threading.Event`` a job sets, an elector's ``leader`` event),
await that instead. Poll only for effects seen from outside: a row another process
writes, a metric a scrape reads, a backend the server has not reaped yet, a flag such
as ``job.cancel_requested`` that a job body is meant to poll.

Both helpers return the predicate's first truthy value and fail with an
``AssertionError`` naming what was awaited and the last value seen. The pause between
polls paces the polling only; the deadline decides.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0
DEFAULT_POLL = 0.02


def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    poll: float = DEFAULT_POLL,
    what: str | None = None,
) -> T:
    """Call ``predicate`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(predicate, what, timeout, value))
        time.sleep(poll)


@overload
async def wait_until_async(
    predicate: Callable[[], Awaitable[T]],
    *,
    timeout: float = ...,
    poll: float = ...,
    what: str | None = ...,
) -> T: ...


@overload
async def wait_until_async(
    predicate: Callable[[], T],
    *,
    timeout: float = ...,
    poll: float = ...,
    what: str | None = ...,
) -> T: ...


async def wait_until_async(
    predicate: Callable[[], Any],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    poll: float = DEFAULT_POLL,
    what: str | None = None,
) -> Any:
    """``wait_until`` for the event loop: ``predicate`` may be a coroutine function, and
    the loop runs other tasks between polls."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(predicate, what, timeout, value))
        await asyncio.sleep(poll)


def _timed_out(predicate: Callable[..., Any], what: str | None, timeout: float, last: Any) -> str:
    if what is None:
        code = getattr(predicate, "__code__", None)
        name = getattr(predicate, "__qualname__", repr(predicate))
        where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
        what = f"{name}{where}"
    return f"timed out after {timeout}s waiting for {what} (last value: {last!r})"
