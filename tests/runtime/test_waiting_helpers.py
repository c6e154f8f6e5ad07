"""The runtime's waiting helpers (riverboat.runtime._waiting): a stop must end even when a
loop lost a cancellation, and a bounded wait on an event is cancelled like any await."""

from __future__ import annotations

import asyncio

import pytest

from riverboat.runtime import _waiting
from riverboat.runtime._waiting import cancel_and_wait, wait_event

pytestmark = pytest.mark.asyncio


async def test_cancel_and_wait_ends_a_loop_that_lost_its_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What Python 3.11's asyncio.wait_for does when its inner task finishes as the
    # loop is cancelled: the cancellation is gone and the loop waits on. The notifier
    # did this once a bench run; its stop then waited for ever.
    monkeypatch.setattr(_waiting, "RECANCEL_AFTER", 0.05)
    lost = asyncio.Event()

    async def loop() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            lost.set()  # swallowed
        await asyncio.sleep(3600)

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    async with asyncio.timeout(30):
        await cancel_and_wait(task)
    assert lost.is_set() and task.cancelled()


async def test_cancel_and_wait_returns_what_the_loop_raised_other_than_its_cancel() -> None:
    async def loop() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            raise RuntimeError("cleanup failed")

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_and_wait(task)


async def test_wait_event_returns_on_the_event_or_the_timeout_and_passes_a_cancel_on() -> None:
    event = asyncio.Event()
    event.set()
    await wait_event(event, 0)  # already set: at once
    event.clear()
    async with asyncio.timeout(30):
        await wait_event(event, 0.01)  # the timeout, quietly
    waiter = asyncio.create_task(wait_event(event, None))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
