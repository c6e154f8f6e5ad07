"""A whole-queue limit on Postgres when the connection is cut in the middle of claims:
a claim that fails may have committed jobs this process never saw, so the process stops
counting itself by its record of jobs in flight (dialect/postgres_flow.py) and is
counted by its rows from then on; every job still completes, and the table's record
never shows more running than the limit."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg
import pytest

import riverboat
from riverboat import ConcurrencyLimit, Job, MaintenanceConfig, QueueConfig, Workers
from tests.reliability._support import CuttingProxy, counts_by_state, insert_jobs, sql
from tests.reliability._worker_app import FAST_ELECTOR
from tests.waiting import wait_until_async

JOBS = 300
LIMIT = 3


async def test_a_process_whose_claim_was_cut_is_counted_by_its_rows(
    pg_url: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="riverboat")
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    proxy = CuttingProxy(str(info.get("host", "127.0.0.1")), int(info.get("port") or 5432)).start()
    user, dbname = info.get("user", "postgres"), info.get("dbname", "postgres")
    proxied = f"postgresql://{user}@127.0.0.1:{proxy.port}/{dbname}"
    await asyncio.to_thread(insert_jobs, pg_url, pg_schema, "flow_cut", [{}] * JOBS)
    workers = Workers()

    @workers.register("flow_cut")
    async def flow_cut(job: Job[Any]) -> None:
        await asyncio.sleep(0.002)

    client = riverboat.AsyncClient(
        proxied,
        schema=pg_schema,
        queues={
            "default": QueueConfig(max_workers=5, concurrency=ConcurrencyLimit(global_limit=LIMIT))
        },
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        job_timeout=1.0,
        # Jobs whose claim committed without a reply are running with no one to run
        # them: the rescuer hands them back after a few seconds.
        maintenance=MaintenanceConfig(
            elector=FAST_ELECTOR,
            start_jitter=0.0,
            rescuer_interval=0.3,
            rescue_stuck_jobs_after=3.0,
        ),
    )
    producer: Any = None
    try:
        await client.start()
        producer = client.runtime.producers["default"]
        deadline = time.monotonic() + 20
        while producer.fetch_errors == 0 and time.monotonic() < deadline:
            await asyncio.to_thread(proxy.cut)
            await asyncio.sleep(0.02)
        assert producer.fetch_errors > 0, "no claim was cut"

        async def all_completed() -> bool:
            counts = await asyncio.to_thread(counts_by_state, pg_url, pg_schema)
            return counts.get("completed", 0) == JOBS

        await wait_until_async(all_completed, timeout=60, what="every job completed")
    finally:
        await client.stop()
        await client.close()
        proxy.close()
    assert "counted from the table from now on" in caplog.text
    # Its record went with its first claim after the cut; none was written since.
    records = await asyncio.to_thread(
        sql, pg_url, pg_schema, "SELECT count(*) FROM riverboat_flow_client"
    )
    assert records == [(0,)]
    overlap = await asyncio.to_thread(
        sql,
        pg_url,
        pg_schema,
        """SELECT max((SELECT count(*) FROM river_job o
                       WHERE o.attempted_at <= j.attempted_at
                         AND o.finalized_at > j.attempted_at))
           FROM river_job j""",
    )
    assert overlap[0][0] <= LIMIT
