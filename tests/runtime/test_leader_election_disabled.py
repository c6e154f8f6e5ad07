"""leader_election=False (River 0.48's LeaderElectionDisabled): a client that works jobs
but never runs for leader, beside one that leads; on Postgres and SQLite."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import riverboat
from riverboat import EventKind, Job, QueueConfig, Workers
from tests.runtime.dbs import Db, any_db  # noqa: F401


def _noop_workers(kind: str) -> Workers:
    workers = Workers()

    @workers.register(kind)
    async def noop(job: Job[Any]) -> None:
        return None

    return workers


def _client(db: Db, workers: Workers, id: str, **options: Any) -> riverboat.AsyncClient:
    return riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        id=id,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_poll_interval=0.1,
        **options,
    )


@pytest.mark.asyncio
async def test_a_client_without_leader_election_works_jobs_and_never_leads(
    any_db: Db,  # noqa: F811
) -> None:
    db = any_db
    workers = _noop_workers("plain")

    def client(id: str, **options: Any) -> riverboat.AsyncClient:
        return _client(db, workers, id, **options)

    follower = client("no_election", leader_election=False)
    async with follower:
        sub = follower.subscribe(EventKind.JOB_COMPLETED)
        await follower.start()
        assert follower.runtime.elector is None and follower.runtime.maintainer is None
        job = (await follower.insert({}, kind="plain")).job
        async with asyncio.timeout(10):
            event = await sub.get()
        assert event.job is not None and event.job.id == job.id
        leader = client("elected")
        async with leader:
            await leader.start()
            elector = leader.runtime.elector
            assert elector is not None
            await asyncio.wait_for(elector.leader.wait(), 10)
            rows = db.execute("SELECT leader_id FROM river_leader")
            assert [row[0] for row in rows] == ["elected"]
            await leader.stop()
        await follower.stop()


@pytest.mark.asyncio
async def test_a_periodic_job_added_on_a_client_without_election_reaches_the_leader(
    any_db: Db,  # noqa: F811
) -> None:
    """Only clients that ran for leader declared their periodic jobs: one added at runtime
    on a client with leader_election=False (a web process) never ran."""
    workers = _noop_workers("ping")
    leader = _client(any_db, workers, "leader")
    web = _client(any_db, workers, "web", leader_election=False)
    async with leader, web:
        sub = leader.subscribe(EventKind.JOB_COMPLETED)
        await leader.start()
        await web.start()
        web.periodic_jobs.add(
            riverboat.PeriodicJob(
                "* * * * * *", lambda: riverboat.InsertManyParams({}, kind="ping"), id="ping"
            )
        )
        async with asyncio.timeout(30):
            event = await sub.get()
        assert event.job is not None and event.job.kind == "ping"
        assert [row.id for row in await leader.periodic_job_list()] == ["ping"]
        await web.stop()
        await leader.stop()
