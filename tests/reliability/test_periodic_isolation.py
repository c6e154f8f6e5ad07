"""Scenario 24 (issue #25): one bad periodic job does not stop the others.

A constructor returning dict args without a kind, and one asking for priority 9, used to
fail the leader's whole enqueue run, which then backed off for ever: a healthy 0.2 s job
ran 0 times. Each bad entry is now logged once per tick with its name and skipped; the
healthy one keeps its schedule (Postgres and SQLite).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import riverboat
from riverboat import Job, PeriodicJob, QueueConfig, Workers
from tests.runtime.dbs import Db, any_db  # noqa: F401


async def test_a_bad_periodic_job_is_skipped_and_the_others_run(
    any_db: Db,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = any_db
    ran = 0
    enough = asyncio.Event()
    workers = Workers()

    @workers.register("healthy")
    async def healthy(job: Job[Any]) -> None:
        nonlocal ran
        ran += 1
        if ran >= 5:
            enough.set()

    client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig()},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        maintenance=riverboat.MaintenanceConfig(start_jitter=0.0),
        periodic_jobs=[
            PeriodicJob(0.2, lambda: {"no": "kind"}, id="no_kind"),
            PeriodicJob(
                0.2,
                lambda: riverboat.InsertManyParams(
                    {}, kind="healthy", opts=riverboat.InsertOpts(priority=9)
                ),
                id="priority_nine",
            ),
            PeriodicJob(0.2, lambda: riverboat.InsertManyParams({}, kind="healthy"), id="ok"),
        ],
    )
    caplog.set_level(logging.INFO, "riverboat")
    async with client:
        await client.start()
        await asyncio.wait_for(enough.wait(), 20)
        await asyncio.wait_for(client.stop(), 10)
    lines = [r.getMessage() for r in caplog.records if r.name == "riverboat.maintenance"]
    no_kind = [line for line in lines if line.startswith("periodic job 'no_kind'")]
    nine = [line for line in lines if line.startswith("periodic job 'priority_nine'")]
    print(f"healthy ran {ran} times;", *no_kind[:1], *nine[:1], sep="\n  ")
    assert ran >= 5
    # Once per tick: each tick inserted one healthy job (unique per tick) after logging
    # the bad ones; a stop may land between the two.
    (inserted,) = db.execute("SELECT count(*) FROM river_job")[0]
    assert inserted <= len(no_kind) <= inserted + 1, (inserted, len(no_kind))
    assert inserted <= len(nine) <= inserted + 1, (inserted, len(nine))
    assert "kind" in no_kind[0] and "skipped" in no_kind[0]
    assert "priority" in nine[0]
    assert not any("Traceback" in line for line in no_kind + nine)
    assert not [r for r in caplog.records if r.name == "riverboat.maintenance" and r.exc_info]
    kinds = db.execute("SELECT kind, priority FROM river_job")
    assert kinds and all(kind == "healthy" and priority == 1 for kind, priority in kinds)
