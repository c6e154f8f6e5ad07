"""Failures in user hooks and in the notifier are logged once, with the traceback and
the job id, and never stop the runtime (Postgres and SQLite where both apply)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

import pytest

import riverboat
from riverboat import Job, JobState, QueueConfig, RetryPolicy, Workers
from tests.waiting import wait_until_async


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    return request.getfixturevalue("sqlite_url"), None


class ChokingPolicy(RetryPolicy):
    def next_retry(self, job: Any, now: datetime) -> datetime:
        raise RuntimeError("policy bug")


async def test_failing_next_retry_is_logged_and_the_default_used(
    db: tuple[str, str | None], caplog: pytest.LogCaptureFixture
) -> None:
    url, schema = db
    workers = Workers()

    def worker_next_retry(job: Job[Any]) -> datetime:
        raise LookupError("worker hook bug")

    @workers.register("choke", next_retry=worker_next_retry)
    async def choke(job: Job[Any]) -> None:
        raise ValueError("job failed")

    client = riverboat.AsyncClient(
        url,
        schema=schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        retry_policy=ChokingPolicy(),
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    )
    job = (await client.insert({}, kind="choke")).job
    with caplog.at_level("WARNING", logger="riverboat"):
        await client.start()
        try:

            async def attempt_finished() -> bool:
                row = await client.job_get(job.id)
                return row.state != JobState.RUNNING and row.attempt > 0

            await wait_until_async(attempt_finished, timeout=10)
        finally:
            await client.stop()
    row = await client.job_get(job.id)
    await client.close()
    # Retried by River's default backoff (1 s ± 10 %: straight to available), not lost.
    assert row.state in (JobState.AVAILABLE, JobState.RETRYABLE) and row.attempt == 1
    hook = [r for r in caplog.records if "next_retry failed" in r.getMessage()]
    policy = [r for r in caplog.records if "retry policy failed" in r.getMessage()]
    assert len(hook) == 1 and f"job {job.id} (choke)" in hook[0].getMessage()
    assert len(policy) == 1 and f"job {job.id} (choke)" in policy[0].getMessage()
    assert hook[0].exc_info is not None and policy[0].exc_info is not None


async def test_a_failing_notification_handler_keeps_the_connection(
    db: tuple[str, str | None], caplog: pytest.LogCaptureFixture
) -> None:
    from riverboat._url import async_driver_from_url
    from riverboat.runtime.notifier import Notifier

    url, schema = db
    driver = async_driver_from_url(url, schema=schema)
    notifier = Notifier(driver, schema or "main")
    seen: list[dict[str, Any]] = []
    second = asyncio.Event()

    def broken(payload: dict[str, Any]) -> None:
        raise KeyError("handler bug")

    def record(payload: dict[str, Any]) -> None:
        seen.append(payload)
        if len(seen) == 2:
            second.set()

    def notify(n: int) -> Any:
        payload = json.dumps({"queue": f"q{n}"})
        if driver.dialect.name == "postgres":
            channel = notifier.channel("river_insert")
            return driver.dialect.stmt("pg_notify", channel=channel, payload=payload)
        return driver.dialect.notification_insert_many([("river_insert", payload)])

    notifier.subscribe("river_insert", broken)
    notifier.subscribe("river_insert", record)
    notifier.start()
    try:
        await asyncio.wait_for(notifier.connected.wait(), 10)
        with caplog.at_level("WARNING", logger="riverboat"):
            for n in (1, 2):
                await driver.fetch(notify(n))
            await asyncio.wait_for(second.wait(), 10)
        # Both notifications reached the handler after the broken one, on one connection.
        assert [p["queue"] for p in seen] == ["q1", "q2"]
        assert notifier.reconnects == 0
        failures = [
            r for r in caplog.records if "a handler for river_insert failed" in r.getMessage()
        ]
        assert len(failures) == 2 and all(r.exc_info is not None for r in failures)
    finally:
        await notifier.stop()
        await driver.close()
