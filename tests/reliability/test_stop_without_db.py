"""A stop whose database went away is still bounded (issue #13.2): the completer gives
up writing buffered outcomes after ``completer_drain_timeout`` (River's
DrainTimeoutDefault, 1 minute) or when the stop's budget (soft_stop_timeout +
STOP_GRACE) runs out, and the jobs stay ``running`` for the rescuer. On Postgres the
database is cut off by closing a TCP proxy in front of it; on SQLite the worker process
is made unable to write files, as with a full disk."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import riverboat
from riverboat import Job, QueueConfig, Workers
from riverboat.runtime.runner import STOP_GRACE
from tests.reliability._support import (
    CuttingProxy,
    OutputReader,
    counts_by_state,
    executions,
    insert_jobs,
    running_ids,
    spawn_worker,
    sql,
    stop_process,
)
from tests.waiting import wait_until


@pytest.mark.asyncio
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


def test_sigterm_while_sqlite_refuses_writes_is_bounded(sqlite_url: str, tmp_path: Path) -> None:
    """Issue #25.9: SIGTERM while the SQLite file can't be written (the disk is full)
    took the completer's whole 60 s drain. It now ends within soft_stop_timeout +
    STOP_GRACE, naming how many outcomes it could not write; those jobs stay
    ``running`` and the next worker on the file rescues them (docs/reliability.md)."""
    jobs = 40
    soft_stop = 1.5
    ids = insert_jobs(sqlite_url, None, "rel_work", [{"sleep": 0.3} for _ in range(jobs)])
    first_out = tmp_path / "first"
    first_out.mkdir()
    proc = spawn_worker(
        first_out,
        sqlite_url,
        None,
        "--soft-stop-timeout",
        str(soft_stop),
        RB_MAX_WORKERS="10",
        RB_DISK_FULL_ON_USR1="1",
    )
    reader = OutputReader(proc)
    try:
        reader.wait_for(lambda line: "started: queues" in line, timeout=30)
        wait_until(
            lambda: counts_by_state(sqlite_url, None).get("completed", 0) >= 10,
            timeout=30,
            what="some jobs completed before the disk filled up",
        )
        proc.send_signal(signal.SIGUSR1)
        reader.wait_for(lambda line: "disk I/O error" in line, timeout=10)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        code = proc.wait(soft_stop + STOP_GRACE + 15)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        reader.join()
    left_running = running_ids(sqlite_url, None)
    print(
        f"SIGTERM with writes refused: exit {code} after {took:.2f}s; "
        f"{len(left_running)} left running"
    )
    assert code == 0, reader.text()
    assert "not written" in reader.text(), reader.text()

    # What happens to them: the next worker on the file (its leader's rescuer, here
    # after 2 s instead of River's hour) makes them available again and they complete.
    second_out = tmp_path / "second"
    second_out.mkdir()
    second = spawn_worker(second_out, sqlite_url, None, RB_RESCUE_AFTER="2")
    second_reader = OutputReader(second)
    try:
        wait_until(
            lambda: counts_by_state(sqlite_url, None) == {"completed": jobs},
            timeout=30,
            poll=0.2,
            what="every job completed by the next worker",
        )
    finally:
        stop_process(second)
        second_reader.join()
    counts = executions(first_out) + executions(second_out)
    assert set(counts) == set(ids)
    assert {job for job, n in counts.items() if n > 1} <= left_running
