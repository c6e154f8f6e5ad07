#!/usr/bin/env python
"""Django connection reclamation in worker threads: thread / update / reclaim cycles.

A benchmark, not a test. Each cycle is one sync "job" as riverboat's runtime runs it:
handed to a worker thread through ``riverboat.runtime.threads.call_then_release`` (so the
``AFTER_SYNC_JOB`` hooks run, as in production), the job does one UPDATE through
Django's connection, and the hook (``riverboat.contrib.django``'s reclaim) hands the
thread's connection back. Scenarios:

  leak          a new thread per job, no hook: every job opens a connection that stays
                open until its thread's locals are garbage collected (the leak)
  close         pool thread, hook, CONN_MAX_AGE=0 (Django's default): connect per job
  persistent    pool thread, hook, CONN_MAX_AGE=600: the thread keeps a healthy
                connection, the hook closes only broken/obsolete ones
  django-pool   pool thread, hook, Django 5.1+'s OPTIONS["pool"]: the hook's close()
                returns the connection to the psycopg pool

Usage::

    .venv/bin/python scripts/bench_django_reclaim.py [--cycles 2000] [--url postgresql://...]

Without ``--url`` (or ``RIVERBOAT_BENCH_DATABASE_URL``) a throwaway cluster is started
with tests/pgserver.py. Each scenario runs in its own process (Django is configured
once per process).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from riverboat.runtime.worker import Job

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ("leak", "close", "persistent", "django-pool")
APP = "rb_bench_reclaim"


def _configure(url: str, scenario: str) -> None:
    import django
    import psycopg.conninfo
    from django.conf import settings

    info = psycopg.conninfo.conninfo_to_dict(url)
    options: dict[str, Any] = {"application_name": APP}
    if scenario == "django-pool":
        options["pool"] = {"min_size": 1, "max_size": 4}
    settings.configure(
        USE_TZ=True,
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": info.get("dbname", "postgres"),
                "USER": info.get("user", ""),
                "PASSWORD": info.get("password", ""),
                "HOST": info.get("host", ""),
                "PORT": str(info.get("port", "")),
                "CONN_MAX_AGE": 600 if scenario == "persistent" else 0,
                "OPTIONS": options,
            }
        },
        INSTALLED_APPS=["riverboat.contrib.django"],
    )
    django.setup()


def _open_backends(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (APP,)
        ).fetchone()
    return int(row[0]) if row else 0


def _job(_job_arg: Job[Any]) -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("UPDATE rb_bench_reclaim SET n = n + 1 WHERE id = 1")


def run_scenario(url: str, scenario: str, cycles: int) -> dict[str, Any]:
    _configure(url, scenario)
    from riverboat.contrib.django.apps import uninstall_connection_hook
    from riverboat.runtime.threads import call_then_release

    no_job = cast("Job[Any]", None)  # _job never looks at its argument

    if scenario == "leak":
        uninstall_connection_hook()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS rb_bench_reclaim")
        conn.execute("CREATE TABLE rb_bench_reclaim (id int PRIMARY KEY, n int NOT NULL)")
        conn.execute("INSERT INTO rb_bench_reclaim VALUES (1, 0)")

    peak = 0
    warmup = min(50, cycles // 10)
    if scenario == "leak":
        keep: list[threading.Thread] = []  # the runtime's threads live on; so do these

        def one() -> None:
            thread = threading.Thread(target=call_then_release, args=(_job, None))
            thread.start()
            thread.join()
            keep.append(thread)

        for _ in range(warmup):
            one()
        start = time.perf_counter()
        for _ in range(cycles):
            one()
        elapsed = time.perf_counter() - start
        peak = _open_backends(url)
    else:
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="riverboat-bench") as pool:
            for _ in range(warmup):
                pool.submit(call_then_release, _job, no_job).result()
            start = time.perf_counter()
            for _ in range(cycles):
                pool.submit(call_then_release, _job, no_job).result()
            elapsed = time.perf_counter() - start
            peak = _open_backends(url)
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT n FROM rb_bench_reclaim WHERE id = 1").fetchone()
        conn.execute("DROP TABLE rb_bench_reclaim")
    assert row is not None and row[0] == cycles + warmup, row
    return {
        "scenario": scenario,
        "cycles": cycles,
        "ms_per_cycle": elapsed * 1000 / cycles,
        "django_backends_open_after": peak,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--url", default=os.environ.get("RIVERBOAT_BENCH_DATABASE_URL"))
    parser.add_argument("--scenario", choices=SCENARIOS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scenario:  # the child process
        print(json.dumps(run_scenario(args.url, args.scenario, args.cycles)))
        return 0
    server = None
    url = args.url
    if not url:
        sys.path.insert(0, str(ROOT))
        from tests.pgserver import PgServer

        server = PgServer()
        server.start()
        url = server.url
    try:
        results = []
        for scenario in SCENARIOS:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--scenario",
                    scenario,
                    "--url",
                    url,
                    "--cycles",
                    str(args.cycles),
                ],
                check=True,
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        if server is not None:
            server.stop()
    print(f"{'scenario':<12} {'ms/cycle':>9} {'Django backends open after':>28}")
    for r in results:
        name, ms, still_open = r["scenario"], r["ms_per_cycle"], r["django_backends_open_after"]
        print(f"{name:<12} {ms:>9.3f} {still_open:>28}")
    by = {r["scenario"]: r["ms_per_cycle"] for r in results}
    print(
        f"leak -> django-pool: {by['leak']:.3f} -> {by['django-pool']:.3f} ms "
        f"({by['leak'] / by['django-pool']:.1f}x); close -> persistent: "
        f"{by['close']:.3f} -> {by['persistent']:.3f} ms ({by['close'] / by['persistent']:.1f}x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
