"""Cost of the SQLite claim path per row: the claim statement and decode_job.

    .venv/bin/python scripts/bench_sqlite_claim_decode.py [--rows 20000] [--batch 100]

Prints, in µs per row: ``parse_timestamp`` on River's own text (the fast path) and on
Go's ``Time.String()`` form, ``decode_job`` of a claimed row, and a whole claim
(``job_get_available`` of ``--batch`` rows, run on a real SQLite file until the queue
is empty) with and without decoding. Times are CPU time of this process (SQLite runs
in it), so other load on the machine disturbs them less. Run it on two commits to
compare (``PYTHONPATH=<other checkout>/src``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import timeit
from pathlib import Path

from riverboat.dialect._sqlite_common import parse_timestamp
from riverboat.dialect.sqlite import SqliteDialect
from riverboat.drivers.sqlite import SqliteDriver
from riverboat.migrations import Migrator


def per_call_us(stmt: str, namespace: dict[str, object], number: int = 200_000) -> float:
    best = min(
        timeit.repeat(stmt, globals=namespace, number=number, repeat=5, timer=time.process_time)
    )
    return best / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    opts = parser.parse_args()

    ns: dict[str, object] = {"p": parse_timestamp, "own": "2026-12-02 16:57:15.092"}
    print(f"parse_timestamp River text   {per_call_us('p(own)', ns):6.2f} µs")
    go = "2026-12-02 16:57:15.092202 +0000 UTC m=+0.001300"
    ns["go"] = go
    try:
        print(f"parse_timestamp Go String()  {per_call_us('p(go)', ns):6.2f} µs")
    except ValueError:
        print("parse_timestamp Go String()     n/a (not readable)")

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.sqlite3'}"
        driver = SqliteDriver(url)
        Migrator(driver).up()
        dialect = SqliteDialect()
        driver.execute_script(
            f"""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {opts.rows})
            INSERT INTO river_job (args, kind, max_attempts, metadata, queue, scheduled_at,
                                   state, tags, created_at)
            SELECT jsonb('{{"customer_id": 12345, "note": "hello"}}'), 'bench', 25,
                   jsonb('{{}}'), 'default', datetime('now', 'subsec', '-1 minute'),
                   'available', jsonb('[]'), datetime('now', 'subsec')
            FROM n
            """
        )
        sample = driver.fetch(dialect.job_get_by_id(1))[0]
        ns.update(d=dialect.decode_job, row=sample)
        print(f"decode_job claimed row       {per_call_us('d(row)', ns, 50_000):6.2f} µs")

        claimed = 0
        decode_seconds = 0.0
        started = time.process_time()
        while True:
            rows = driver.fetch(
                dialect.job_get_available(queue="default", max_to_lock=opts.batch, client_id="b")
            )
            if not rows:
                break
            t0 = time.process_time()
            for row in rows:
                dialect.decode_job(row)
            decode_seconds += time.process_time() - t0
            claimed += len(rows)
        total = time.process_time() - started
        driver.close()
    print(f"claim statement per row      {(total - decode_seconds) / claimed * 1e6:6.2f} µs")
    print(f"claim + decode per row       {total / claimed * 1e6:6.2f} µs  ({claimed} rows)")


if __name__ == "__main__":
    main()
