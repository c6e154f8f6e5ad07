"""The admin API's read operations for dashboards (riverboat ui): capped counts per state,
exact counts per queue, throughput per minute, the leader; on Postgres and SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import riverboat
from riverboat import InvalidInputError, JobState
from riverboat._url import driver_from_url
from tests.admin.helpers import counting
from tests.ui.seed import MEDIA_COMPLETED, Seeded, seed


@pytest.fixture(params=["sqlite", "postgres"])
def seeded_client(request: pytest.FixtureRequest) -> Iterator[tuple[riverboat.Client, Seeded]]:
    if request.param == "sqlite":
        url, schema = request.getfixturevalue("sqlite_url"), None
    else:
        url, schema = request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    client = riverboat.Client(driver_from_url(url, schema=schema))
    # work_job (in seed) runs its own event loop: keep it off pytest-asyncio's thread.
    with ThreadPoolExecutor(max_workers=1) as pool:
        jobs = pool.submit(seed, client).result()
    yield client, jobs
    client.driver.close()


def test_count_by_state_is_exact_below_the_cap(seeded_client: Any) -> None:
    client, jobs = seeded_client
    with counting(client.driver) as seen:
        counts = client.job_count_by_state()
    assert seen == {"job_count_by_state_capped": 1}
    assert counts == {
        JobState.AVAILABLE: len(jobs.available),
        JobState.CANCELLED: 0,
        JobState.COMPLETED: MEDIA_COMPLETED + 1,
        JobState.DISCARDED: len(jobs.discarded),
        JobState.PENDING: 0,
        JobState.RETRYABLE: 0,
        JobState.RUNNING: 0,
        JobState.SCHEDULED: len(jobs.scheduled),
    }


def test_count_by_state_stops_one_past_the_cap(seeded_client: Any) -> None:
    client, _jobs = seeded_client
    counts = client.job_count_by_state(cap=10)
    assert counts[JobState.COMPLETED] == 11  # "more than 10"
    assert counts[JobState.DISCARDED] == 3
    for bad in (0, -1, True, "10", 2**31):
        with pytest.raises(InvalidInputError, match="cap"):
            client.job_count_by_state(cap=bad)


def test_count_by_queue(seeded_client: Any) -> None:
    client, jobs = seeded_client
    assert client.job_count_by_queue() == {
        "email": {JobState.AVAILABLE: len(jobs.available)},
        "default": {JobState.SCHEDULED: 1},
    }
    finalized = client.job_count_by_queue(states=["completed", JobState.DISCARDED])
    assert finalized == {
        "media": {JobState.COMPLETED: MEDIA_COMPLETED},
        "default": {JobState.COMPLETED: 1, JobState.DISCARDED: 3},
    }
    with pytest.raises(InvalidInputError, match="states"):
        client.job_count_by_queue(states=["finished"])


def test_throughput_per_minute(seeded_client: Any) -> None:
    client, _jobs = seeded_client
    now = datetime.now(UTC)
    minutes = client.job_throughput(minutes=5)
    assert sum(m.completed for m in minutes) == MEDIA_COMPLETED + 1
    assert sum(m.discarded for m in minutes) == 3
    for m in minutes:
        assert m.minute.tzinfo is not None and m.minute.second == 0
        assert now - timedelta(minutes=6) < m.minute <= now
    assert [m.minute for m in minutes] == sorted(m.minute for m in minutes)
    for bad in (0, 24 * 60 + 1, 1.5, None):
        with pytest.raises(InvalidInputError, match="minutes"):
            client.job_throughput(minutes=bad)


def test_leader_get(seeded_client: Any) -> None:
    client, _jobs = seeded_client
    assert client.leader_get() is None
    dialect = client.driver.dialect
    client.driver.fetch(dialect.leader_attempt_elect(leader_id="ui-test-client", ttl=30.0))
    leader = client.leader_get()
    assert leader is not None and leader.leader_id == "ui-test-client"
    assert leader.elected_at < leader.expires_at


async def test_async_client_has_them_too(sqlite_url: str) -> None:
    async with riverboat.AsyncClient(sqlite_url) as client:
        assert (await client.job_count_by_state())[JobState.AVAILABLE] == 0
        assert await client.job_count_by_queue() == {}
        assert await client.job_throughput() == []
        assert await client.leader_get() is None
