"""A per-job timeout on class-based workers (River's ``Worker.Timeout(job)``), on
Postgres and SQLite."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest

import riverboat
from riverboat import InvalidInputError, Job, JobState, QueueConfig, Worker, Workers
from riverboat.runtime.worker import call_timeout_fn
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.runtime.test_outcome_rules import row


class Report(Worker[dict[str, Any]]):
    kind = "report"

    def timeout(self, job: Job[dict[str, Any]]) -> float | None:  # type: ignore[override]
        if job.args.get("broken"):
            raise RuntimeError("timeout() has a bug")
        limit: float | None = job.args.get("limit")
        return limit

    async def work(self, job: Job[dict[str, Any]]) -> None:
        await asyncio.sleep(job.args["sleep"])

    def next_retry(self, job: Job[dict[str, Any]]) -> datetime | None:
        return job.row.created_at + timedelta(hours=1)


def test_timeout_method_is_asked_per_job(any_db: Db) -> None:  # noqa: F811
    db = any_db
    workers = Workers()
    workers.add(Report())
    short_default = riverboat.Client(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig()},
        workers=workers,
        job_timeout=30,
        fetch_poll_interval=0.1,
    )
    with short_default as client:
        cut = client.insert({"sleep": 30, "limit": 0.2}, kind="report").job.id
        fine = client.insert({"sleep": 0.01, "limit": 5}, kind="report").job.id
        default = client.insert({"sleep": 0.01}, kind="report").job.id
        broken = client.insert({"sleep": 0.01, "broken": True}, kind="report").job.id
        client.run_until_idle()
        rows = {j: client.job_get(j) for j in (cut, fine, default, broken)}
    assert rows[cut].state is JobState.RETRYABLE
    assert rows[cut].errors[-1].error == "JobTimeoutError: job exceeded its timeout of 0.2s"
    for job_id in (fine, default, broken):  # a failing timeout() falls back to the default
        assert rows[job_id].state is JobState.COMPLETED


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_timeout_must_be_a_finite_number_of_seconds(value: float) -> None:
    """Registered, refused at once; answered by timeout(job), logged and replaced by the
    client's default (infinity reached the rescuer's datetime arithmetic)."""
    with pytest.raises(InvalidInputError, match="timeout"):
        Workers().register("fixed_timeout", timeout=value)(lambda job: None)
    workers = Workers()
    workers.add(Report())
    registered = workers.get("report")
    assert registered is not None
    row_job = Job(row(), {"limit": value})
    assert call_timeout_fn(registered, row_job) is None


def test_the_timeout_counts_from_the_jobs_start(any_db: Db) -> None:  # noqa: F811
    """Two jobs claimed together: the first blocks the event loop (a sync call in an async
    body) past the second's timeout. The second's timeout counts from its own start, as
    River's from Work's call; counted from the claim, it was cancelled at its first
    await and used an attempt without having had its time."""
    workers = Workers()

    @workers.register("blocks_the_loop")
    async def blocks_the_loop(job: Job[dict[str, Any]]) -> None:
        import time

        time.sleep(0.6)  # the loop is blocked: nothing else starts meanwhile

    @workers.register("waits_a_little")
    async def waits_a_little(job: Job[dict[str, Any]]) -> None:
        await asyncio.sleep(0.05)

    with riverboat.Client(any_db.url, schema=any_db.schema) as admin:
        admin.insert({}, kind="blocks_the_loop")
        second = admin.insert({}, kind="waits_a_little").job.id
    client = riverboat.Client(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        job_timeout=0.3,
    )
    with client:
        client.run_until_idle()
        done = client.job_get(second)
    assert (done.state, done.attempt, done.errors) == (JobState.COMPLETED, 1, [])
