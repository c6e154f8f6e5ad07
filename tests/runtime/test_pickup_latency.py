"""Jobs inserted one at a time into an idle queue start without waiting out the fetch
cooldown (at defaults), one claim per job; a burst makes the wait grow back to the
cooldown; SQLite clients of one process wake each other's listeners at commit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import riverboat
from riverboat import InsertManyParams, Job, QueueConfig, Workers
from riverboat.drivers.psycopg import AsyncPsycopgDriver, PsycopgDriver
from riverboat.drivers.sqlite import AsyncSqliteDriver, SqliteDriver, SqliteListener
from riverboat.runtime.producer import QUICK_FETCH_GAP, fetch_delay
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.waiting import wait_until_async

JOBS = 5


def test_an_idle_queue_waits_one_gap_and_a_burst_the_cooldown() -> None:
    cooldown = 0.1
    # Nothing claimed yet, an empty fetch, a single job: one gap after the last fetch.
    for claimed in (-1, 0, 1):
        assert fetch_delay(0.0, claimed, cooldown, adaptive=True) == QUICK_FETCH_GAP
    # Several jobs: a gap per job ...
    assert fetch_delay(0.0, 4, cooldown, adaptive=True) == pytest.approx(4 * QUICK_FETCH_GAP)
    # ... never more than the cooldown, whatever the burst.
    assert fetch_delay(0.0, 10_000, cooldown, adaptive=True) == cooldown
    # Measured from the last fetch, so a late wake-up fetches at once.
    assert fetch_delay(0.5, 1, cooldown, adaptive=True) < 0
    # A cooldown the user set is River's: waited out whatever the last fetch found.
    for claimed in (-1, 0, 1, 4):
        assert fetch_delay(0.0, claimed, cooldown, adaptive=False) == cooldown


def _counting_workers(ran: list[int], started: asyncio.Event) -> Workers:
    workers = Workers()

    @workers.register("pickup")
    async def pickup(job: Job[Any]) -> None:
        ran.append(job.row.id)
        started.set()

    return workers


def _drivers(db: Db) -> tuple[Any, Any]:
    """The worker's async driver and another client's sync driver, on ``db``."""
    if db.dialect == "postgres":
        return (
            AsyncPsycopgDriver(db.url, schema=db.schema),
            PsycopgDriver(db.url, schema=db.schema, max_pool_size=1),
        )
    return AsyncSqliteDriver(db.url), SqliteDriver(db.url)


async def test_jobs_one_at_a_time_start_without_waiting_out_the_default_cooldown(
    any_db: Db,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The default cooldown made a minute long: were a wake-up after a one-job fetch
    # waiting it out, the second job would start a minute later and the test would
    # fail at its deadline. No poll either (two minutes): only the insert notification
    # can start each job.
    monkeypatch.setattr("riverboat.runtime.runner.DEFAULT_FETCH_COOLDOWN", 60.0)
    worker_driver, inserter_driver = _drivers(any_db)
    ran: list[int] = []
    started = asyncio.Event()
    client = riverboat.AsyncClient(
        worker_driver,
        queues={"default": QueueConfig()},
        workers=_counting_workers(ran, started),
        fetch_poll_interval=120.0,
    )
    inserter = riverboat.Client(inserter_driver)  # another client: no local wake-up
    await client.start()
    try:
        assert client._runtime is not None
        producer = client._runtime.producers["default"]
        # The claim at start has found the queue empty (and the notifier listens).
        await wait_until_async(lambda: producer.fetches == 1, what="the first claim")
        assert client._runtime.notifier is not None
        await asyncio.wait_for(client._runtime.notifier.connected.wait(), 20)
        for _ in range(JOBS):
            started.clear()
            await asyncio.to_thread(inserter.insert, {}, kind="pickup")
            await asyncio.wait_for(started.wait(), 20)
        claims = worker_driver.stats.by_query.get("job_get_available", 0)
    finally:
        await client.close()
        await worker_driver.close()
        inserter_driver.close()
    assert len(ran) == JOBS
    # The claim at start, then one per job, each woken by its own notification.
    assert claims == JOBS + 1


def test_every_insert_notifies_at_the_default_cooldown_and_a_set_one_limits(
    sqlite_url: str,
) -> None:
    def outbox_rows() -> int:
        with SqliteDriver(sqlite_url) as driver:
            rows = driver.fetch(driver.dialect.notification_get_after(0))
        return len(rows)

    with SqliteDriver(sqlite_url) as driver:
        client = riverboat.Client(driver)
        for _ in range(3):
            client.insert({}, kind="pickup")
        assert outbox_rows() == 3
        client = riverboat.Client(driver, fetch_cooldown=60.0)
        for _ in range(3):
            client.insert({}, kind="pickup")
        assert outbox_rows() == 4  # River's notify limiter: one per queue per cooldown


async def test_a_sqlite_insert_in_the_same_process_wakes_the_listener_at_commit(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The listener's poll made an hour long: only the commit's poke can deliver the
    # notification, and only the notification can start the job (no producer poll).
    monkeypatch.setattr(SqliteListener, "poll_interval", 3600.0)
    ran: list[int] = []
    started = asyncio.Event()
    client = riverboat.AsyncClient(
        AsyncSqliteDriver(sqlite_url),
        queues={"default": QueueConfig()},
        workers=_counting_workers(ran, started),
        fetch_poll_interval=120.0,
    )
    worker_driver = client.driver
    await client.start()
    inserter_driver = SqliteDriver(sqlite_url)
    inserter = riverboat.Client(inserter_driver)
    try:
        assert client._runtime is not None and client._runtime.notifier is not None
        await asyncio.wait_for(client._runtime.notifier.connected.wait(), 20)
        listener = client._runtime.notifier._listener
        assert isinstance(listener, SqliteListener)
        pokes = listener.pokes
        # In a transaction: no poke until it commits, none at all if it rolls back.
        with pytest.raises(RuntimeError), inserter_driver.transaction() as tx:
            inserter.insert_many_tx(tx, [InsertManyParams({}, kind="pickup")])
            assert listener.pokes == pokes
            raise RuntimeError("roll back")
        assert listener.pokes == pokes
        with inserter_driver.transaction() as tx:
            inserter.insert_many_tx(tx, [InsertManyParams({}, kind="pickup")])
            assert listener.pokes == pokes
        assert listener.pokes == pokes + 1
        await asyncio.wait_for(started.wait(), 20)
        # A plain insert (its own transaction) pokes as it commits.
        started.clear()
        await asyncio.to_thread(inserter.insert, {}, kind="pickup")
        assert listener.pokes == pokes + 2
        await asyncio.wait_for(started.wait(), 20)
        # An outbox INSERT that writes no row pokes nobody: the leader's scheduler runs
        # one every 5 s, nothing due, and each woke the listener (and made this test
        # count one poke too many when a run fell between its steps).
        schedule = inserter_driver.dialect.job_schedule(max=100)
        assert await asyncio.to_thread(inserter_driver.fetch, schedule) == []
        assert listener.pokes == pokes + 2
    finally:
        await client.close()
        await worker_driver.close()
        inserter_driver.close()
    assert len(ran) == 2
