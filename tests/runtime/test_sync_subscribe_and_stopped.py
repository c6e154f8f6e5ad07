"""``subscribe()`` on the sync Client and ``stopped`` on both clients (River's
``Subscribe`` and ``Stopped()``), on Postgres and SQLite."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest

import riverboat
from riverboat import Event, EventKind, InvalidInputError, Job, JobCancel, QueueConfig, Workers
from tests.runtime.dbs import Db, any_db  # noqa: F401


def job_id(event: Event) -> int:
    assert event.job is not None
    return event.job.id


def _workers() -> Workers:
    workers = Workers()

    @workers.register("ok_job")
    def ok_job(job: Job[Any]) -> None:
        pass

    @workers.register("cancel_job")
    def cancel_job(job: Job[Any]) -> None:
        raise JobCancel("no")

    return workers


def test_sync_client_subscribe_and_stopped(any_db: Db) -> None:  # noqa: F811
    db = any_db
    client = riverboat.Client(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig()},
        workers=_workers(),
        fetch_poll_interval=0.1,
    )
    with client:
        completed = client.subscribe(EventKind.JOB_COMPLETED)
        everything = client.subscribe()
        ok = client.insert({}, kind="ok_job").job.id
        cancelled = client.insert({}, kind="cancel_job").job.id
        assert not client.stopped.is_set()
        client.start()
        event = completed.get(timeout=10)
        assert (event.kind, job_id(event)) == (EventKind.JOB_COMPLETED, ok)
        seen = {job_id(everything.get(timeout=10)) for _ in range(2)}
        assert seen == {ok, cancelled}
        completed.close()
        stopper = threading.Thread(target=client.stop)
        stopper.start()
        assert client.stopped.wait(10)
        stopper.join()
        # Closed subscriptions get nothing more; open ones survive a restart.
        again = client.insert({}, kind="ok_job").job.id
        client.run_until_idle()
        assert job_id(everything.get(timeout=10)) == again
        with pytest.raises(queue.Empty):
            completed.get_nowait()
        assert client.stopped.is_set()
    with riverboat.Client(db.url, schema=db.schema) as insert_only:
        with pytest.raises(InvalidInputError, match="insert-only"):
            insert_only.subscribe()


@pytest.mark.asyncio
async def test_async_client_stopped(any_db: Db) -> None:  # noqa: F811
    db = any_db
    client = riverboat.AsyncClient(
        db.url, schema=db.schema, queues={"default": QueueConfig()}, workers=_workers()
    )
    async with client:
        assert not client.stopped.is_set()
        await client.start()
        assert not client.stopped.is_set()
        await client.stop()
        await client.stopped.wait()
