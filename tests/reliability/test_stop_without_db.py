"""A stop whose database went away is still bounded (issue #13.2): the completer gives
up writing buffered outcomes after ``completer_drain_timeout`` (River's
DrainTimeoutDefault, 1 minute) and the jobs stay ``running`` for the rescuer. Postgres
only: the database is cut off by closing a TCP proxy in front of it."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg
import pytest

import riverboat
from riverboat.runtime.producer import QueueConfig
from riverboat.runtime.worker import Job, Workers
from tests.reliability._support import CuttingProxy, sql

pytestmark = pytest.mark.asyncio


async def test_stop_gives_up_unwritable_outcomes_after_the_drain_timeout(
    pg_url: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    proxy = CuttingProxy(str(info.get("host", "127.0.0.1")), int(info.get("port") or 5432)).start()
    user, dbname = info.get("user", "postgres"), info.get("dbname", "postgres")
    proxied = f"postgresql://{user}@127.0.0.1:{proxy.port}/{dbname}"
    worked = asyncio.Event()
    workers = Workers()

    @workers.register("quick")
    async def quick(job: Job[Any]) -> None:
        worked.set()

    with riverboat.Client(pg_url, schema=pg_schema) as inserter:
        job_id = inserter.insert({}, kind="quick").job.id
    client = riverboat.AsyncClient(
        proxied,
        schema=pg_schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    )
    config = client.runtime.config
    config.completer_flush_delay = 30.0  # the outcome stays buffered...
    config.completer_batch_threshold = 10_000
    config.completer_drain_timeout = 1.0
    caplog.set_level(logging.INFO, "riverboat")
    await client.start()
    try:
        await asyncio.wait_for(worked.wait(), 10)
        proxy.close()  # ...when the database becomes unreachable
        began = time.monotonic()
        await asyncio.wait_for(client.stop(), 30)
        took = time.monotonic() - began
    finally:
        await client.close()
    print(f"stop took {took:.2f}s with the database gone (drain timeout 1 s)")
    assert took < 10
    assert sql(pg_url, pg_schema, "SELECT state::text FROM river_job WHERE id = %s", job_id) == [
        ("running",)
    ]
    assert "shutdown drain incomplete after 1s: 1 job outcomes were not written" in caplog.text
