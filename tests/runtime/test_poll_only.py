"""Poll-only mode (PgBouncer in transaction pooling): no LISTEN, yet jobs are worked and
other clients' pauses and cancellations still take effect through the database; and the
same reads as a fallback for lost notifications when a client does LISTEN."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import riverboat
from riverboat import EventKind, Job, QueueConfig, Workers
from riverboat.runtime import producer as producer_module
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.runtime.helpers import make_client, wait_for
from tests.waiting import wait_until


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


async def test_poll_only_cancels_a_running_job_another_client_cancelled(
    apg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    """River 0.48: without notifications, running jobs' cancellation requests are read
    from the database, every QUEUE_POLL_INTERVAL."""
    started = asyncio.Event()
    workers = Workers()

    @workers.register("long")
    async def long(job: Job[Any]) -> None:
        started.set()
        await asyncio.Event().wait()  # until cancelled

    client = make_client(apg_driver, workers, poll_only=True)
    sub = client.subscribe(EventKind.JOB_CANCELLED)
    other = riverboat.AsyncClient(pg_url, schema=pg_schema)
    await client.start()
    try:
        job = (await other.insert({}, kind="long")).job
        await asyncio.wait_for(started.wait(), 10)
        await other.job_cancel(job.id)  # its NOTIFY reaches nobody here
        await wait_for([EventKind.JOB_CANCELLED], sub, job.id)
        assert (await other.job_get(job.id)).state is riverboat.JobState.CANCELLED
    finally:
        await client.stop()
        await other.close()


def test_a_lost_cancel_notification_is_caught_by_the_fallback_poll(
    any_db: Db,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """River 0.51: a client that LISTENs also reads cancellation requests now and then,
    for a notification lost while its listener reconnected. The request is written here
    without any notification, as such a lost one leaves it."""
    monkeypatch.setattr(producer_module, "NOTIFICATION_POLL_INTERVAL", 0.2)
    started = threading.Event()
    workers = Workers()

    @workers.register("long_sync")
    def long_sync(job: Job[Any]) -> None:
        started.set()
        wait_until(lambda: job.cancel_requested, timeout=30, what="the cancel request")
        raise RuntimeError("stopped on request")  # an error after a cancel cancels

    with riverboat.Client(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
    ) as client:
        sub = client.subscribe(EventKind.JOB_CANCELLED)
        client.start()
        job = client.insert({}, kind="long_sync").job
        assert started.wait(10)
        client.job_update(job.id, metadata={"cancel_attempted_at": "2026-12-04T07:30:00Z"})
        event = sub.get(timeout=20)
        assert event is not None and event.job is not None and event.job.id == job.id
        assert client.job_get(job.id).state is riverboat.JobState.CANCELLED


@pytest.mark.asyncio
async def test_a_cancel_that_arrives_during_the_fetch_reaches_the_fetched_job(
    any_db: Db,  # noqa: F811
) -> None:
    """River 0.48 (PR #1397): a cancellation received while the fetch that claims the job
    is in flight is applied when the job starts, not lost. The notification is delivered
    from inside the claim statement's round trip, as a slow claim would see it."""
    ran: list[int] = []
    workers = Workers()

    @workers.register("fetched")
    async def fetched(job: Job[Any]) -> None:
        ran.append(job.id)

    client = riverboat.AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_poll_interval=0.1,
    )
    sub = client.subscribe(EventKind.JOB_CANCELLED, EventKind.JOB_COMPLETED)
    await client.start()
    try:
        producer = client.runtime.producers["default"]
        target: list[int] = []
        fetch = producer._driver.fetch

        async def fetch_then_cancel(stmt: Any) -> Any:
            rows = await fetch(stmt)
            # The first claim that returns the job (the only one inserted): the claim may
            # come back before the insert call does, so the job is not named in advance.
            if stmt.query.name == "job_get_available" and rows and not target:
                target.append(rows[0][0])
                producer.handle_control(
                    {"action": "cancel", "queue": "default", "job_id": target[0]}
                )
            return rows

        producer._driver = _FetchWrapper(producer._driver, fetch_then_cancel)
        job = (await client.insert({}, kind="fetched")).job
        event = await wait_for([EventKind.JOB_CANCELLED, EventKind.JOB_COMPLETED], sub, job.id)
        assert target == [job.id]
        assert event.kind == EventKind.JOB_CANCELLED
        assert ran == []
    finally:
        await client.stop()
        await client.close()


class _FetchWrapper:
    def __init__(self, inner: Any, fetch: Any) -> None:
        self._inner = inner
        self.fetch = fetch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
