"""SQLite's one write lock held past ``dead_after`` by another connection (a shell left in
``BEGIN IMMEDIATE``, a long migration, a process frozen inside a write). Every heartbeat
waits, and every lease runs out by the clock; before, the client counted itself dead
when the lock was released, dropped the outcome of the job it had just finished, and the
leader rescued the job, which ran a second time. Now a heartbeat renews a lease that ran
out while the client's row exists, the leader's dead-client rescue waits ``dead_after``
after its own writes last waited for the lock, and the job's one run is written."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import riverboat
from riverboat import Job, JobState, QueueConfig, Workers
from riverboat.drivers._sqlite_module import sqlite_module
from riverboat.runtime.maintenance.config import MaintenanceConfig

pytestmark = pytest.mark.asyncio

DEAD_AFTER = 2.0
LOCK_HELD = DEAD_AFTER + 1.5  # the fault: longer than dead_after


def _fast_fleet_client(sqlite_url: str, workers: Workers) -> riverboat.AsyncClient:
    """A client whose lease runs out DEAD_AFTER after its last heartbeat, and whose
    leader looks for dead clients every 0.2 s."""
    return riverboat.AsyncClient(
        sqlite_url,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.1,
        heartbeat_interval=0.3,
        dead_after=DEAD_AFTER,
        maintenance=MaintenanceConfig(dead_client_check_interval=0.2),
    )


async def test_a_write_lock_held_past_dead_after_runs_no_job_twice(sqlite_url: str) -> None:
    path = sqlite_url.removeprefix("sqlite:///")
    runs: list[int] = []
    returned = asyncio.Event()
    workers = Workers()

    @workers.register("short")
    async def short(job: Job[Any]) -> None:
        runs.append(job.attempt)
        returned.set()

    client = _fast_fleet_client(sqlite_url, workers)
    locked = threading.Event()
    release = threading.Event()

    def hold_the_write_lock() -> None:
        conn = sqlite_module().connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            locked.set()
            release.wait(30)
            conn.execute("COMMIT")
        finally:
            conn.close()

    # The job's outcome is held in the completer so that it is written only after the
    # lock: the window in which it was dropped.
    client.runtime.config.completer_flush_delay = LOCK_HELD + 5
    client.runtime.config.completer_batch_threshold = 1000
    await client.start()
    holder = threading.Thread(target=hold_the_write_lock)
    try:
        job = (await client.insert({}, kind="short")).job
        await asyncio.wait_for(returned.wait(), 30)
        holder.start()
        await asyncio.to_thread(locked.wait, 30)
        registry = client.runtime.registry
        assert registry is not None and registry.enabled
        # Held while every lease runs out by the clock (the fault's length, not a wait
        # for an event), then released.
        await asyncio.sleep(LOCK_HELD)
        release.set()
        await asyncio.to_thread(holder.join, 30)
        completer = client.runtime.completer
        assert completer is not None
        completer.flush_now()
        done = await client.job_wait(job.id, timeout=30)
        assert done.state is JobState.COMPLETED and done.attempt == 1
        assert not registry.lost
        assert registry.heartbeats >= 1
    finally:
        release.set()
        if holder.is_alive():
            holder.join(30)
        await client.stop()
        await client.close()
    assert runs == [1]


async def test_a_lone_sqlite_client_that_counted_itself_dead_joins_again(
    sqlite_url: str,
) -> None:
    """One client whose event loop did not run for longer than ``dead_after`` (an async
    job that blocked it here; a SIGSTOP or a VM pause alike) counts itself dead. On
    SQLite the leader condemns a dead row only while some client heartbeat recently,
    and this client, alone, had no one else's: it stayed out for good, its job
    ``running`` and every new job ``available``. Its rejoin attempts now mark its row
    as heard from, so its own leadership rescues the job and it joins again."""
    ran: list[int] = []
    workers = Workers()

    @workers.register("blocks_the_loop")
    async def blocks_the_loop(job: Job[Any]) -> None:
        ran.append(job.attempt)
        if job.attempt == 1:
            time.sleep(DEAD_AFTER + 1)  # the fault: the event loop stops for a while

    @workers.register("short")
    async def short(job: Job[Any]) -> None:
        return None

    client = _fast_fleet_client(sqlite_url, workers)
    await client.start()
    try:
        blocked = (await client.insert({}, kind="blocks_the_loop")).job
        done = await client.job_wait(blocked.id, timeout=30)
        # Its first outcome was dropped (the client could not know whether its jobs
        # had been handed out); the rescue ran it again, as for any frozen process.
        assert done.state is JobState.COMPLETED and done.attempt == 2
        after = (await client.insert({}, kind="short")).job
        assert (await client.job_wait(after.id, timeout=30)).state is JobState.COMPLETED
        registry = client.runtime.registry
        assert registry is not None and not registry.lost
    finally:
        await client.stop()
        await client.close()
    assert ran == [1, 2]
