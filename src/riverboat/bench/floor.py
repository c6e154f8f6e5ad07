"""The raw-SQL floor: the same end-to-end work with hand-written batched SQL through
psycopg and no riverboat code, so riverboat's overhead shows as a ratio to what the
work itself costs.

One loop claims ``batch`` jobs (50) with River's locking shape (``FOR UPDATE SKIP LOCKED`` in a CTE,
``UPDATE ... RETURNING``) and completes the batch with one ``UPDATE`` over ``unnest``,
both prepared, on one autocommit connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from riverboat.bench.measure import CpuFigures, fill_backlog

__all__ = ["FloorResult", "run_floor"]

FloorResult = CpuFigures


def run_floor(
    url: str,
    schema: str,
    jobs: int,
    server_cpu: Callable[[], float] | None,
    batch: int = 50,
    *,
    fill: bool = True,
) -> FloorResult:
    import psycopg

    table = f'"{schema}".river_job'
    if fill:
        fill_backlog(url, schema, jobs, analyze=False)
    with psycopg.connect(url, autocommit=True) as conn:
        claim = f"""
            WITH locked AS (
                SELECT id FROM {table}
                WHERE state = 'available' AND queue = 'default' AND scheduled_at <= now()
                ORDER BY priority, scheduled_at, id
                LIMIT {int(batch)} FOR UPDATE SKIP LOCKED)
            UPDATE {table} j SET state = 'running', attempt = j.attempt + 1,
                   attempted_at = now(), attempted_by = array_append(j.attempted_by, 'floor')
            FROM locked WHERE j.id = locked.id
            RETURNING j.id, j.args, j.kind, j.attempt"""
        complete = f"""
            UPDATE {table} j SET state = 'completed', finalized_at = now()
            FROM unnest(%s::bigint[]) AS done(id)
            WHERE j.id = done.id AND j.state = 'running'"""
        statements = 0
        cpu = time.process_time()
        wall = time.perf_counter()
        server = server_cpu() if server_cpu else None
        worked = 0
        while worked < jobs:
            rows = conn.execute(claim, prepare=True).fetchall()
            statements += 1
            if not rows:
                break
            conn.execute(complete, ([r[0] for r in rows],), prepare=True)
            statements += 1
            worked += len(rows)
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
        server_used = server_cpu() - server if server_cpu and server is not None else None
    return CpuFigures.measured(jobs, wall, cpu, server_used, statements)
