"""Inserts against their raw-SQL floors, in one run on one scratch schema.

- ``insert_many`` and ``insert_many_fast`` of ``jobs`` jobs in calls of 1,000, against a
  raw ``COPY river_job FROM STDIN`` of the same rows in the same call sizes through
  psycopg (its rows built with ``json.dumps`` of the same args, as a hand-written loader
  would).
- ``insert`` one job at a time, against a raw prepared ``INSERT ... RETURNING *`` of the
  same row through psycopg.

Each figure is the best of three interleaved rounds. The raw floors always use psycopg
(async, on its own autocommit connection); for the psycopg driver that is the same
library the client uses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from riverboat._job import InsertManyParams
from riverboat.bench.measure import Figures, PostgresBench

__all__ = ["InsertFigure", "run_inserts"]

CALL_SIZE = 1000
ROUNDS = 4


@dataclass(slots=True)
class InsertFigure(Figures):
    name: str
    jobs: int
    jobs_per_sec: float
    python_cpu_ms_per_job: float
    floor: str
    floor_jobs_per_sec: float
    floor_python_cpu_ms_per_job: float
    ratio_to_floor: float


async def _timed(jobs: int, body: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    cpu = time.process_time()
    wall = time.perf_counter()
    await body()
    return jobs / (time.perf_counter() - wall), (time.process_time() - cpu) / jobs * 1000


async def run_inserts(
    pg: PostgresBench, jobs: int, *, single_inserts: int = 1000
) -> list[InsertFigure]:
    url, schema, make_client, progress = pg.url, pg.schema, pg.make_client, pg.progress
    import psycopg

    table = f'"{schema}".river_job'
    calls = [
        [{"num": i} for i in range(start, min(start + CALL_SIZE, jobs))]
        for start in range(0, jobs, CALL_SIZE)
    ]
    client = make_client()
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:

        async def truncate() -> None:
            await conn.execute(f"TRUNCATE {table}")

        async def raw_copy() -> None:
            for call in calls:
                async with conn.cursor() as cur:
                    async with cur.copy(
                        f"COPY {table} (args, kind, max_attempts, metadata, priority, queue,"
                        " state, tags) FROM STDIN"
                    ) as copy:
                        for args in calls_args(call):
                            await copy.write_row(
                                (args, "benchmark", 25, "{}", 1, "default", "available", [])
                            )

        def calls_args(call: list[dict[str, int]]) -> list[str]:
            return [json.dumps(args) for args in call]

        def by_client(method: str) -> Callable[[], Awaitable[None]]:
            async def body() -> None:
                insert = getattr(client, method)
                for call in calls:
                    await insert([InsertManyParams(args, kind="benchmark") for args in call])

            return body

        figures: dict[str, tuple[float, float]] = {}

        async def measure(name: str, count: int, body: Callable[[], Awaitable[None]]) -> None:
            await truncate()
            rate, cpu = await _timed(count, body)
            best = figures.get(name)
            if best is None or rate > best[0]:
                figures[name] = (rate, cpu)

        raw_insert = (
            f"INSERT INTO {table} (args, kind, max_attempts, metadata, priority, queue, state,"
            " tags) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING *"
        )

        async def raw_single() -> None:
            for i in range(single_inserts):
                cur = await conn.execute(
                    raw_insert,
                    (json.dumps({"num": i}), "benchmark", 25, "{}", 1, "default", "available", []),
                    prepare=True,
                )
                await cur.fetchone()

        async def single() -> None:
            for i in range(single_inserts):
                await client.insert({"num": i}, kind="benchmark")

        # Interleaved rounds, best of each: the floor and riverboat see the same machine
        # (a shared VM's load moves single runs by tens of percent). The order flips
        # every round, so warming up favours neither side.
        for round_ in range(1, ROUNDS + 1):
            flip = -1 if round_ % 2 == 0 else 1
            progress(f"inserts: round {round_}/{ROUNDS}, {jobs} jobs in calls of {CALL_SIZE}")
            bulk = [
                ("raw_copy", raw_copy),
                ("insert_many", by_client("insert_many")),
                ("insert_many_fast", by_client("insert_many_fast")),
            ]
            for name, body in bulk[::flip]:
                await measure(name, jobs, body)
            progress(f"inserts: round {round_}/{ROUNDS}, {single_inserts} single inserts")
            for name, body in [("raw_insert_returning", raw_single), ("insert", single)][::flip]:
                await measure(name, single_inserts, body)
        await truncate()
    finally:
        await conn.close()
        await client.close()

    def figure(name: str, floor: str, count: int) -> InsertFigure:
        rate, cpu = figures[name]
        floor_rate, floor_cpu = figures[floor]
        return InsertFigure(
            name,
            count,
            round(rate, 1),
            round(cpu, 4),
            floor,
            round(floor_rate, 1),
            round(floor_cpu, 4),
            round(rate / floor_rate, 2),
        )

    return [
        figure("insert_many", "raw_copy", jobs),
        figure("insert_many_fast", "raw_copy", jobs),
        figure("insert", "raw_insert_returning", single_inserts),
    ]
