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


_BAD_QUEUE_CONFIGS = [
    ("config.max_workers", QueueConfig(max_workers=0)),
    ("config.max_workers", QueueConfig(max_workers=10_001)),
    ("config.fetch_cooldown", QueueConfig(fetch_cooldown=float("nan"))),
    ("config.executor", QueueConfig(executor="fork")),
]


@pytest.mark.asyncio
@pytest.mark.parametrize("running", [False, True], ids=["stopped", "running"])
async def test_queue_add_checks_the_settings_as_the_clients_own_queues(
    any_db: Db,  # noqa: F811
    running: bool,
) -> None:
    """queue_add refuses what the client refuses in its own queues, naming the field,
    and nothing is added. It checked only the name and the type: max_workers=0 made a
    producer that never claimed (running) or failed the next start (stopped)."""
    db = any_db
    workers = Workers()

    @workers.register("mail")
    def mail(job: Job[Any]) -> None:
        pass

    options: dict[str, Any] = {"queues": {"default": QueueConfig()}, "workers": workers}
    sync = riverboat.Client(db.url, schema=db.schema, **options)
    async_client = riverboat.AsyncClient(db.url, schema=db.schema, **options)
    try:
        if running:
            sync.start()
            await async_client.start()
        for field, config in _BAD_QUEUE_CONFIGS:
            with pytest.raises(InvalidInputError) as sync_error:
                sync.queue_add("extra", config)
            with pytest.raises(InvalidInputError) as async_error:
                await async_client.queue_add("extra", config)
            assert sync_error.value.field == async_error.value.field == field
        # Nothing was added: the name is still free, for a valid config.
        sync.queue_add("extra", QueueConfig(max_workers=2))
        await async_client.queue_add("extra", QueueConfig(max_workers=2))
    finally:
        sync.close()
        await async_client.stop()
        await async_client.close()
