"""The pool sync jobs run in: outcomes reach the event loop in batches, one wake-up for
all the calls that finished while the loop was busy, and a cancelled call that no thread
took up yet does not run."""

from __future__ import annotations

import asyncio
import threading

import pytest

from riverboat.runtime.threads import DaemonThreadPool
from tests.waiting import wait_until


async def test_outcomes_that_land_together_reach_the_loop_in_one_wake_up() -> None:
    pool = DaemonThreadPool(thread_name_prefix="test-pool")
    calls = 20
    release = threading.Event()
    delivered = 0
    deliver = pool._deliver

    def counting_deliver() -> None:
        nonlocal delivered
        delivered += 1
        deliver()

    pool._deliver = counting_deliver  # type: ignore[method-assign]

    def job(n: int) -> int:
        release.wait()
        return n * 2

    try:
        futures = [pool.run(job, n) for n in range(calls)]
        release.set()
        # The loop is blocked here while every call finishes: their outcomes queue up.
        wait_until(lambda: len(pool._done) == calls, what="every outcome queued")
        results = await asyncio.gather(*futures)
    finally:
        pool.shutdown()
    assert results == [n * 2 for n in range(calls)]
    assert delivered == 1


async def test_errors_are_raised_where_the_call_is_awaited() -> None:
    pool = DaemonThreadPool(thread_name_prefix="test-pool")

    def fails() -> None:
        raise ValueError("boom")

    def stops() -> None:
        raise StopIteration

    def exits() -> None:
        raise GeneratorExit

    try:
        with pytest.raises(ValueError, match="boom"):
            await pool.run(fails)
        with pytest.raises(RuntimeError, match="StopIteration") as caught:
            await pool.run(stops)
        assert isinstance(caught.value.__cause__, StopIteration)
        # Set on the future as it was, it ended the awaiting task unseen.
        with pytest.raises(RuntimeError, match="GeneratorExit") as exited:
            await pool.run(exits)
        assert isinstance(exited.value.__cause__, GeneratorExit)
    finally:
        pool.shutdown()


async def test_an_outcome_for_a_call_cancelled_while_it_ran_is_dropped() -> None:
    pool = DaemonThreadPool(thread_name_prefix="test-pool")
    started = threading.Event()
    release = threading.Event()

    def job() -> str:
        started.set()
        release.wait()
        return "late"

    try:
        future = pool.run(job)
        assert started.wait(20)
        future.cancel()
        release.set()
        wait_until(lambda: pool._done, what="the cancelled call's outcome queued")
        # Delivered with (or after) the dropped one; nothing raises on the cancelled future.
        assert await pool.run(lambda: "after") == "after"
    finally:
        pool.shutdown()
    assert future.cancelled()
