"""The bounds of a hard stop that reads what a process job's child was sending
(runtime/process_pool.py ``_sent_before_kill``): a child that keeps logging, one frozen
mid-message, one whose forked process holds its pipes; the job's timeout after that read
(its work middleware still awaiting); a child orphaned by a lost lease (killed at once,
not read); a kill while a receive waits; a remote cancel during the read. Postgres and
SQLite. The reads of a whole outcome are in test_process_executor.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from riverboat import InsertOpts, Job, JobState
from tests.process_executor import jobs
from tests.process_executor.test_process_executor import (
    HUGE,
    LARGE,
    _alive,
    _no_overlap,
    _once_fed,
    _one_child,
    _pool,
    _run_one,
    _started,
    _wait_until_readable_blocking,
    _workers,
)
from tests.runtime.dbs import Db
from tests.waiting import wait_until_async

# Their bounds (a stop within 4 s, a child gone within 0.3 s) are timed: they run with
# the timing-sensitive tests (tests/conftest.py SERIAL).
pytestmark = [pytest.mark.asyncio, pytest.mark.serial]


def _more_workers() -> Any:
    workers = _workers()
    workers.register("chatty")(jobs.chatty)
    workers.register("mark_then_sleep")(jobs.mark_then_sleep)
    workers.register("c_fork_then_sleep")(jobs.c_fork_then_sleep)
    return workers


@pytest.mark.parametrize("how", ["finally_awaits", "swallows"])
async def test_process_job_middleware_stuck_after_a_hard_stop_is_still_timed_out(
    any_db: Db, tmp_path: Path, how: str
) -> None:
    """A process job whose work middleware goes on awaiting once the hard stop's cancel
    arrived (an export in a ``finally``, or one that swallows the cancel) is cancelled
    again at the job's timeout (2 s), so stop_and_cancel() with soft_stop_timeout=None
    ends, as it does for an async job (test_soft_stop_client, 28k). The stop clears a
    process job's deadline for good in a first version of the read's fix (40247d3,
    e55275b): nothing cancelled the middleware again, the stop waited for it for ever."""
    entered_after = asyncio.Event()

    async def stuck(job: Job[Any], call_next: Any) -> None:
        if how == "finally_awaits":
            try:
                await call_next()
            finally:
                entered_after.set()
                await asyncio.sleep(600)  # e.g. an export that does not answer
        else:
            try:
                await call_next()
            except asyncio.CancelledError:
                entered_after.set()
            await asyncio.sleep(600)

    client = _one_child(any_db, middleware=[stuck], job_timeout=2.0, soft_stop_timeout=None)
    args = {"dir": str(tmp_path), "seconds": 600}
    job_id = (await client.insert(args, InsertOpts(max_attempts=1), kind="hang")).job.id
    await client.start()
    stop: asyncio.Future[None] | None = None
    try:
        await _started(tmp_path, job_id)
        stop = asyncio.ensure_future(client.stop_and_cancel())
        await asyncio.wait_for(entered_after.wait(), 10)
        started = time.monotonic()
        done, _ = await asyncio.wait([stop], timeout=12)
        assert done, "stop_and_cancel() still waiting 12 s on (job timeout 2 s)"
        assert time.monotonic() - started < 12
        row = await client.job_get(job_id)
        assert row.state is not JobState.RUNNING
    finally:
        if stop is not None and not stop.done():
            # Unstick it so the test ends: the job's task is cancelled by hand.
            for task, _ in list(client.runtime.producers["default"]._active.values()):
                task.cancel()
            await asyncio.wait_for(stop, 30)
        await client.close()


async def test_a_hard_stop_of_a_child_that_keeps_logging_ends_within_the_bound(
    any_db: Db, tmp_path: Path
) -> None:
    """A child logging without pause (lines larger than the pipe, so it is always in
    the middle of a message) when the hard stop comes: read alive, then given up at
    SENT_READ_LIMIT; the job is handed back, its child gone, the stop bounded."""
    client = _one_child(any_db, _more_workers(), soft_stop_timeout=None)
    async with client:
        args = {"dir": str(tmp_path), "seconds": 60, "line": 200_000}
        job_id = await _run_one(client, tmp_path, args, "chatty")
        child = _wait_until_readable_blocking(client)  # in the middle of a log record
        started = time.monotonic()
        await asyncio.wait_for(client.stop_and_cancel(), 20)
        took = time.monotonic() - started
        row = await client.job_get(job_id)
        assert row.state is JobState.AVAILABLE and row.attempt == 0
        assert not _alive(child.pid)
        assert took < 4.0, took
        _no_overlap(tmp_path)


async def test_a_hard_stop_of_a_child_stopped_mid_message_ends_at_the_limit(
    any_db: Db, tmp_path: Path
) -> None:
    """The child stalls in the middle of its 30 MB outcome (SIGSTOP, as a frozen or
    swapped-out child would), the loop running: the read gives up at SENT_READ_LIMIT,
    the job is handed back and its child killed."""
    import os
    import signal

    client = _one_child(any_db, _more_workers(), soft_stop_timeout=None)
    async with client:
        args = {"dir": str(tmp_path), "seconds": 0.2, "size": HUGE}
        job_id = await _run_one(client, tmp_path, args, "end_after")
        child = _wait_until_readable_blocking(client)
        os.kill(child.pid, signal.SIGSTOP)
        started = time.monotonic()
        await asyncio.wait_for(client.stop_and_cancel(), 20)
        took = time.monotonic() - started
        row = await client.job_get(job_id)
        assert row.state is JobState.AVAILABLE and row.attempt == 0
        assert not _alive(child.pid)
        assert 1.5 < took < 4.0, took


async def test_a_hard_stop_with_a_grandchild_holding_the_pipes_ends(
    any_db: Db, tmp_path: Path
) -> None:
    """A process the job forked through libc (no at-fork handler: it keeps the protocol
    pipes open) outlives the child: the stop's read sees no end of the pipe, gives up
    at SENT_READ_TIMEOUT, and reaping the killed child does not wait for that end."""
    import os
    import signal

    client = _one_child(any_db, _more_workers(), soft_stop_timeout=None)
    forked = tmp_path / "forked-{}"
    grandchild = None
    try:
        async with client:
            job_id = (await client.insert({"dir": str(tmp_path)}, kind="c_fork_then_sleep")).job.id
            forked = tmp_path / f"forked-{job_id}"
            await client.start()
            await wait_until_async(forked.exists, timeout=30, what="the job forked")
            grandchild = int(forked.read_text())
            (child,) = _pool(client)._busy
            started = time.monotonic()
            await asyncio.wait_for(client.stop_and_cancel(), 20)
            took = time.monotonic() - started
            row = await client.job_get(job_id)
            assert row.state is JobState.AVAILABLE and row.attempt == 0
            assert not _alive(child.pid)
            assert took < 3.0, took
            assert _alive(grandchild)
    finally:
        if grandchild is not None:
            os.kill(grandchild, signal.SIGKILL)


async def test_an_orphaned_process_jobs_child_is_killed_at_once(any_db: Db, tmp_path: Path) -> None:
    """The client lost its lease (orphan_running): the job may run elsewhere now, its
    outcome is dropped whatever it is. Its child, logging as it works, is read alive
    as for a hard stop (keep_sent() is true for an orphaned job too) and goes on
    running its job up to SENT_READ_LIMIT, beside the attempt another worker may have
    started, in a first version of the read's fix (6bd7eae)."""
    client = _one_child(any_db, _more_workers())
    async with client:
        args = {"dir": str(tmp_path), "seconds": 60, "line": 200_000}
        job_id = (await client.insert(args, kind="chatty")).job.id
        await client.start()
        try:
            await _started(tmp_path, job_id)
            # The child in the middle of a log message (as it nearly always is).
            child = _wait_until_readable_blocking(client)
            assert client.runtime.producers["default"].orphan_running() == 1
            orphaned_at = time.monotonic()
            while _alive(child.pid) and time.monotonic() - orphaned_at < 10:
                await asyncio.sleep(0.01)
            alive_for = time.monotonic() - orphaned_at
        finally:
            await asyncio.wait_for(client.stop_and_cancel(), 20)
        assert alive_for < 0.3, f"the orphaned job's child ran on for {alive_for:.2f}s"


async def test_killing_a_child_while_a_receive_is_pending_ends_both() -> None:
    """kill() closes the stdout transport while a receive awaits it (ProcessPool.close()
    killing a busy child): the receive ends (IncompleteReadError), the kill returns."""
    from riverboat.runtime.process_pool import ProcessPool

    pool = ProcessPool(1, name="pending")
    try:
        child = await pool._spawn()
        receiving = asyncio.ensure_future(child.receive())
        await asyncio.sleep(0.05)
        await asyncio.wait_for(child.kill(), 5)
        with pytest.raises(asyncio.IncompleteReadError):
            await asyncio.wait_for(receiving, 5)
        assert not child.sending()
    finally:
        await pool.close()


async def test_a_remote_cancel_during_the_stops_read(
    any_db: Db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hard stop reads a 1 MB outcome; a remote cancel arrives a quarter of the way
    into that read: the read is cut, the child killed, the job cancelled (not lost, not
    left running, not run twice)."""

    client = _one_child(any_db, _more_workers(), soft_stop_timeout=None)
    async with client:
        args = {"dir": str(tmp_path), "seconds": 0.2, "size": LARGE}
        job_id = await _run_one(client, tmp_path, args, "end_after")
        child = _wait_until_readable_blocking(client)
        cancelled: list[bool] = []
        producer = client.runtime.producers["default"]
        _once_fed(
            monkeypatch, client, LARGE // 4, lambda: cancelled.append(producer.cancel_job(job_id))
        )
        client.runtime.interrupt_running()
        await asyncio.wait_for(client.stop_and_cancel(), 20)
        row = await client.job_get(job_id)
        assert cancelled == [True]
        assert row.state is JobState.CANCELLED, row.state
        assert not _alive(child.pid)
