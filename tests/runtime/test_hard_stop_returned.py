"""A hard stop hands back the sync jobs whose threads still run them (available again,
attempt restored): what such a thread does afterwards is discarded, and the job runs
again later. A sync job whose body had already returned on its thread, its outcome not
yet back on the event loop (that takes a loop iteration or more, longer on a busy loop),
was handed back too: it had run to its end, and it ran a second time. Seen as quick
sync jobs run twice, both times at attempt 1, with ``stop_and_cancel()`` while
``pg_terminate_backend`` kept the loop busy with reconnects."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import riverboat
from riverboat import Job, JobState, QueueConfig, Workers
from riverboat.runtime import threads
from riverboat.runtime.producer import Producer
from tests.runtime.dbs import Db, any_db  # noqa: F401


async def test_hard_stop_keeps_a_sync_job_whose_body_returned(
    any_db: Db,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = any_db
    loop = asyncio.get_running_loop()
    runs: list[int] = []
    returned = asyncio.Event()  # the body returned; its thread is held before handing over
    release = threading.Event()
    interrupted = asyncio.Event()
    workers = Workers()

    @workers.register("quick")
    def quick(job: Job[Any]) -> None:
        runs.append(job.id)

    def hold_the_thread() -> None:
        # An AFTER_SYNC_JOB hook runs on the pool thread after the body returned and
        # before its outcome goes to the loop: the window, held open.
        if threading.current_thread().name.startswith("riverboat") and runs:
            loop.call_soon_threadsafe(returned.set)
            release.wait(10)

    monkeypatch.setattr(threads, "AFTER_SYNC_JOB", [hold_the_thread])
    interrupt_running = Producer.interrupt_running

    def noting_interrupt(self: Producer) -> int:
        count = interrupt_running(self)
        interrupted.set()
        return count

    monkeypatch.setattr(Producer, "interrupt_running", noting_interrupt)
    client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=1)},
        workers=workers,
        fetch_poll_interval=0.1,
    )
    other = riverboat.AsyncClient(db.url, schema=db.schema)
    try:
        job_id = (await other.insert({}, kind="quick")).job.id
        await client.start()
        async with asyncio.timeout(10):
            await returned.wait()
        stopping = asyncio.ensure_future(client.stop_and_cancel())
        async with asyncio.timeout(10):
            await interrupted.wait()
        release.set()
        async with asyncio.timeout(10):
            await stopping
        row = await other.job_get(job_id)
    finally:
        release.set()
        await client.close()
        await other.close()
    assert runs == [job_id]
    # Before: available, attempt 0 (handed back), to be run again.
    assert (row.state, row.attempt) == (JobState.COMPLETED, 1)
