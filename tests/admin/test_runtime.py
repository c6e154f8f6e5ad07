"""Admin operations reaching running producers: pause/resume through the river_control
notification (or directly, when the client cannot LISTEN), and a remote cancel of a
running job."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import riverboat
from riverboat import Event, EventKind, Job, JobState, QueueConfig, Subscription, Workers

pytestmark = pytest.mark.asyncio


class EventLog:
    """Every event of a subscription, kept, so waiting for one never loses another."""

    def __init__(self, sub: Subscription) -> None:
        self._sub = sub
        self.seen: list[Event] = []

    async def wait(
        self, kind: EventKind, job_id: int | None = None, timeout: float = 10.0
    ) -> Event:
        def match(event: Event) -> bool:
            return event.kind == kind and (
                job_id is None or (event.job is not None and event.job.id == job_id)
            )

        for event in self.seen:
            if match(event):
                self.seen.remove(event)
                return event
        async with asyncio.timeout(timeout):
            while True:
                event = await self._sub.get()
                if match(event):
                    return event
                self.seen.append(event)


def make_client(
    driver: Any, workers: Workers, poll_only: bool, poll: float = 0.05
) -> riverboat.AsyncClient:
    return riverboat.AsyncClient(
        driver,
        queues={"default": QueueConfig(max_workers=5)},
        workers=workers,
        poll_only=poll_only,
        fetch_cooldown=0.01,
        fetch_poll_interval=poll,
    )


class FetchSpy:
    """The async driver, noting for each claim (job_get_available) whether the producer
    was already paused when it began, and how many claims are in flight."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.producer: Any = None
        self.began_while_paused = 0
        self.in_flight = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def fetch(self, stmt: Any) -> list[Any]:
        if stmt.query.name != "job_get_available":
            return await self._inner.fetch(stmt)  # type: ignore[no-any-return]
        if self.producer is not None and self.producer.paused:
            self.began_while_paused += 1
        self.in_flight += 1
        try:
            return await self._inner.fetch(stmt)  # type: ignore[no-any-return]
        finally:
            self.in_flight -= 1


@pytest.mark.parametrize("poll_only", [False, True], ids=["listen", "poll_only"])
async def test_pause_and_resume_reach_the_producer(apg_driver: Any, poll_only: bool) -> None:
    workers = Workers()

    @workers.register("tick")
    async def tick(job: Job[Any]) -> None:
        return None

    spy = FetchSpy(apg_driver)
    client = make_client(spy, workers, poll_only, poll=0.1)
    events = EventLog(
        client.subscribe(EventKind.QUEUE_PAUSED, EventKind.QUEUE_RESUMED, EventKind.JOB_COMPLETED)
    )
    await client.start()
    try:
        producer = spy.producer = client.runtime.producers["default"]
        assert (client.runtime.notifier is None) == poll_only
        first = (await client.insert({}, kind="tick")).job
        await events.wait(EventKind.JOB_COMPLETED, first.id)

        started = time.monotonic()
        (row,) = await client.queue_pause("default")
        assert row.paused_at is not None
        event = await events.wait(EventKind.QUEUE_PAUSED, timeout=1.0)
        assert event.queue == "default"
        assert time.monotonic() - started < 1.0
        assert producer.paused
        in_flight_at_pause = spy.in_flight

        # While paused no claim begins, whatever wakes the producer (the insert, poll
        # ticks): a negative, so an observation window of three poll intervals. Nothing
        # can be awaited instead: a paused producer's wake-ups leave no trace to wait on.
        held = (await client.insert({}, kind="tick")).job
        await asyncio.sleep(0.3)
        assert spy.began_while_paused == 0
        if in_flight_at_pause == 0:
            # (A claim already under way when the pause landed may still take it, as in
            # River.)
            assert (await client.job_get(held.id)).state == JobState.AVAILABLE

        started = time.monotonic()
        await client.queue_resume("*")
        await events.wait(EventKind.QUEUE_RESUMED, timeout=1.0)
        assert time.monotonic() - started < 1.0
        done = await events.wait(EventKind.JOB_COMPLETED, held.id)
        assert done.job is not None and done.job.state == JobState.COMPLETED
    finally:
        await client.stop()


async def test_producer_starts_paused_after_queue_pause(apg_driver: Any) -> None:
    workers = Workers()

    @workers.register("tick")
    async def tick(job: Job[Any]) -> None:
        return None

    admin = riverboat.AsyncClient(apg_driver)
    await apg_driver.fetch(apg_driver.dialect.queue_create_or_set_updated_at("default"))
    await admin.queue_pause("default")
    client = make_client(apg_driver, workers, poll_only=False)
    await client.start()
    try:
        assert client.runtime.producers["default"].paused  # paused_at survives restarts
    finally:
        await client.stop()


@pytest.mark.parametrize("poll_only", [False, True], ids=["listen", "poll_only"])
async def test_cancel_of_a_running_async_job_ends_cancelled(
    apg_driver: Any, poll_only: bool
) -> None:
    workers = Workers()
    running = asyncio.Event()

    @workers.register("forever")
    async def forever(job: Job[Any]) -> None:
        running.set()
        await asyncio.Event().wait()  # only a cancellation ends this

    client = make_client(apg_driver, workers, poll_only)
    events = EventLog(
        client.subscribe(EventKind.JOB_CANCELLED, EventKind.JOB_COMPLETED, EventKind.JOB_FAILED)
    )
    await client.start()
    try:
        job = (await client.insert({}, kind="forever")).job
        async with asyncio.timeout(10):
            await running.wait()
        with_stats = apg_driver.stats.by_query.get("job_cancel", 0)
        out = await client.job_cancel(job.id)
        assert apg_driver.stats.by_query["job_cancel"] == with_stats + 1
        assert out.state == JobState.RUNNING  # the producer finishes the cancellation
        assert "cancel_attempted_at" in out.metadata
        event = await events.wait(EventKind.JOB_CANCELLED, job.id)
    finally:
        await client.stop()
    assert event.job is not None
    assert event.job.state == JobState.CANCELLED
    assert event.job.finalized_at is not None
    assert "cancel_attempted_at" in event.job.metadata
    assert (await client.job_get(job.id)).state == JobState.CANCELLED


async def test_tx_forms_leave_local_producers_to_the_notification(apg_driver: Any) -> None:
    # A poll-only client's *_tx calls must not pause its producers directly: the caller's
    # transaction may still roll back.
    import psycopg

    workers = Workers()
    client = make_client(apg_driver, workers, poll_only=True)
    await client.start()
    try:
        async with await psycopg.AsyncConnection.connect(apg_driver.url) as conn:
            await client.queue_pause_tx(conn, "default")
            await conn.rollback()
        assert not client.runtime.producers["default"].paused
        assert (await client.queue_get("default")).paused_at is None
    finally:
        await client.stop()
