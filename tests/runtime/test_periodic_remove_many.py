"""``periodic_jobs.remove_many`` / ``remove_many_by_id`` (River's ``RemoveMany`` and
``RemoveManyByID``), and ``leader_request_resign_tx`` (River's ``RequestResignTx``), on
Postgres and SQLite."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import riverboat
from riverboat import InvalidInputError, PeriodicJob
from tests.leadership._helpers import elector_of, fast_maintenance, wait_any_leader
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.waiting import wait_until_async


def _job(id: str) -> PeriodicJob:
    return PeriodicJob(
        timedelta(hours=1), lambda: riverboat.InsertManyParams({}, kind="nightly"), id=f"job_{id}"
    )


def test_remove_many_and_by_id(sqlite_url: str) -> None:
    with riverboat.Client(
        sqlite_url, queues={"default": riverboat.QueueConfig()}, workers=riverboat.Workers()
    ) as client:
        jobs = client.periodic_jobs
        handles = jobs.add_many([_job("a"), _job("b"), _job("c"), _job("d")])
        jobs.remove_many([*handles[:2], 999])  # an unknown handle is ignored, as remove's
        assert sorted(j.id or "" for j in jobs.snapshot().values()) == ["job_c", "job_d"]
        jobs.remove_many_by_id(["job_d", "missing"])
        assert [j.id for j in jobs.snapshot().values()] == ["job_c"]
        with pytest.raises(InvalidInputError, match="must be a list"):
            jobs.remove_many_by_id("job_c")  # not a list of one-letter ids
        assert len(jobs) == 1


@pytest.mark.asyncio
async def test_request_resign_tx_goes_out_on_commit(any_db: Db) -> None:  # noqa: F811
    db = any_db
    leader_client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        id="node1",
        queues={"default": riverboat.QueueConfig()},
        workers=riverboat.Workers(),
        maintenance=fast_maintenance(),
    )
    await leader_client.start()
    try:
        leader = await wait_any_leader([leader_client], 10)
        # A request sent before the leader LISTENs is lost (as River's is): under load
        # the notifier's connection came up after the commit and the test timed out.
        assert leader.runtime.notifier is not None
        await asyncio.wait_for(leader.runtime.notifier.connected.wait(), 10)
        before = elector_of(leader).stats.resignations

        def request_in_transactions() -> None:
            with riverboat.Client(db.url, schema=db.schema) as admin, db.connect() as conn:
                admin.leader_request_resign_tx(conn)
                conn.rollback()  # never sent
                admin.leader_request_resign_tx(conn)
                conn.commit()

        # In a thread: the leader's loop must keep running to hear it.
        await asyncio.to_thread(request_in_transactions)
        await wait_until_async(lambda: elector_of(leader).stats.resignations > before, timeout=10)
        assert elector_of(leader).stats.resignations == before + 1
    finally:
        await leader_client.stop()
        await leader_client.close()


@pytest.mark.asyncio
async def test_leadership_gained_is_observable_from_attach(any_db: Db) -> None:  # noqa: F811
    """What river-go.md offers for River's HookPeriodicJobsStart: ``attach(runtime)``
    registers ``runtime.elector.on_change``, called with True when leadership comes."""
    gained = asyncio.Event()

    class LeaderWatch:
        def attach(self, runtime: Any) -> None:
            runtime.elector.on_change(lambda leading: gained.set() if leading else None)

    client = riverboat.AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={"default": riverboat.QueueConfig()},
        workers=riverboat.Workers(),
        middleware=[LeaderWatch()],
        maintenance=fast_maintenance(),
    )
    await client.start()
    try:
        await asyncio.wait_for(gained.wait(), 10)
    finally:
        await client.stop()
        await client.close()


def test_removing_by_an_id_that_is_not_text_is_refused(sqlite_url: str) -> None:
    """None matched every job added without an id: ``remove_by_id(None)`` (a stray
    ``dict.get``) removed them all and said it had found one."""
    with riverboat.Client(
        sqlite_url, queues={"default": riverboat.QueueConfig()}, workers=riverboat.Workers()
    ) as client:
        jobs = client.periodic_jobs
        anonymous = [
            PeriodicJob(timedelta(hours=1), lambda: riverboat.InsertManyParams({}, kind="k"))
            for _ in range(2)
        ]
        jobs.add_many(anonymous)
        stray: Any = None
        with pytest.raises(InvalidInputError, match="str"):
            jobs.remove_by_id(stray)
        with pytest.raises(InvalidInputError, match="str"):
            jobs.remove_many_by_id([stray])
        assert len(jobs) == 2
