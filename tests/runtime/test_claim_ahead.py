"""Claiming ahead (runtime/producer.py): under a backlog of short jobs a refill claims up
to max_workers more jobs than there are free slots. They start as slots free, never more
than max_workers at once; each runs once; a stop, a wait longer than AHEAD_MAX_WAIT or a
cancel gives them back unrun."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import riverboat
from riverboat import InsertManyParams, Job, QueueConfig, Workers
from riverboat.drivers.psycopg import AsyncPsycopgDriver
from riverboat.drivers.sqlite import AsyncSqliteDriver
from riverboat.runtime.producer import Producer
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.waiting import wait_until_async


def _driver(db: Db) -> Any:
    if db.dialect == "postgres":
        return AsyncPsycopgDriver(db.url, schema=db.schema)
    return AsyncSqliteDriver(db.url)


def _table(db: Db) -> str:
    return f'"{db.schema}".river_job' if db.dialect == "postgres" else "river_job"


def _producer(client: riverboat.AsyncClient) -> Producer:
    assert client._runtime is not None
    return client._runtime.producers["default"]


@pytest.fixture(autouse=True)
def _always_short(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every refill after a full fetch counts as "short jobs", however slow the machine.
    monkeypatch.setattr("riverboat.runtime.producer.AHEAD_WINDOW", 3600.0)


async def test_a_backlog_is_claimed_ahead_never_run_wider_than_max_workers(
    any_db: Db,  # noqa: F811
) -> None:
    jobs, max_workers = 200, 10
    running = 0
    widest = 0
    runs: dict[int, int] = {}
    done = asyncio.Event()
    workers = Workers()

    @workers.register("short")
    async def short(job: Job[Any]) -> None:
        nonlocal running, widest
        running += 1
        widest = max(widest, running)
        runs[job.row.id] = runs.get(job.row.id, 0) + 1
        await asyncio.sleep(0)  # let other jobs start meanwhile
        running -= 1
        if len(runs) == jobs:
            done.set()

    driver = _driver(any_db)
    client = riverboat.AsyncClient(
        driver,
        queues={"default": QueueConfig(max_workers=max_workers)},
        workers=workers,
        fetch_poll_interval=120.0,
    )
    await client.insert_many([InsertManyParams({}, kind="short") for _ in range(jobs)])
    claims: list[int] = []
    await client.start()
    _producer(client).claim_listeners.append(lambda _queue, n: claims.append(n))
    try:
        await asyncio.wait_for(done.wait(), 60)
    finally:
        await client.stop()
        await client.close()
        await driver.close()
    assert widest <= max_workers
    assert sorted(runs.values()) == [1] * jobs
    # Some refill claimed more jobs than there were slots: jobs were claimed ahead.
    assert max(claims) > max_workers
    rows = any_db.execute(f"SELECT state, attempt, count(*) FROM {_table(any_db)} GROUP BY 1, 2")
    assert [tuple(row) for row in rows] == [("completed", 1, jobs)]


async def _gated_client(
    db: Db, ran: list[int], gate: asyncio.Event
) -> tuple[riverboat.AsyncClient, list[int]]:
    """Two slots; the first job returns at once, every other waits for ``gate``. The
    first's slot frees the refill, which claims three: one runs, two wait claimed ahead."""
    workers = Workers()

    @workers.register("gated")
    async def gated(job: Job[Any]) -> None:
        ran.append(job.row.id)
        if len(ran) > 1:
            await gate.wait()

    client = riverboat.AsyncClient(
        _driver(db),  # closed by _close
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_poll_interval=120.0,
    )
    inserted = await client.insert_many([InsertManyParams({}, kind="gated") for _ in range(10)])
    ids = sorted(result.job.id for result in inserted)
    await client.start()
    producer = _producer(client)
    # Claimed ahead, or already handed back: with AHEAD_MAX_WAIT at 0.05 s (below) they
    # may go back between two polls of a loaded machine, and none is claimed ahead again
    # for AHEAD_BACKOFF.
    await wait_until_async(
        lambda: len(producer._ahead) + producer.handed_back == 2, what="two jobs claimed ahead"
    )
    return client, ids


async def _close(client: riverboat.AsyncClient) -> None:
    await client.close()
    await client.driver.close()


def _states(db: Db, ids: list[int]) -> list[tuple[str, int]]:
    rows = db.execute(f"SELECT id, state, attempt FROM {_table(db)} ORDER BY id")
    by_id = {row[0]: (row[1], row[2]) for row in rows}
    return [by_id[job_id] for job_id in ids]


async def test_a_stop_hands_back_jobs_claimed_ahead_unrun(any_db: Db) -> None:  # noqa: F811
    ran: list[int] = []
    gate = asyncio.Event()
    client, ids = await _gated_client(any_db, ran, gate)
    try:
        stopping = asyncio.create_task(client.stop())
        # The two jobs claimed ahead go back (available, attempt rolled back) while the
        # two running ones still wait for the gate.
        await wait_until_async(
            lambda: _states(any_db, ids[3:5]) == [("available", 0)] * 2,
            what="jobs claimed ahead handed back",
        )
        assert len(ran) == 3
        gate.set()
        await stopping
    finally:
        gate.set()
        await _close(client)
    assert ran == ids[:3]
    assert _states(any_db, ids) == [("completed", 1)] * 3 + [("available", 0)] * 7


async def test_jobs_claimed_ahead_that_wait_too_long_go_back_and_run_once(
    any_db: Db,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("riverboat.runtime.producer.AHEAD_MAX_WAIT", 0.05)
    ran: list[int] = []
    gate = asyncio.Event()
    client, ids = await _gated_client(any_db, ran, gate)
    producer = _producer(client)
    try:
        await wait_until_async(
            lambda: _states(any_db, ids[3:5]) == [("available", 0)] * 2,
            what="jobs claimed ahead handed back after AHEAD_MAX_WAIT",
        )
        assert producer.handed_back == 2
        assert len(ran) == 3
        gate.set()
        await wait_until_async(
            lambda: _states(any_db, ids) == [("completed", 1)] * 10, what="every job completed"
        )
    finally:
        gate.set()
        await client.stop()
        await _close(client)
    # Each ran once, the handed-back ones on their next claim (attempt 1, not 2).
    assert sorted(ran) == ids
    assert producer.handed_back == 2


async def test_a_cancelled_job_claimed_ahead_is_cancelled_unrun(any_db: Db) -> None:  # noqa: F811
    ran: list[int] = []
    gate = asyncio.Event()
    client, ids = await _gated_client(any_db, ran, gate)
    try:
        await client.job_cancel(ids[3])
        await wait_until_async(
            lambda: _states(any_db, ids[3:4])[0][0] == "cancelled", what="job cancelled"
        )
        assert ids[3] not in ran
    finally:
        gate.set()
        await client.stop()
        await _close(client)
    assert ids[3] not in ran
