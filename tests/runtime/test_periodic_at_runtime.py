"""Periodic jobs added and removed on a running client (River's ``PeriodicJobs()``),
custom schedule objects and the never schedule; on Postgres and SQLite."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import riverboat
from riverboat import (
    NEVER,
    EventKind,
    InvalidInputError,
    Job,
    PeriodicJob,
    PeriodicJobs,
    QueueConfig,
    Workers,
)
from tests.runtime.dbs import Db, any_db  # noqa: F401


class EveryTenthOfASecond:
    """A custom schedule: anything with next(after)."""

    def next(self, after: datetime) -> datetime:
        return after + timedelta(milliseconds=100)


@pytest.mark.asyncio
async def test_periodic_jobs_change_on_a_running_leader(any_db: Db) -> None:  # noqa: F811
    db = any_db
    counts: dict[str, int] = {}
    changed = asyncio.Event()
    workers = Workers()

    @workers.register("beat")
    async def beat(job: Job[Any]) -> None:
        counts[job.args["name"]] = counts.get(job.args["name"], 0) + 1
        changed.set()

    client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig()},
        workers=workers,
        fetch_poll_interval=0.1,
        maintenance=riverboat.MaintenanceConfig(start_jitter=0.0),
    )

    async def until(predicate: Any) -> None:
        async with asyncio.timeout(20):
            while not predicate():
                changed.clear()
                await changed.wait()

    async with client:
        sub = client.subscribe(EventKind.JOB_COMPLETED)
        await client.start()
        # Added after start, never on a schedule, run on start: inserted at once.
        handle = client.periodic_jobs.add(
            PeriodicJob(
                NEVER,
                lambda: riverboat.InsertManyParams({"name": "once"}, kind="beat"),
                run_on_start=True,
            )
        )
        await until(lambda: counts.get("once") == 1)
        client.periodic_jobs.add_many(
            [
                PeriodicJob(
                    EveryTenthOfASecond(),
                    lambda: riverboat.InsertManyParams({"name": "fast"}, kind="beat"),
                    id="fast",
                )
            ]
        )
        await until(lambda: counts.get("fast", 0) >= 3)
        assert client.periodic_jobs.remove_by_id("fast")
        assert not client.periodic_jobs.remove_by_id("fast")
        client.periodic_jobs.remove(handle)
        assert len(client.periodic_jobs) == 0
        settled = counts.get("fast", 0)
        await client.stop()
        sub.close()
    # After removal at most the run already due was inserted and worked.
    assert counts["fast"] <= settled + 1
    assert counts["once"] == 1


def test_bundle_rules() -> None:
    jobs = PeriodicJobs([PeriodicJob(60, lambda: None, id="a1")])
    with pytest.raises(InvalidInputError, match="duplicate periodic job id"):
        jobs.add(PeriodicJob(30, lambda: None, id="a1"))
    with pytest.raises(InvalidInputError, match="PeriodicJob"):
        jobs.add_many([object()])  # type: ignore[list-item]
    handles = jobs.add_many([PeriodicJob(5, lambda: None), PeriodicJob(NEVER, lambda: None)])
    assert len(jobs) == 3 and handles == [2, 3]
    jobs.clear()
    assert len(jobs) == 0
    with pytest.raises(InvalidInputError, match="next"):
        PeriodicJob(object(), lambda: None)
    now = datetime.now(UTC)
    assert PeriodicJob(NEVER, lambda: None).next_after(now) is None
    assert PeriodicJob(EveryTenthOfASecond(), lambda: None).next_after(now) == now + timedelta(
        milliseconds=100
    )

    class Naive:
        def next(self, after: datetime) -> datetime:
            return datetime(2030, 1, 1)

    with pytest.raises(InvalidInputError, match="aware"):
        PeriodicJob(Naive(), lambda: None).next_after(now)


def test_sync_client_periodic_jobs_persist_across_restarts(any_db: Db) -> None:  # noqa: F811
    db = any_db
    ran: list[int] = []
    workers = Workers()

    @workers.register("nightly")
    def nightly(job: Job[Any]) -> None:
        ran.append(job.id)

    with riverboat.Client(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig()},
        workers=workers,
        maintenance=riverboat.MaintenanceConfig(start_jitter=0.0),
    ) as client:
        client.periodic_jobs.add(
            PeriodicJob(
                NEVER, lambda: riverboat.InsertManyParams({}, kind="nightly"), run_on_start=True
            )
        )
        with riverboat.Client(db.url, schema=db.schema) as insert_only:
            with pytest.raises(InvalidInputError, match="insert-only"):
                insert_only.periodic_jobs  # noqa: B018
        sub = client.subscribe(EventKind.JOB_COMPLETED)
        client.start()
        sub.get(timeout=20)
        client.stop()
        assert len(client.periodic_jobs) == 1
    assert len(ran) == 1
