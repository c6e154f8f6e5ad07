"""``riverboat periodic``: the stored last and next run of each durable periodic job, as
a table and as JSON, and ``forget``; a real leader wrote them. Postgres and SQLite."""

from __future__ import annotations

import asyncio
import json
import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import riverboat
from riverboat import MaintenanceConfig, PeriodicJob, QueueConfig, Workers
from riverboat.testing import use_test_config
from tests.runtime.dbs import Db, any_db  # noqa: F401  (the fixture)
from tests.waiting import wait_until_async

WORKERS = Workers()


@WORKERS.register("report")
async def report(job: Any) -> None:
    return None


async def _cli(db: Db, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(db.cli, "periodic", *args)


@pytest.mark.asyncio
async def test_list_and_forget(any_db: Db) -> None:  # noqa: F811
    empty = await _cli(any_db)
    assert empty.returncode == 0, empty.stderr
    assert "no durable periodic job stored" in empty.stdout
    client = riverboat.AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(max_workers=1)},
        workers=WORKERS,
        maintenance=MaintenanceConfig(start_jitter=0.0),
        periodic_jobs=[
            PeriodicJob(
                "CRON_TZ=Europe/Paris 0 9 * * *",
                lambda: riverboat.InsertManyParams({}, kind="report"),
                id="morning_report",
                catch_up="one",
            )
        ],
    )
    # The leader's clock, fixed at half past an hour about half a day ahead: its 09:00 tick
    # is at least 30 minutes after that, so never run during the test, and the CLI (on the
    # real clock) always shows it ahead. On the real clock a test started just before 09:00
    # in Paris stored a last run, or listed the next one as "ago".
    ahead = (datetime.now(UTC) + timedelta(hours=12)).replace(minute=30, second=0, microsecond=0)
    use_test_config(client, clock=lambda: ahead)
    async with client:
        await client.start()

        async def stored_by_the_leader() -> list[Any]:
            records = await client.periodic_job_list()
            return records if records and records[0].next_run_at is not None else []

        stored = await wait_until_async(stored_by_the_leader, timeout=10)
        await client.stop()
    assert [r.id for r in stored] == ["morning_report"]

    table = await _cli(any_db, "list")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split()[:4] == ["ID", "SCHEDULE", "CATCH", "UP"]
    assert row.startswith("morning_report  CRON_TZ=Europe/Paris 0 9 * * *  one ")
    assert "(in " in row  # the next run, relative to now
    assert row.endswith("defined")  # by a client's own code, not added at runtime

    listed = json.loads((await _cli(any_db, "--json")).stdout)
    assert listed[0]["id"] == "morning_report" and listed[0]["last_run_at"] is None
    assert listed[0]["next_run_at"] == stored[0].next_run_at.isoformat()

    forgot = await _cli(any_db, "forget", "morning_report", "nothing_here")
    assert forgot.returncode == 1
    assert forgot.stdout.splitlines() == [
        "forgot 1 periodic job(s): morning_report",
        "not stored: nothing_here",
    ]
    assert "no durable periodic job stored" in (await _cli(any_db)).stdout
