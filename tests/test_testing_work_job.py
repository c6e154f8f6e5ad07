"""``work_job`` inserts and works in one call, runs the client's middleware (or the one
given), and has an async form ``work_job_async``; on Postgres and SQLite."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

import riverboat
from riverboat import EventKind, InsertOpts, Job, JobCancel, Workers
from riverboat.middleware import InsertingJob
from riverboat.testing import work_job, work_job_async
from tests.runtime.dbs import Db, any_db  # noqa: F401


@dataclass
class Invoice:
    kind: ClassVar[str] = "invoice"
    number: int


class Trace:
    def __init__(self) -> None:
        self.log: list[str] = []

    def insert_begin(self, job: InsertingJob) -> None:
        job.metadata["traced"] = True

    async def work(self, job: Job[Any], call_next: Callable[[], Awaitable[None]]) -> None:
        self.log.append(f"before {job.kind}")
        await call_next()
        self.log.append(f"after {job.kind}")


def _workers() -> Workers:
    workers = Workers()

    @workers.register(Invoice)
    def invoice(job: Job[Invoice]) -> None:
        job.set_metadata("number_seen", job.args.number)
        if job.args.number < 0:
            raise JobCancel("negative")

    return workers


def test_work_job_inserts_and_runs_the_clients_middleware(any_db: Db) -> None:  # noqa: F811
    db = any_db
    trace = Trace()
    with riverboat.Client(db.url, schema=db.schema, middleware=[trace]) as client:
        result = work_job(client, _workers(), Invoice(7), opts=InsertOpts(queue="billing"))
        assert result.outcome is EventKind.JOB_COMPLETED
        assert result.job.queue == "billing" and result.job.attempt == 1
        assert result.job.metadata == {"traced": True, "number_seen": 7}
        assert trace.log == ["before invoice", "after invoice"]
        cancelled = work_job(client, _workers(), Invoice(-1), middleware=[])
        assert cancelled.outcome is EventKind.JOB_CANCELLED
        assert "traced" not in cancelled.job.metadata  # middleware=[]: none of the client's
        assert trace.log == ["before invoice", "after invoice"]


@pytest.mark.asyncio
async def test_work_job_async(any_db: Db) -> None:  # noqa: F811
    db = any_db
    trace = Trace()
    async with riverboat.AsyncClient(db.url, schema=db.schema) as client:
        result = await work_job_async(client, _workers(), Invoice(3), middleware=[trace])
        assert result.outcome is EventKind.JOB_COMPLETED
        assert result.job.metadata == {"traced": True, "number_seen": 3}
        inserted = (await client.insert(Invoice(4))).job
        again = await work_job_async(client, _workers(), inserted.id)
        assert again.job.id == inserted.id and again.job.state == "completed"
        with pytest.raises(TypeError, match="AsyncClient"):
            await work_job_async(object(), _workers(), 1)


def test_a_misspelt_option_is_a_type_error_before_anything_is_inserted(
    any_db: Db,  # noqa: F811
) -> None:
    db = any_db
    with riverboat.Client(db.url, schema=db.schema) as client:
        with pytest.raises(TypeError, match="unexpected keyword argument 'job_timout'"):
            work_job(client, _workers(), Invoice(8), job_timout=5)  # type: ignore[call-arg]
        assert client.job_list().jobs == []
