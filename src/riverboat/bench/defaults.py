"""Fast at default settings: a backlog of short jobs worked by a client with only
``max_workers`` set, against a raw-SQL claim loop at the same batch size.

The backlog is inserted with one ``INSERT ... SELECT generate_series`` so the insert
path is not part of the figure. Progress is read from a separate connection (whether
any job is left, every 20 ms), not from completion events: subscribing would make the
completer return and decode every finished row, a per-job cost the benchmark would then
count as riverboat's. Statements per job are the client driver's own count (claims,
completions, and whatever leadership and maintenance did meanwhile).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from riverboat.bench.floor import run_floor
from riverboat.bench.measure import CpuFigures, Figures, PostgresBench, fill_backlog
from riverboat.runtime.producer import QueueConfig
from riverboat.runtime.worker import Job, Workers

__all__ = ["DefaultsResult", "run_defaults"]


@dataclass(slots=True)
class DefaultsResult(Figures):
    max_workers: int
    jobs: int
    jobs_per_sec: float
    python_cpu_ms_per_job: float
    statements_per_job: float
    statements_per_job_target: float
    raw_loop_jobs_per_sec: float
    raw_loop_python_cpu_ms_per_job: float
    ratio_to_raw_loop: float


def _remaining_sql(schema: str) -> str:
    """Jobs of the backlog not finished yet (read once, at the end)."""
    return (
        f'SELECT count(*) FROM "{schema}".river_job'
        " WHERE state IN ('available', 'running') AND kind = 'benchmark'"
    )


def _first_in_state_sql(schema: str, state: str) -> str:
    # The claim's own order, so the planner walks river_job_prioritized_fetching_index
    # and stops at the first entry: a fraction of a millisecond with a million finalized
    # rows, where EXISTS or count(*) chose a sequential scan (8-165 ms of server CPU
    # every 20 ms, taken from the run being measured).
    return (
        f"(SELECT id FROM \"{schema}\".river_job WHERE state = '{state}'"
        " AND queue = 'default' ORDER BY priority, scheduled_at, id LIMIT 1)"
    )


def _any_left_sql(schema: str) -> str:
    """Whether any job of the backlog is still available or running."""
    return (
        f"SELECT {_first_in_state_sql(schema, 'available')} IS NOT NULL"
        f" OR {_first_in_state_sql(schema, 'running')} IS NOT NULL"
    )


async def _work_backlog(
    pg: PostgresBench,
    jobs: int,
    max_workers: int,
    max_seconds: float,
    workers: Workers | None = None,
    **client_options: Any,
) -> tuple[int, float, float, int]:
    """Work the backlog at defaults (only ``max_workers`` set, unless ``client_options``
    name more) with ``workers`` (an async no-op ``benchmark`` worker by default):
    (jobs done, wall s, CPU s, statements)."""
    import psycopg

    if workers is None:
        workers = Workers()

        @workers.register("benchmark")
        async def benchmark(job: Job[Any]) -> None:
            return None

    client = pg.make_client(
        queues={"default": QueueConfig(max_workers=max_workers)}, workers=workers, **client_options
    )
    driver = client.driver
    left_sql = _any_left_sql(pg.schema)
    try:
        async with await psycopg.AsyncConnection.connect(pg.url, autocommit=True) as conn:
            statements = driver.stats.statements
            cpu = time.process_time()
            wall = time.perf_counter()
            await client.start()
            deadline = wall + max_seconds
            while time.perf_counter() < deadline:
                await asyncio.sleep(0.02)
                row = await (await conn.execute(left_sql, prepare=True)).fetchone()
                if row is not None and not row[0]:
                    break
            wall = time.perf_counter() - wall
            cpu = time.process_time() - cpu
            statements = driver.stats.statements - statements
            await client.stop()
            row = await (await conn.execute(_remaining_sql(pg.schema))).fetchone()
            done = jobs - int(row[0]) if row else 0
    finally:
        await client.close()
    return done, wall, cpu, statements


async def _both_ways(
    pg: PostgresBench, jobs: int, max_workers: int, max_seconds: float
) -> tuple[CpuFigures, tuple[int, float, float, int]]:
    """The raw loop's best figures and riverboat's best run at ``max_workers``, over two
    rounds in opposite orders: whichever ran second would otherwise have the warmer
    process and server."""
    floors: list[CpuFigures] = []
    runs: list[tuple[int, float, float, int]] = []

    async def raw_loop() -> None:
        pg.progress(f"defaults: raw-SQL loop claiming {max_workers} at a time")
        await asyncio.to_thread(fill_backlog, pg.url, pg.schema, jobs)
        floors.append(
            await asyncio.to_thread(
                run_floor, pg.url, pg.schema, jobs, None, max_workers, fill=False
            )
        )

    async def by_riverboat() -> None:
        pg.progress(f"defaults: QueueConfig(max_workers={max_workers}), {jobs} jobs")
        await asyncio.to_thread(fill_backlog, pg.url, pg.schema, jobs)
        runs.append(await _work_backlog(pg, jobs, max_workers, max_seconds))

    for first, second in ((raw_loop, by_riverboat), (by_riverboat, raw_loop)):
        await first()
        await second()
    floor = max(floors, key=lambda figures: figures.jobs_per_sec)
    return floor, max(runs, key=lambda run: run[0] / run[1])


async def run_defaults(
    pg: PostgresBench,
    jobs: int,
    *,
    max_workers_list: tuple[int, ...] = (20, 100),
    max_seconds: float = 20.0,
) -> list[DefaultsResult]:
    results = []
    for max_workers in max_workers_list:
        floor, (done, wall, cpu, statements) = await _both_ways(pg, jobs, max_workers, max_seconds)
        done = max(done, 1)
        rate = done / wall
        results.append(
            DefaultsResult(
                max_workers=max_workers,
                jobs=done,
                jobs_per_sec=round(rate, 1),
                python_cpu_ms_per_job=round(cpu / done * 1000, 4),
                statements_per_job=round(statements / done, 4),
                statements_per_job_target=round(2 / max_workers + 0.01, 4),
                raw_loop_jobs_per_sec=floor.jobs_per_sec,
                raw_loop_python_cpu_ms_per_job=floor.python_cpu_ms_per_job,
                ratio_to_raw_loop=round(rate / floor.jobs_per_sec, 2),
            )
        )
    return results
