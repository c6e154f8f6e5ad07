"""``soft_stop_timeout`` on the client (River's SoftStopTimeout), Postgres and SQLite: a
soft stop waits that long for running jobs, then hands them back as a hard stop does."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import riverboat
from riverboat import EventKind, InsertOpts, InvalidInputError, Job, JobState, QueueConfig, Workers
from riverboat.runtime.runner import DEFAULT_SOFT_STOP_TIMEOUT
from tests.runtime.helpers import next_events


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    return request.getfixturevalue("sqlite_url"), None


@pytest.mark.asyncio
async def test_soft_stop_hands_back_what_outlives_the_timeout(db: tuple[str, str | None]) -> None:
    url, schema = db
    release = threading.Event()
    started = threading.Event()
    workers = Workers()

    @workers.register("quick")
    async def quick(job: Job[Any]) -> None:
        pass

    @workers.register("hung")
    def hung(job: Job[Any]) -> None:
        started.set()
        release.wait(30)

    client = riverboat.AsyncClient(
        url,
        schema=schema,
        queues={"default": QueueConfig(max_workers=5)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        soft_stop_timeout=0.5,
    )
    hung_id = (await client.insert({}, kind="hung")).job.id
    sub = client.subscribe(EventKind.JOB_INTERRUPTED)
    await client.start()
    try:
        assert await asyncio.to_thread(started.wait, 10)
        began = time.monotonic()
        await asyncio.wait_for(client.stop(), 10)
        took = time.monotonic() - began
        (event,) = await next_events(sub, 1)
    finally:
        release.set()
    row = await client.job_get(hung_id)
    await client.close()
    assert 0.5 <= took < 5
    assert event.job is not None and event.job.id == hung_id
    assert (row.state, row.attempt, row.errors) == (JobState.AVAILABLE, 0, [])


@pytest.mark.parametrize("value", ["25", True, -2, float("nan")])
def test_soft_stop_timeout_is_checked_at_construction(value: Any) -> None:
    with pytest.raises(InvalidInputError, match="soft_stop_timeout"):
        riverboat.AsyncClient(
            "sqlite:///never-opened.sqlite3",
            queues={"default": QueueConfig()},
            workers=Workers(),
            soft_stop_timeout=value,
        )


def test_soft_stop_timeout_defaults_and_none() -> None:
    def config(**kwargs: Any) -> Any:
        client = riverboat.AsyncClient(
            "sqlite:///never-opened.sqlite3",
            queues={"default": QueueConfig()},
            workers=Workers(),
            **kwargs,
        )
        return client.runtime.config.soft_stop_timeout

    assert config() == DEFAULT_SOFT_STOP_TIMEOUT == 25.0
    assert config(soft_stop_timeout=-1) is None
    assert config(soft_stop_timeout=None) is None
    assert config(soft_stop_timeout=0) == 0.0


@pytest.mark.asyncio
async def test_a_job_that_swallows_the_hard_stops_cancel_is_timed_out(
    db: tuple[str, str | None],
) -> None:
    """An async job that catches the hard stop's cancel and goes on is cancelled again at
    its timeout, so a stop without a soft_stop_timeout (which waits for every job) ends
    then. The job was handed back, then timed out: its attempt fails."""
    url, schema = db
    workers = Workers()
    started = asyncio.Event()
    swallowed = asyncio.Event()

    @workers.register("stubborn", timeout=2.0)
    async def stubborn(job: Job[Any]) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            swallowed.set()
        await asyncio.sleep(60)

    client = riverboat.AsyncClient(
        url,
        schema=schema,
        queues={"default": QueueConfig(max_workers=1)},
        workers=workers,
        soft_stop_timeout=None,
    )
    job_id = (await client.insert({}, InsertOpts(max_attempts=1), kind="stubborn")).job.id
    await client.start()
    try:
        await asyncio.wait_for(started.wait(), 30)
        await asyncio.wait_for(client.stop_and_cancel(), 30)
        row = await client.job_get(job_id)
    finally:
        await client.close()
    assert swallowed.is_set()
    assert row.state is JobState.DISCARDED
    assert "timeout" in row.errors[-1].error
