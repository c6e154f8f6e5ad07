"""Periodic runs pass through the client's insert hooks (and the args type's own), like
any insert: an OpenTelemetry-style hook sees them; on Postgres and SQLite."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

import riverboat
from riverboat import NEVER, Job, PeriodicJob, QueueConfig, Workers
from riverboat.middleware import InsertingJob, insert_hook
from tests.runtime.dbs import Db, any_db  # noqa: F401


@dataclass
class Report:
    kind: ClassVar[str] = "nightly_report"
    insert_middleware: ClassVar[list[Any]] = [
        insert_hook(lambda job: job.metadata.update(own_hook=True))
    ]
    day: int


def propagate(job: InsertingJob) -> None:
    job.metadata["traceparent"] = f"00-{job.kind}-{job.metadata.get('periodic')}"


@pytest.mark.asyncio
async def test_periodic_runs_go_through_insert_hooks(any_db: Db) -> None:  # noqa: F811
    db = any_db
    seen: list[dict[str, Any]] = []
    worked = asyncio.Event()
    workers = Workers()

    @workers.register(Report)
    async def report(job: Job[Report]) -> None:
        seen.append(dict(job.metadata))
        worked.set()

    client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig()},
        workers=workers,
        middleware=[insert_hook(propagate)],
        periodic_jobs=[
            # NEVER: only the run on start (an hourly tick could come with it at :00)
            PeriodicJob(NEVER, lambda: Report(1), run_on_start=True, id="nightly")
        ],
        fetch_poll_interval=0.1,
        maintenance=riverboat.MaintenanceConfig(start_jitter=0.0),  # no start stagger
    )
    async with client:
        await client.start()
        await asyncio.wait_for(worked.wait(), 20)
    assert seen == [
        {
            "periodic": True,
            "river:periodic_job_id": "nightly",
            "own_hook": True,
            "traceparent": "00-nightly_report-True",
        }
    ]
