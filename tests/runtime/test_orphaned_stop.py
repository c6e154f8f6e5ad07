"""A hard stop after this client lost its lease (runtime/registry.py) while a sync job's
thread still runs: the stop ends at once, the thread left to finish on its own (its
outcome is dropped in any case: the job may run elsewhere), also with
``soft_stop_timeout=None``. The lease's loss marks the job handed back but cannot stop
its thread, and the hard stop passed over every job marked so: with
``soft_stop_timeout=None`` it waited for that thread for ever."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import riverboat
from riverboat import Job, JobRow, JobState, QueueConfig, Workers
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.waiting import wait_until_async

STOP_WITHIN = 5.0  # seconds: the hard stop ends at once; this only catches a wait


async def _orphan_then_hard_stop(
    db: Db, workers: Workers, running: threading.Event
) -> tuple[int, JobRow]:
    """Run one ``orphaned_sync`` job until ``running`` is set, make the client lose its
    lease, then hard-stop it: how many threads the stop left behind, and the job's row."""
    client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        id="orphaned-client",
        queues={"default": QueueConfig(max_workers=1)},
        workers=workers,
        heartbeat_interval=0.1,
        dead_after=2.0,
        soft_stop_timeout=None,
    )
    try:
        job = (await client.insert({}, kind="orphaned_sync")).job
        await client.start()
        assert await asyncio.to_thread(running.wait, 30)
        # Its registry row gone (as the leader removes an expired one): the next
        # heartbeat finds the lease lost and orphans the running job.
        db.execute("DELETE FROM riverboat_client WHERE id = 'orphaned-client'")
        registry = client.runtime.registry
        assert registry is not None
        await wait_until_async(lambda: registry.lost, timeout=30, what="the lease lost")
        await asyncio.wait_for(client.stop_and_cancel(), STOP_WITHIN)
        return client.runtime.producers["default"].abandoned_threads, await client.job_get(job.id)
    finally:
        await client.close()


def test_a_hard_stop_leaves_an_orphaned_thread_behind(any_db: Db) -> None:  # noqa: F811
    started = threading.Event()
    release = threading.Event()
    workers = Workers()

    @workers.register("orphaned_sync")
    def body(job: Job[Any]) -> None:
        started.set()
        release.wait(60)

    async def scenario() -> None:
        try:
            abandoned, row = await _orphan_then_hard_stop(any_db, workers, started)
        finally:
            release.set()
        assert abandoned == 1
        # Its outcome dropped: still running, for the leader to hand out again.
        assert row.state is JobState.RUNNING and row.attempt == 1

    asyncio.run(scenario())


@pytest.mark.parametrize("where", ["before_body", "after_body"])
def test_a_hard_stop_cuts_an_orphaned_jobs_middleware_short(
    any_db: Db,  # noqa: F811
    where: str,
) -> None:
    """The same with the job's work middleware awaiting on the event loop (an export
    that does not answer), before calling the body or after it returned: the stop ends
    at once, and no thread is counted as left behind (none runs)."""
    in_middleware = threading.Event()

    async def exports(job: Job[Any], call_next: Callable[[], Awaitable[None]]) -> None:
        if where == "after_body":
            await call_next()
        in_middleware.set()
        await asyncio.sleep(60)
        if where == "before_body":
            await call_next()

    workers = Workers()

    @workers.register("orphaned_sync", middleware=[exports])
    def body(job: Job[Any]) -> None:
        return None

    async def scenario() -> None:
        abandoned, row = await _orphan_then_hard_stop(any_db, workers, in_middleware)
        assert abandoned == 0
        assert row.state is JobState.RUNNING and row.attempt == 1

    asyncio.run(scenario())
