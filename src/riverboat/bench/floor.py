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
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["FloorResult", "run_floor"]


@dataclass(slots=True)
class FloorResult:
    jobs: int
    jobs_per_sec: float
    python_cpu_ms_per_job: float
    postgres_cpu_ms_per_job: float | None
    total_cpu_ms_per_job: float | None
    statements_per_job: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    with psycopg.connect(url, autocommit=True) as conn:
        if fill:
            conn.execute(f"TRUNCATE {table}")
            conn.execute(
                f"INSERT INTO {table} (args, kind, max_attempts, queue, state) "
                "SELECT '{\"num\": 0}', 'benchmark', 25, 'default', 'available' "
                "FROM generate_series(1, %s)",
                (jobs,),
            )
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
    py = cpu / jobs * 1000
    pg = server_used / jobs * 1000 if server_used is not None else None
    return FloorResult(
        jobs,
        round(jobs / wall, 1),
        round(py, 4),
        round(pg, 4) if pg is not None else None,
        round(py + pg, 4) if pg is not None else None,
        round(statements / jobs, 4),
    )
