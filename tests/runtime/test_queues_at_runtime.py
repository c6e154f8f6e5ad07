"""Queues added and removed on a client (River's ``Queues().Add`` / ``Remove``); a
removed queue finishes its running jobs first. On Postgres and SQLite."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import riverboat
from riverboat import (
    EventKind,
    InsertOpts,
    InvalidInputError,
    Job,
    JobState,
    NotFoundError,
    QueueConfig,
    Workers,
)
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.runtime.helpers import wait_for


@pytest.mark.asyncio
async def test_add_and_remove_queues_on_a_running_client(any_db: Db) -> None:  # noqa: F811
    db = any_db
    started = asyncio.Event()
    release = asyncio.Event()
    workers = Workers()

    @workers.register("report")
    async def report(job: Job[Any]) -> None:
        if job.args.get("slow"):
            started.set()
            await release.wait()

    client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig()},
        workers=workers,
        fetch_poll_interval=0.1,
    )
    async with client:
        sub = client.subscribe(EventKind.JOB_COMPLETED)
        await client.start()
        first = (await client.insert({}, InsertOpts(queue="reports"), kind="report")).job.id
        await client.queue_add("reports", QueueConfig(max_workers=2))
        await wait_for([EventKind.JOB_COMPLETED], sub, first)

        slow = (await client.insert({"slow": True}, InsertOpts(queue="reports"), kind="report")).job
        await asyncio.wait_for(started.wait(), 10)
        removing = asyncio.create_task(client.queue_remove("reports"))
        await asyncio.sleep(0)  # the removal is under way, waiting for the running job
        assert not removing.done()
        release.set()
        await asyncio.wait_for(removing, 10)
        await wait_for([EventKind.JOB_COMPLETED], sub, slow.id)
        assert (await client.job_get(slow.id)).state is JobState.COMPLETED

        later = (await client.insert({}, InsertOpts(queue="reports"), kind="report")).job.id
        with pytest.raises(InvalidInputError, match="already worked"):
            await client.queue_add("default", QueueConfig())
        with pytest.raises(NotFoundError):
            await client.queue_remove("reports")
        await client.stop()
        assert (await client.job_get(later)).state is JobState.AVAILABLE  # not worked


def test_sync_client_queue_changes_before_start_and_while_running(any_db: Db) -> None:  # noqa: F811
    db = any_db
    workers = Workers()

    @workers.register("mail")
    def mail(job: Job[Any]) -> None:
        pass

    client = riverboat.Client(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig()},
        workers=workers,
        fetch_poll_interval=0.1,
    )
    with client:
        queued = client.insert({}, InsertOpts(queue="outbox"), kind="mail").job.id
        client.queue_add("outbox", QueueConfig())
        with pytest.raises(InvalidInputError, match="already worked"):
            client.queue_add("outbox", QueueConfig())
        with pytest.raises(InvalidInputError, match="QueueConfig"):
            client.queue_add("other", {"max_workers": 1})  # type: ignore[arg-type]
        client.run_until_idle()
        assert client.job_get(queued).state is JobState.COMPLETED
        client.start()
        client.queue_remove("outbox")
        client.queue_add("outbox2", QueueConfig())
        client.stop()
        with pytest.raises(NotFoundError):
            client.queue_remove("outbox")
        left = client.insert({}, InsertOpts(queue="outbox"), kind="mail").job.id
        taken = client.insert({}, InsertOpts(queue="outbox2"), kind="mail").job.id
        client.run_until_idle()  # the changes last across restarts
        assert client.job_get(left).state is JobState.AVAILABLE
        assert client.job_get(taken).state is JobState.COMPLETED
    with riverboat.Client(db.url, schema=db.schema) as insert_only:
        with pytest.raises(InvalidInputError, match="insert-only"):
            insert_only.queue_add("x1", QueueConfig())
