"""The seed's extra scenarios: SQLite batch claiming, and the Postgres completion plan
with stale statistics."""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from typing import Any

from riverboat._insert import InsertDefaults, resolve_insert
from riverboat._job import JobState
from riverboat.dialect.base import JobStateUpdate
from riverboat.drivers.base import Driver

__all__ = ["sqlite_batch_claim", "stale_statistics_completion"]


def _insert(driver: Driver, count: int) -> None:
    defaults = InsertDefaults()
    dialect = driver.dialect
    for start in range(0, count, 5000):
        batch = [
            resolve_insert({"num": 0}, None, "benchmark", defaults)
            for _ in range(min(5000, count - start))
        ]
        driver.fetch(dialect.job_insert_many(batch, []))


def sqlite_missing() -> str | None:
    """Why the SQLite scenario can't run here (no SQLite 3.45+: the ``sqlite`` extra is
    not installed), or None when it can."""
    from riverboat.drivers._sqlite_module import sqlite_module
    from riverboat.errors import MissingDependencyError

    try:
        sqlite_module()
    except MissingDependencyError as exc:
        return f"skipped: {exc}"
    return None


def sqlite_batch_claim(jobs: int = 5000) -> dict[str, Any]:
    """µs per job to claim ``jobs`` jobs 50 at a time vs one at a time, on a WAL file."""
    from riverboat.drivers.sqlite import SqliteDriver

    out: dict[str, Any] = {"jobs": jobs}
    for batch in (50, 1):
        # TemporaryDirectory removes the file and its -wal/-shm whatever happens.
        with tempfile.TemporaryDirectory(prefix="riverboat-bench-sqlite-") as tmp:
            driver = SqliteDriver(f"sqlite:///{os.path.join(tmp, 'claim.sqlite3')}")
            try:
                out.update(_claim_in_batches(driver, jobs, batch))
            finally:
                driver.close()
    out["speedup"] = round(out["batch_1_us_per_job"] / out["batch_50_us_per_job"], 1)
    return out


def _claim_in_batches(driver: Driver, jobs: int, batch: int) -> dict[str, float]:
    from riverboat.migrations import Migrator

    Migrator(driver).up()
    _insert(driver, jobs)
    stmt = driver.dialect.job_get_available(queue="default", max_to_lock=batch, client_id="b")
    claimed = 0
    start = time.perf_counter()
    while claimed < jobs:
        rows = driver.fetch(stmt)
        if not rows:
            break
        claimed += len(rows)
    elapsed = time.perf_counter() - start
    return {
        f"batch_{batch}_us_per_job": round(elapsed / claimed * 1e6, 2),
        f"batch_{batch}_us_per_statement": round(elapsed / -(-claimed // batch) * 1e6, 1),
    }


def stale_statistics_completion(url: str, schema: str, rows: int = 100_000) -> dict[str, Any]:
    """A table of ``rows`` running jobs whose statistics say it is empty: µs per
    single-job completion and whether the plan stays on the primary key."""
    import psycopg

    from riverboat.drivers.psycopg import PsycopgDriver

    table = f'"{schema}".river_job'
    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        conn.execute(f"TRUNCATE {table}")
        conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        conn.execute(f"VACUUM ANALYZE {table}")  # statistics now say: empty
        conn.execute(
            f"INSERT INTO {table} (args, kind, max_attempts, queue, state, attempt, attempted_at)"
            " SELECT '{}', 'benchmark', 25, 'default', 'running', 1, now()"
            " FROM generate_series(1, %s)",
            (rows,),
        )
        stats = conn.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", (table,)
        ).fetchone()
        ids = [r[0] for r in conn.execute(f"SELECT id FROM {table} ORDER BY random() LIMIT 200")]
    driver = PsycopgDriver(url, schema=schema, max_pool_size=1)
    try:
        dialect = driver.dialect
        stmt = dialect.job_set_state_if_running_many(
            [JobStateUpdate(ids[0], JobState.COMPLETED, finalized=True)],
            returning=False,
            skip_locked=True,
        )
        sql, names = stmt.query.compile("dollar")
        with psycopg.connect(url, autocommit=True) as conn:
            cur = psycopg.RawCursor(conn)
            conn.execute("BEGIN")
            cur.execute("EXPLAIN (FORMAT JSON) " + sql, [stmt.params[n] for n in names])
            plan = cur.fetchone()[0]  # type: ignore[index]
            conn.execute("ROLLBACK")
        text = json.dumps(plan)
        samples = []
        for job_id in ids:
            one = dialect.job_set_state_if_running_many(
                [JobStateUpdate(job_id, JobState.COMPLETED, finalized=True)],
                returning=False,
                skip_locked=True,
            )
            start = time.perf_counter()
            driver.execute(one)
            samples.append((time.perf_counter() - start) * 1e6)
    finally:
        driver.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
            conn.execute(f"TRUNCATE {table}")
    return {
        "server_version": version[0] if version else None,
        "rows": rows,
        "reltuples_in_statistics": stats[0] if stats else None,
        "completion_median_us": round(statistics.median(samples), 1),
        "plan_uses_primary_key": "river_job_pkey" in text,
        "plan_has_seq_scan_on_river_job": "river_job" in _seq_scans(plan),
    }


def _seq_scans(node: Any) -> list[str]:
    """Relation names of every Seq Scan node in an EXPLAIN (FORMAT JSON) tree."""
    found: list[str] = []
    if isinstance(node, list):
        for item in node:
            found.extend(_seq_scans(item))
    elif isinstance(node, dict):
        if node.get("Node Type") == "Seq Scan":
            found.append(str(node.get("Relation Name")))
        for value in node.values():
            if isinstance(value, (list, dict)):
                found.extend(_seq_scans(value))
    return found
