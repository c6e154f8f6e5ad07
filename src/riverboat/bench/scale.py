"""Scaling: ``riverboat worker --processes 1`` vs ``2`` on the same backlog, and jobs/s
with many finalized rows in ``river_job`` vs an empty table.

Both use a client with only ``max_workers`` set (100) and no-op jobs. Progress is read
from a separate connection every 20 ms by probes of the fetch index. For the worker
processes, the clock starts at the first claimed job (process start-up and imports
are not the queue's speed) and stops when none is left; the workers run with
``--exit-when-idle``.
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import time
from typing import Any

from riverboat.bench.defaults import _any_left_sql, _first_in_state_sql, _remaining_sql
from riverboat.bench.measure import PostgresBench, fill_backlog
from riverboat.flow import ConcurrencyLimit
from riverboat.runtime.producer import QueueConfig
from riverboat.runtime.worker import Job, Workers

__all__ = ["finalized_rows", "processes", "worker_client"]

SCALE_ROUNDS = 3

MAX_WORKERS = 100
_URL_ENV = "RIVERBOAT_BENCH_URL"
_SCHEMA_ENV = "RIVERBOAT_BENCH_SCHEMA"
MAX_WORKERS_ENV = "RIVERBOAT_BENCH_MAX_WORKERS"
GLOBAL_LIMIT_ENV = "RIVERBOAT_BENCH_GLOBAL_LIMIT"


def worker_client() -> Any:
    """The factory ``riverboat worker riverboat.bench.scale:worker_client`` runs."""
    import riverboat
    from riverboat.drivers.psycopg import AsyncPsycopgDriver

    workers = Workers()

    @workers.register("benchmark")
    async def benchmark(job: Job[Any]) -> None:
        return None

    driver = AsyncPsycopgDriver(os.environ[_URL_ENV], schema=os.environ[_SCHEMA_ENV])
    # The flow part (riverboat.bench.flow) runs the same workers with fewer slots and,
    # in one of its runs, a global concurrency limit.
    limit = os.environ.get(GLOBAL_LIMIT_ENV)
    queue = QueueConfig(
        max_workers=int(os.environ.get(MAX_WORKERS_ENV, MAX_WORKERS)),
        concurrency=ConcurrencyLimit(global_limit=int(limit)) if limit else None,
    )
    return riverboat.AsyncClient(driver, queues={"default": queue}, workers=workers)


def processes(
    pg: PostgresBench,
    jobs: int,
    counts: tuple[int, ...] = (1, 2),
    worker_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Jobs/s of ``riverboat worker --processes N`` for each N in ``counts``
    (``worker_env``: extra settings for the workers, see :func:`worker_client`)."""
    url, schema, progress = pg.url, pg.schema, pg.progress
    import psycopg

    out: dict[str, Any] = {"jobs": jobs, "max_workers": MAX_WORKERS}
    left_sql = _any_left_sql(schema)
    started_sql = (
        f"SELECT {_first_in_state_sql(schema, 'running')} IS NOT NULL"
        f" OR {_first_in_state_sql(schema, 'completed')} IS NOT NULL"
    )
    env = _worker_env(pg, worker_env)
    for count in counts:
        progress(f"scale: riverboat worker --processes {count}, {jobs} jobs")
        fill_backlog(url, schema, jobs, checkpoint=True)
        command = _worker_command(count)
        cpu_before = _children_cpu()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                first_at = None
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    time.sleep(0.02)
                    if first_at is None:
                        row = conn.execute(started_sql, prepare=True).fetchone()
                        if row is not None and row[0]:
                            first_at = time.perf_counter()
                        continue
                    row = conn.execute(left_sql, prepare=True).fetchone()
                    if row is not None and not row[0]:
                        break
                last_at = time.perf_counter()
                row = conn.execute(_remaining_sql(schema)).fetchone()
                done = jobs - int(row[0]) if row else 0
        finally:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait()
        # The worker processes' CPU seconds, start-up and imports included (idle_cpu
        # measures those alone).
        out[f"processes_{count}_cpu_seconds"] = _children_cpu() - cpu_before
        out[f"processes_{count}_jobs_done"] = done
        rate = None
        if first_at is not None and last_at > first_at:
            # From the first claimed job (at most one batch of 100 done by then).
            rate = round(done / (last_at - first_at), 1)
        out[f"processes_{count}_jobs_per_sec"] = rate
    first, last = out.get("processes_1_jobs_per_sec"), out.get("processes_2_jobs_per_sec")
    if first and last:
        out["speedup"] = round(last / first, 2)
    return out


def idle_cpu(pg: PostgresBench, count: int, worker_env: dict[str, str] | None = None) -> float:
    """CPU seconds of ``riverboat worker --processes count --exit-when-idle`` on an
    empty queue: start-up, imports and shutdown, to subtract from a run's CPU."""
    fill_backlog(pg.url, pg.schema, 0, analyze=False)
    cpu_before = _children_cpu()
    subprocess.run(
        _worker_command(count),
        env=_worker_env(pg, worker_env),
        stdout=subprocess.DEVNULL,
        timeout=120,
        check=True,
    )
    return _children_cpu() - cpu_before


def _worker_env(pg: PostgresBench, worker_env: dict[str, str] | None) -> dict[str, str]:
    return {**os.environ, _URL_ENV: pg.url, _SCHEMA_ENV: pg.schema, **(worker_env or {})}


def _worker_command(count: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "riverboat.cli",
        "worker",
        "riverboat.bench.scale:worker_client",
        "--processes",
        str(count),
        "--exit-when-idle",
        "--log-level",
        "WARNING",
    ]


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's children that have been waited for
    (a ``riverboat worker`` and the processes it waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def finalized_rows(
    pg: PostgresBench, jobs: int, finalized: int = 1_000_000
) -> dict[str, Any]:
    from riverboat.bench.defaults import _work_backlog

    out: dict[str, Any] = {"jobs": jobs, "finalized_rows": finalized}
    # Interleaved rounds, best of each (as the insert figures): one working phase is a
    # couple of seconds, and single runs on the 2-core VM moved the ratio between 0.82
    # and 1.00 with nothing changed.
    for round_ in range(1, SCALE_ROUNDS + 1):
        for label, rows in (("empty", 0), ("finalized", finalized)):
            pg.progress(
                f"scale: round {round_}/{SCALE_ROUNDS}, {jobs} jobs with {rows} finalized"
                " rows in river_job"
            )
            await asyncio.to_thread(
                fill_backlog, pg.url, pg.schema, jobs, finalized=rows, checkpoint=True
            )
            done, wall, _cpu, _statements = await _work_backlog(pg, jobs, MAX_WORKERS, 120.0)
            key = f"{label}_jobs_per_sec"
            out[key] = max(out.get(key, 0.0), round(done / wall, 1))
    await asyncio.to_thread(fill_backlog, pg.url, pg.schema, 0, checkpoint=True)
    out["ratio"] = round(out["finalized_jobs_per_sec"] / out["empty_jobs_per_sec"], 2)
    return out
