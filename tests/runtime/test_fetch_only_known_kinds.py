"""fetch_only_known_kinds (River 0.48's FetchOnlyKnownKinds): a client claims only the
kinds its workers take, aliases included, so clients with different workers share a
queue; on Postgres and SQLite."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import riverboat
from riverboat import ConcurrencyLimit, EventKind, Job, JobState, QueueConfig, Workers
from tests.runtime.dbs import Db, any_db  # noqa: F401


@pytest.mark.asyncio
async def test_only_known_kinds_are_claimed_and_the_rest_wait(any_db: Db) -> None:  # noqa: F811
    db = any_db
    mine = Workers()

    @mine.register("known_new", kind_aliases=["known_old"])
    async def known(job: Job[Any]) -> None:
        return None

    theirs = Workers()

    @theirs.register("foreign")
    async def foreign(job: Job[Any]) -> None:
        return None

    def client(workers: Workers) -> riverboat.AsyncClient:
        return riverboat.AsyncClient(
            db.url,
            schema=db.schema,
            queues={"default": QueueConfig(max_workers=1)},
            workers=workers,
            fetch_poll_interval=0.1,
            fetch_only_known_kinds=True,
        )

    async with riverboat.AsyncClient(db.url, schema=db.schema) as inserter:
        # The foreign job is the oldest, so a claim of any kind would take it first.
        other = (await inserter.insert({}, kind="foreign")).job

    async with client(mine) as first:
        old = (await first.insert({}, kind="known_old")).job
        new = (await first.insert({}, kind="known_new")).job
        sub = first.subscribe(EventKind.JOB_COMPLETED)
        await first.start()
        done: set[int] = set()
        async with asyncio.timeout(10):
            while done != {old.id, new.id}:
                event = await sub.get()
                assert event.job is not None
                done.add(event.job.id)
        waiting = await first.job_get(other.id)
        assert (waiting.state, waiting.attempt) == (JobState.AVAILABLE, 0)
        await first.stop()

    async with client(theirs) as second:
        await second.run_until_idle()
        assert (await second.job_get(other.id)).state is JobState.COMPLETED


def test_flow_controlled_queues_refuse_it(any_db: Db) -> None:  # noqa: F811
    # The flow-controlled claim has no kind filter: refused when the client is built,
    # rather than silently claiming every kind.
    with pytest.raises(riverboat.InvalidInputError) as info:
        riverboat.AsyncClient(
            any_db.url,
            schema=any_db.schema,
            queues={"default": QueueConfig(concurrency=ConcurrencyLimit(global_limit=1))},
            workers=Workers(),
            fetch_only_known_kinds=True,
        )
    assert info.value.field == "fetch_only_known_kinds"
