"""``run_until_idle()`` drains for real (issue #13.4), on Postgres and SQLite: a retry
due within the idle horizon is waited for and worked; one due later is left, and the
drain says what it left."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import riverboat
from riverboat import Job, JobRow, JobState, QueueConfig, RetryPolicy, Workers
from riverboat.runtime.runner import IDLE_HORIZON
from tests.waiting import wait_until_async


class RetryInOneSecond(RetryPolicy):
    def next_retry(self, job: JobRow, now: datetime) -> datetime:
        return now + timedelta(seconds=1)


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    return request.getfixturevalue("sqlite_url"), None


def _workers(ran: list[tuple[int, int]]) -> Workers:
    workers = Workers()

    @workers.register("flaky")
    def flaky(job: Job[Any]) -> None:
        if job.args.get("fail_first") and job.attempt == 1:
            raise RuntimeError("first attempt fails")
        ran.append((job.id, job.attempt))

    @workers.register("much_later", next_retry=lambda job: job.row.created_at + timedelta(hours=1))
    def much_later(job: Job[Any]) -> None:
        raise RuntimeError("retry me in an hour")

    return workers


def test_run_until_idle_waits_for_retries_due_soon(
    db: tuple[str, str | None], caplog: pytest.LogCaptureFixture
) -> None:
    url, schema = db
    ran: list[tuple[int, int]] = []
    client = riverboat.Client(
        url,
        schema=schema,
        queues={"default": QueueConfig(max_workers=5)},
        workers=_workers(ran),
        fetch_poll_interval=0.1,
        retry_policy=RetryInOneSecond(),
    )
    with client:
        flaky = [
            r.job.id
            for r in client.insert_many(
                [
                    riverboat.InsertManyParams({"fail_first": i % 2 == 0}, kind="flaky")
                    for i in range(20)
                ]
            )
        ]
        later = client.insert({}, kind="much_later").job.id
        caplog.set_level(logging.INFO, "riverboat")
        client.run_until_idle()
        rows = {j: client.job_get(j) for j in [*flaky, later]}
    assert sorted(job_id for job_id, _ in ran) == sorted(flaky)
    for i, job_id in enumerate(flaky):
        assert (rows[job_id].state, rows[job_id].attempt) == (
            JobState.COMPLETED,
            2 if i % 2 == 0 else 1,
        )
    assert (rows[later].state, rows[later].attempt) == (JobState.RETRYABLE, 1)
    assert f"nothing due within {IDLE_HORIZON:g}s; left for later: 1 retryable" in caplog.text


async def test_a_drain_check_beside_due_work_does_not_count_the_backlog(apg_driver: Any) -> None:
    # An idle client beside jobs due soon (here scheduled a second ahead; a backlog held
    # back by a flow limit looks the same) asks whether any job is due, and stops there:
    # the count of what is left, which reads every upcoming row, is for the final answer.
    client = riverboat.AsyncClient(
        apg_driver, queues={"default": QueueConfig(max_workers=5)}, workers=Workers()
    )
    soon = datetime.now().astimezone() + timedelta(seconds=IDLE_HORIZON / 2)
    await client.insert_many(
        [riverboat.InsertManyParams({}, riverboat.InsertOpts(scheduled_at=soon), kind="later")] * 50
    )
    await client.start()
    try:
        runtime = client.runtime
        await wait_until_async(runtime.is_idle, what="the client's first claim came back empty")
        before = dict(apg_driver.stats.by_query)
        assert not await runtime.drained()
        asked = {
            name: apg_driver.stats.by_query.get(name, 0) - before.get(name, 0)
            for name in ("job_due_exists", "job_count_upcoming")
        }
        assert asked == {"job_due_exists": 1, "job_count_upcoming": 0}
    finally:
        await client.stop()


async def test_run_until_idle_does_not_wait_out_the_poll_interval(
    db: tuple[str, str | None],
) -> None:
    # The last fetch found the final jobs, so nothing makes the producer fetch again
    # before its poll interval (ten minutes here); the drain wakes it instead once their
    # outcomes are written, and it finds the queue empty.
    url, schema = db
    ran: list[tuple[int, int]] = []
    client = riverboat.AsyncClient(
        url,
        schema=schema,
        queues={"default": QueueConfig(max_workers=5)},
        workers=_workers(ran),
        fetch_poll_interval=600,
    )
    async with client:
        await client.insert_many([riverboat.InsertManyParams({}, kind="flaky") for _ in range(3)])
        async with asyncio.timeout(60):  # a deadline for a hang, not a speed target
            await client.run_until_idle()
    assert len(ran) == 3


def test_a_job_scheduled_past_the_year_9999_does_not_stop_a_drain(
    pg_url: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A job scheduled at Postgres' ``infinity`` (another client wrote it) is left for
    later, and the drain says so: the first scheduled_at it reports is clamped as every
    timestamp read is (psycopg raised reading it, and the drain failed every time)."""
    with riverboat.Client(
        pg_url,
        schema=pg_schema,
        queues={"default": QueueConfig(max_workers=1)},
        workers=_workers([]),
        fetch_poll_interval=0.1,
    ) as client:
        when = riverboat.InsertOpts(scheduled_at=datetime(2100, 1, 1, tzinfo=UTC))
        far = client.insert({}, when, kind="flaky").job.id
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                f'UPDATE "{pg_schema}".river_job SET scheduled_at = %s WHERE id = %s',
                ("infinity", far),
            )
        caplog.set_level(logging.INFO, "riverboat")
        client.run_until_idle()
        assert client.job_get(far).state is JobState.SCHEDULED
    assert "left for later: 1 scheduled (next at 9999-" in caplog.text
