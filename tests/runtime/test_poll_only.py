"""Poll-only mode (PgBouncer in transaction pooling): no LISTEN, yet jobs are worked and
other clients' pauses still take effect through the queue row."""

from __future__ import annotations

import asyncio
from typing import Any

import riverboat
from riverboat import EventKind, Job, Workers
from tests.runtime.helpers import make_client, wait_for


async def test_poll_only_works_jobs_and_sees_remote_pause(
    apg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    workers = Workers()

    @workers.register("polled")
    async def polled(job: Job[Any]) -> None:
        return None

    client = make_client(apg_driver, workers, poll_only=True)
    sub = client.subscribe(EventKind.JOB_COMPLETED, EventKind.QUEUE_PAUSED, EventKind.QUEUE_RESUMED)
    other = riverboat.AsyncClient(pg_url, schema=pg_schema)
    await client.start()
    try:
        assert client.runtime.notifier is None
        # Inserted by another client: only polling can find it.
        job = (await other.insert({}, kind="polled")).job
        await wait_for([EventKind.JOB_COMPLETED], sub, job.id)
        await other.queue_pause("default")
        async with asyncio.timeout(5):
            while (await sub.get()).kind != EventKind.QUEUE_PAUSED:
                pass
        assert client.runtime.producers["default"].paused
        await other.queue_resume("default")
        async with asyncio.timeout(5):
            while (await sub.get()).kind != EventKind.QUEUE_RESUMED:
                pass
    finally:
        await client.stop()
        await other.close()
