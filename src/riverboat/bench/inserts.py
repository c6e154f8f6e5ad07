"""Inserts against their raw-SQL floors, in one run on one scratch schema.

- ``insert_many`` and ``insert_many_fast`` of ``jobs`` jobs in calls of 1,000, against a
  raw ``COPY river_job FROM STDIN`` of the same rows in the same call sizes through
  psycopg (its rows built with ``json.dumps`` of the same args, as a hand-written loader
  would).
- ``insert`` one job at a time, against a raw prepared ``INSERT ... RETURNING *`` of the
  same row through psycopg.

- When pgqueuer is installed (``pip install pgqueuer``; not a riverboat dependency),
  ``insert_many`` against pgqueuer's bulk ``enqueue`` (lists of the same 1,000 payloads,
  JSON-encoded) and ``insert`` against its single ``enqueue``, on pgqueuer's own tables
  in a scratch schema of their own (``inserts_vs_pgqueuer`` in the report).

Each figure is the best of four interleaved rounds. The raw floors always use psycopg
(async, on its own autocommit connection); for the psycopg driver that is the same
library the client uses.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from riverboat._job import InsertManyParams
from riverboat.bench.measure import Figures, PostgresBench

__all__ = ["InsertFigure", "pgqueuer_missing", "run_inserts"]

CALL_SIZE = 1000
ROUNDS = 4


@dataclass(slots=True)
class InsertFigure(Figures):
    """One insert path's rate and client CPU per job, beside the same rows written by
    its raw-SQL floor (``floor``) and the ratio of the two."""

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


def pgqueuer_missing() -> str | None:
    """Why pgqueuer can't be compared (None: it can)."""
    try:
        import pgqueuer.queries  # noqa: F401
    except ImportError:
        return "pgqueuer is not installed (pip install pgqueuer)"
    return None


@asynccontextmanager
async def _pgqueuer(url: str) -> AsyncIterator[Any]:
    """pgqueuer's Queries over its own autocommit connection, its tables installed in a
    scratch schema dropped afterwards."""
    import psycopg
    from pgqueuer.queries import Queries

    schema = f"pgqueuer_bench_{secrets.token_hex(6)}"
    admin = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        await admin.execute(f'CREATE SCHEMA "{schema}"')
        conn = await psycopg.AsyncConnection.connect(
            url, autocommit=True, options=f"-c search_path={schema}"
        )
        try:
            queries = Queries.from_psycopg_connection(conn)
            await queries.install()
            yield queries
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()


async def run_inserts(
    pg: PostgresBench, jobs: int, *, single_inserts: int = 1000
) -> tuple[list[InsertFigure], list[InsertFigure] | None]:
    """Riverboat's inserts against raw psycopg, and against pgqueuer's (None when
    pgqueuer is not installed)."""
    if pgqueuer_missing() is None:
        async with _pgqueuer(pg.url) as pgq:
            return await _run_inserts(pg, jobs, single_inserts, pgq)
    return await _run_inserts(pg, jobs, single_inserts, None)


async def _run_inserts(
    pg: PostgresBench, jobs: int, single_inserts: int, pgq: Any
) -> tuple[list[InsertFigure], list[InsertFigure] | None]:
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
            # Each run starts on an empty table: pgqueuer's own for its runs.
            await (pgq_truncate() if name.startswith("pgqueuer") else truncate())
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

        async def pgq_bulk() -> None:
            for call in calls:
                await pgq.enqueue(
                    ["benchmark"] * len(call),
                    [json.dumps(args).encode() for args in call],
                    [0] * len(call),
                )

        async def pgq_single() -> None:
            for i in range(single_inserts):
                await pgq.enqueue("benchmark", json.dumps({"num": i}).encode())

        async def pgq_truncate() -> None:
            await pgq.clear_queue()

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
            if pgq is not None:
                bulk.append(("pgqueuer_enqueue_many", pgq_bulk))
            for name, body in bulk[::flip]:
                await measure(name, jobs, body)
            progress(f"inserts: round {round_}/{ROUNDS}, {single_inserts} single inserts")
            singles = [("raw_insert_returning", raw_single), ("insert", single)]
            if pgq is not None:
                singles.append(("pgqueuer_enqueue", pgq_single))
            for name, body in singles[::flip]:
                await measure(name, single_inserts, body)
        await truncate()
        if pgq is not None:
            await pgq_truncate()
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

    raw = [
        figure("insert_many", "raw_copy", jobs),
        figure("insert_many_fast", "raw_copy", jobs),
        figure("insert", "raw_insert_returning", single_inserts),
    ]
    if pgq is None:
        return raw, None
    return raw, [
        figure("insert_many", "pgqueuer_enqueue_many", jobs),
        figure("insert_many_fast", "pgqueuer_enqueue_many", jobs),
        figure("insert", "pgqueuer_enqueue", single_inserts),
    ]
