"""Page timings of riverboat ui on a table of 1,000,000 finalized jobs (docs/ui.md).

Fills river_job with finalized jobs (completed, discarded, cancelled; finalized_at
spread over 30 days, the last hour included) plus a few thousand waiting ones, serves
the dashboard with uvicorn on 127.0.0.1, and times each page over HTTP from another
thread: every request goes app -> admin API -> database, as in production.

    .venv/bin/python scripts/bench_ui.py                     # both, 1,000,000 jobs each
    .venv/bin/python scripts/bench_ui.py --db sqlite --jobs 200000
    .venv/bin/python scripts/bench_ui.py --database-url postgresql://... (a throwaway DB!)

Without --database-url, Postgres is a throwaway cluster (tests/pgserver.py, fsync=off)
and SQLite a file in a temporary directory.
"""

from __future__ import annotations

import argparse
import html
import http.client
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import uvicorn  # noqa: E402

from riverboat._url import driver_from_url  # noqa: E402
from riverboat.migrations import Migrator  # noqa: E402
from riverboat.ui import create_app  # noqa: E402

# Waiting jobs on top of the finalized ones: queues a dashboard user would look at.
WAITING = {"available": 2000, "scheduled": 500, "retryable": 200, "running": 50}
PAGES = (
    ("overview", "/"),
    ("jobs: completed", "/jobs?state=completed"),
    ("jobs: completed, page 2", None),  # the first page's next link
    ("jobs: discarded", "/jobs?state=discarded"),
    ("jobs: completed, kind filter", "/jobs?state=completed&kind=send_email"),
    ("jobs: completed, tag filter", "/jobs?state=completed&tag=bulk"),
    ("jobs: available", "/jobs?state=available"),
    ("job detail", None),
)


def fill_postgres(url: str, jobs: int) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE river_job")
        conn.execute(
            """
            INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt,
                                   attempted_at, finalized_at, created_at, scheduled_at,
                                   tags, errors)
            SELECT jsonb_build_object('n', i, 'to', 'user' || i || '@example.com'),
                   (ARRAY['send_email', 'resize_image', 'charge_card'])[1 + i %% 3],
                   25, (ARRAY['default', 'email', 'media'])[1 + i %% 3],
                   s.state::river_job_state, 1, t, t, t - interval '1 second',
                   t - interval '1 second',
                   CASE WHEN i %% 10 = 0 THEN ARRAY['bulk']::varchar[] ELSE '{}' END,
                   CASE WHEN s.state = 'discarded'
                        THEN ARRAY[jsonb_build_object('at', t, 'attempt', 1,
                                   'error', 'boom', 'trace', 'trace')]
                        ELSE NULL END
            FROM generate_series(1, %s) AS i,
                 LATERAL (SELECT CASE WHEN i %% 50 = 0 THEN 'discarded'
                                      WHEN i %% 97 = 0 THEN 'cancelled'
                                      ELSE 'completed' END AS state,
                                 now() - (i::double precision / %s) * interval '30 days'
                                     AS t) AS s
            """,
            (jobs, jobs),
        )
        for state, count in WAITING.items():
            conn.execute(
                """
                INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt,
                                       attempted_at, scheduled_at)
                SELECT jsonb_build_object('n', i), 'send_email', 25, 'email',
                       %s::river_job_state, CASE WHEN %s = 'running' THEN 1 ELSE 0 END,
                       CASE WHEN %s = 'running' THEN now() END,
                       now() + CASE WHEN %s = 'scheduled' THEN interval '1 hour'
                                    ELSE interval '0' END
                FROM generate_series(1, %s) AS i
                """,
                (state, state, state, state, count),
            )
        # The steady state of a table that grew over 30 days: autovacuum has set the
        # visibility map (index-only counts) and the statistics. Right after a bulk load,
        # before autovacuum's first pass, counts visit the heap and run several times
        # slower.
        conn.execute("VACUUM ANALYZE river_job")
        row = conn.execute("SELECT max(id) FROM river_job WHERE state = 'discarded'").fetchone()
        assert row is not None
        return int(row[0])


def fill_sqlite(url: str, jobs: int) -> int:
    driver = driver_from_url(url)
    try:
        Migrator(driver).up()
    finally:
        driver.close()
    import sqlean

    conn = sqlean.connect(url.removeprefix("sqlite:///"))
    now = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (i * 2592.0 / {jobs}) || ' seconds')"
    t = now.format(jobs=jobs / 1000)
    conn.execute("DELETE FROM river_job")
    conn.execute(
        f"""
        WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < {jobs})
        INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt,
                               attempted_at, finalized_at, created_at, scheduled_at, tags,
                               errors, metadata)
        SELECT jsonb(json_object('n', i, 'to', 'user' || i || '@example.com')),
               CASE i % 3 WHEN 0 THEN 'send_email' WHEN 1 THEN 'resize_image'
                          ELSE 'charge_card' END,
               25,
               CASE i % 3 WHEN 0 THEN 'default' WHEN 1 THEN 'email' ELSE 'media' END,
               CASE WHEN i % 50 = 0 THEN 'discarded' WHEN i % 97 = 0 THEN 'cancelled'
                    ELSE 'completed' END,
               1, {t}, {t}, {t}, {t},
               jsonb(CASE WHEN i % 10 = 0 THEN '["bulk"]' ELSE '[]' END),
               CASE WHEN i % 50 = 0
                    THEN jsonb(json_array(json_object('at', {t}, 'attempt', 1,
                               'error', 'boom', 'trace', 'trace')))
               END,
               jsonb('{{}}')
        FROM seq
        """
    )
    for state, count in WAITING.items():
        conn.execute(
            f"""
            WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < {count})
            INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt,
                                   attempted_at, scheduled_at, metadata, tags)
            SELECT jsonb(json_object('n', i)), 'send_email', 25, 'email', '{state}',
                   {1 if state == "running" else 0},
                   {"strftime('%Y-%m-%d %H:%M:%f', 'now')" if state == "running" else "NULL"},
                   strftime('%Y-%m-%d %H:%M:%f', 'now',
                            '{"+1 hour" if state == "scheduled" else "+0 seconds"}'),
                   jsonb('{{}}'), jsonb('[]')
            FROM seq
            """
        )
    conn.commit()
    conn.execute("ANALYZE")
    row = conn.execute("SELECT max(id) FROM river_job WHERE state = 'discarded'").fetchone()
    conn.close()
    return int(row[0])


@contextmanager
def serving(url: str, schema: str | None) -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(
        uvicorn.Config(create_app(url, schema=schema), log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def get(port: int, path: str) -> tuple[float, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    started = time.perf_counter()
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read().decode()
    elapsed = (time.perf_counter() - started) * 1000
    conn.close()
    if response.status != 200:
        raise SystemExit(f"GET {path}: HTTP {response.status}\n{body[-800:]}")
    return elapsed, body


#: A page's name, then its median, p95 and worst request time in ms.
PageTiming = tuple[str, float, float, float]


def time_pages(url: str, schema: str | None, discarded_id: int, rounds: int) -> list[PageTiming]:
    results: list[PageTiming] = []
    with serving(url, schema) as port:
        _, first = get(port, "/jobs?state=completed")
        link = re.search(r'href="([^"]+)" id="next-page"', first)
        if link is None:
            raise SystemExit("the first page of completed jobs has no next page link")
        next_path = html.unescape(link.group(1))
        for name, path in PAGES:
            if path is None:
                path = next_path if "page 2" in name else f"/jobs/{discarded_id}"
            get(port, path)  # warm: the first request opens the pool
            samples = [get(port, path)[0] for _ in range(rounds)]
            samples.sort()
            results.append(
                (
                    name,
                    statistics.median(samples),
                    samples[max(0, int(len(samples) * 0.95) - 1)],
                    samples[-1],
                )
            )
    return results


def report(title: str, results: list[PageTiming]) -> None:
    print(f"\n{title}")
    print("| page | median ms | p95 ms | max ms |\n|---|---:|---:|---:|")
    for name, median, p95, worst in results:
        print(f"| {name} | {median:.1f} | {p95:.1f} | {worst:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("postgres", "sqlite", "both"), default="both")
    parser.add_argument("--jobs", type=int, default=1_000_000, help="finalized jobs")
    parser.add_argument("--rounds", type=int, default=30, help="requests per page")
    parser.add_argument("--database-url", help="an existing Postgres database to fill")
    args = parser.parse_args()
    py = sys.version.split()[0]
    if args.db in ("postgres", "both"):
        import psycopg

        impl = psycopg.pq.__impl__
        if args.database_url:
            url = args.database_url
            Migrator(driver_from_url(url)).up()
            found = fill_postgres(url, args.jobs)
            report(
                f"Postgres ({url}), psycopg {impl}, Python {py}",
                time_pages(url, None, found, args.rounds),
            )
        else:
            from tests.pgserver import PgServer

            server = PgServer()
            server.start()
            try:
                driver = driver_from_url(server.url)
                Migrator(driver).up()
                driver.close()
                t0 = time.perf_counter()
                found = fill_postgres(server.url, args.jobs)
                took = time.perf_counter() - t0
                print(f"postgres: filled {args.jobs:,} finalized jobs in {took:.0f}s")
                results = time_pages(server.url, None, found, args.rounds)
            finally:
                server.stop()
            report(
                f"Postgres {server.bin.parent.name}"
                f" (throwaway cluster, fsync=off), psycopg {impl}, Python {py}",
                results,
            )
    if args.db in ("sqlite", "both"):
        import sqlean

        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/bench-ui.sqlite3"
            t0 = time.perf_counter()
            found = fill_sqlite(url, args.jobs)
            print(f"sqlite: filled {args.jobs:,} finalized jobs in {time.perf_counter() - t0:.0f}s")
            results = time_pages(url, None, found, args.rounds)
        report(
            f"SQLite {sqlean.sqlite_version} (sqlean-py, WAL file in /tmp), Python {py}", results
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
