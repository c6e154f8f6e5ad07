"""Scenario 4 (long): a big table. ``RIVERBOAT_BACKLOG`` available jobs plus as many
completed ones (default 1,000,000 each; ``./scripts/test --long``).

* The claim and completion statements use indexes (EXPLAIN shows no sequential scan of
  river_job), so their cost is O(batch), not O(table);
* working the same 20,000 jobs costs at most 1.5x per job what it costs on a table
  holding only those jobs;
* the cleaner deletes every completed job past its retention, back to the bound.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import riverboat
from riverboat import Job, MaintenanceConfig, QueueConfig, RetryPolicy, Workers
from riverboat.dialect.base import JobStateUpdate
from riverboat.drivers.psycopg import AsyncPsycopgDriver
from riverboat.runtime.maintenance import MaintenanceContext
from riverboat.runtime.maintenance.cleaner import JobCleaner
from tests.reliability._support import sql
from tests.templates import create_migrated_schema, drop_schema

SIZE = int(os.environ.get("RIVERBOAT_BACKLOG", "1000000"))
WORKED = 20_000


def _fill(url: str, schema: str, available: int, completed: int, kind: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        if completed:
            conn.execute(
                "INSERT INTO river_job (kind, args, state, attempt, attempted_at, finalized_at,"
                " scheduled_at, created_at) SELECT 'old', '{}', 'completed', 1,"
                " now() - interval '2 days', now() - interval '2 days',"
                " now() - interval '2 days', now() - interval '2 days'"
                " FROM generate_series(1, %s)",
                (completed,),
            )
        if available:
            # A real backlog: available now, in the same queue, behind the timed jobs only
            # by priority (River orders claims by priority, scheduled_at, id). Future work
            # is River's `scheduled` state, never `available` with a far scheduled_at.
            conn.execute(
                "INSERT INTO river_job (kind, args, state, priority)"
                " SELECT 'later', '{}', 'available', 2"
                " FROM generate_series(1, %s)",
                (available,),
            )
        conn.execute(
            "INSERT INTO river_job (kind, args, state) SELECT %s, '{}', 'available'"
            " FROM generate_series(1, %s)",
            (kind, WORKED),
        )
        conn.execute("ANALYZE river_job")


def _explain(url: str, schema: str, stmt: Any) -> str:
    query, names = stmt.query.compile("dollar")
    with psycopg.connect(url, autocommit=True) as conn:
        cur = psycopg.RawCursor(conn)
        cur.execute("EXPLAIN (FORMAT JSON) " + query, [stmt.params[n] for n in names])
        row = cur.fetchone()
        assert row is not None
        return json.dumps(row[0])


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    out = [node]
    for child in node.get("Plans", []):
        out.extend(_nodes(child))
    return out


async def _work(url: str, schema: str) -> float:
    """Seconds to work the WORKED priority-1 jobs (the clock stops at the last one's
    completion event; backlog jobs claimed meanwhile are worked too, not timed)."""
    workers = Workers()
    done = asyncio.Event()
    worked = 0

    @workers.register("now")
    async def now(job: Job[Any]) -> None:
        return None

    @workers.register("later")
    async def later(job: Job[Any]) -> None:
        return None

    client = riverboat.AsyncClient(
        url,
        schema=schema,
        queues={"default": QueueConfig(max_workers=100)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.2,
        # The timed run measures claims and completions; this client's own cleaner would
        # otherwise delete the old completed rows during it (the test runs one below).
        maintenance=MaintenanceConfig(completed_job_retention=None),
    )
    sub = client.subscribe(riverboat.EventKind.JOB_COMPLETED, maxsize=WORKED * 2)

    async def count() -> None:
        nonlocal worked
        async for event in sub:
            if event.job is not None and event.job.kind == "now":
                worked += 1
                if worked == WORKED:
                    done.set()
                    return

    counter = asyncio.create_task(count())
    started = time.monotonic()
    await client.start()
    await asyncio.wait_for(done.wait(), 600)
    elapsed = time.monotonic() - started
    await client.stop()
    counter.cancel()
    await client.close()
    left = sql(
        url, schema, "SELECT count(*) FROM river_job WHERE kind = 'now' AND state <> 'completed'"
    )
    assert left == [(0,)]
    return elapsed


@pytest.mark.long
@pytest.mark.timeout(3600)
async def test_big_backlog(pg_url: str) -> None:
    big, small = create_migrated_schema(pg_url), create_migrated_schema(pg_url)
    try:
        t0 = time.monotonic()
        await asyncio.to_thread(_fill, pg_url, big, SIZE, SIZE, "now")
        await asyncio.to_thread(_fill, pg_url, small, 0, 0, "now")
        fill = time.monotonic() - t0
        dialect = AsyncPsycopgDriver(pg_url, schema=big).dialect
        claim = _explain(
            pg_url, big, dialect.job_get_available(queue="default", max_to_lock=100, client_id="x")
        )
        ids = [
            r[0] for r in sql(pg_url, big, "SELECT id FROM river_job WHERE kind='now' LIMIT 100")
        ]
        complete = _explain(
            pg_url,
            big,
            dialect.job_set_state_if_running_many(
                [JobStateUpdate(i, riverboat.JobState.COMPLETED, finalized=True) for i in ids]
            ),
        )
        for plan in (claim, complete):
            scans = [
                node
                for node in _nodes(json.loads(plan)[0]["Plan"])
                if node.get("Relation Name") == "river_job"
            ]
            assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), plan
        empty_s = await _work(pg_url, small)
        big_s = await _work(pg_url, big)
        ratio = big_s / empty_s
        # The cleaner, completed retention 1 day: the 2-day-old rows go.
        async_driver = AsyncPsycopgDriver(pg_url, schema=big)
        ctx = MaintenanceContext(
            driver=async_driver,
            client_id="cleaner",
            config=MaintenanceConfig(start_jitter=0, batch_pause_min=0, batch_pause_max=0),
            workers=Workers(),
            retry_policy=RetryPolicy(),
            job_timeout=None,
        )
        t1 = time.monotonic()
        cleaner = JobCleaner(ctx)
        stop = asyncio.Event()
        cleaner._stop = stop
        await cleaner.run_once()
        clean_s = time.monotonic() - t1
        await async_driver.close()
        horizon = datetime.now(UTC) - timedelta(days=1)
        (over,) = sql(
            pg_url,
            big,
            "SELECT count(*) FROM river_job WHERE state = 'completed' AND finalized_at < %s",
            horizon,
        )[0]
        print(
            f"backlog {SIZE:,} available + {SIZE:,} completed (filled in {fill:.0f}s); "
            f"{WORKED:,} jobs: {empty_s:.2f}s on an empty table "
            f"({empty_s / WORKED * 1e6:.0f} us/job), {big_s:.2f}s on the big one "
            f"({big_s / WORKED * 1e6:.0f} us/job), ratio {ratio:.2f}; cleaner deleted "
            f"{cleaner.deleted:,} in {clean_s:.1f}s, {over} left past retention"
        )
        assert ratio <= 1.5
        assert cleaner.deleted == SIZE and over == 0
    finally:
        for schema in (big, small):
            drop_schema(pg_url, schema)
