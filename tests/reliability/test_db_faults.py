"""Scenario 2: the database goes away under a running client.

(a) ``pg_terminate_backend`` on every backend of the client (found by its
    ``application_name``) in a loop while 20,000 jobs flow;
(b) a restart of the Postgres server mid-run (a server of the test's own, so the
    session's server and the other tests are untouched);
(c) every connection cut at once, repeatedly, by a TCP proxy in front of Postgres.

In each case the client must reconnect with backoff and say so in its log, never lose
a completion, and every job must end ``completed``. A claim whose reply was lost leaves
its jobs ``running`` without them ever starting here; the rescuer (short
``rescue_stuck_jobs_after``) retries those, so they complete too. No job's body may run
twice: the client drops no outcome (the completer retries a failed write, a finished job
waits for room in it), and every heartbeat lists the jobs whose outcome it holds, which
the rescuer leaves alone however late their outcome is; so we require re-runs == 0.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

import riverboat
from riverboat import Job, JobRow, MaintenanceConfig, QueueConfig, RetryPolicy, Workers
from tests.pgserver import PgServer
from tests.reliability._support import CuttingProxy, counts_by_state, insert_jobs, sql
from tests.reliability._worker_app import FAST_ELECTOR
from tests.waiting import wait_until_async

RESCUE_ERROR = "Stuck job rescued by JobRescuer"

# The rescuer's horizon (``rescue_stuck_jobs_after``, counted from the claim) decides when
# the jobs of a claim whose reply was lost run; it does not open an at-least-once window
# for this client's own jobs, which its heartbeats list. One narrow case is left: a
# heartbeat's list is taken before its statement runs, so a claim committed in between is
# missing from it, and such a job is rescued if its outcome is still unwritten at the
# horizon and no later heartbeat lists it. The completer retries a failed write after 0.1,
# 0.5, 1, 2, then every 4 s (runtime/completer.py), so once the faults stop, the outcome
# lands within COMPLETER_MAX_BACKOFF and heartbeats (every 5 s) go through again: faults
# are injected for a bounded wall-clock window and the horizon is that plus the longest
# backoff plus a margin for a loaded machine. (Re-runs seen here before, 500 with 40
# rounds of faults and an 8 s horizon, 100 in CI with this window, multiples of
# max_workers, were most likely lost outcomes, not late ones: finished jobs waiting for
# room in the completer were cancelled at job_timeout, a claim batch for each second the
# completer stalled; see tests/runtime/test_completer_backpressure.py.)
FAULT_WINDOW = 3.0
COMPLETER_MAX_BACKOFF = 4.0
RESCUE_HORIZON = FAULT_WINDOW + COMPLETER_MAX_BACKOFF + 4.0


class QuickRetry(RetryPolicy):
    def next_retry(self, job: JobRow, now: datetime) -> datetime:
        return now + timedelta(seconds=0.2)


def _client(url: str, schema: str | None, ran: Counter[int]) -> riverboat.AsyncClient:
    workers = Workers()

    @workers.register("rel_flow")
    async def flow(job: Job[Any]) -> None:
        ran[job.id] += 1

    return riverboat.AsyncClient(
        url,
        schema=schema,
        queues={"default": QueueConfig(max_workers=100)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.2,
        job_timeout=1.0,
        retry_policy=QuickRetry(),
        maintenance=MaintenanceConfig(
            elector=FAST_ELECTOR,
            start_jitter=0.0,
            rescuer_interval=0.5,
            # A completion delayed by the faults must not be pre-empted by a rescue (that
            # would be a re-run): see RESCUE_HORIZON.
            rescue_stuck_jobs_after=RESCUE_HORIZON,
            scheduler_interval=0.3,
            error_backoff_base=0.2,
            error_backoff_max=2.0,
        ),
    )


async def _flow(
    *,
    client_url: str,
    check_url: str,
    schema: str | None,
    jobs: int,
    fault: Callable[[Callable[[], bool]], Awaitable[int]],
    caplog: pytest.LogCaptureFixture,
    timeout: float,
) -> dict[str, Any]:
    """Push ``jobs`` through a client on ``client_url`` while ``fault`` runs; returns the
    figures. ``fault(done)`` injects faults until ``done()`` and returns how many."""
    caplog.set_level(logging.INFO, logger="riverboat")
    ids = await asyncio.to_thread(
        insert_jobs, check_url, schema, "rel_flow", [{"n": n} for n in range(jobs)]
    )
    ran: Counter[int] = Counter()
    client = _client(client_url, schema, ran)
    started = time.monotonic()
    finished = False

    async def all_completed() -> None:
        nonlocal finished
        await wait_until_async(
            lambda: asyncio.to_thread(lambda: _counts(check_url, schema) == {"completed": jobs}),
            timeout=timeout,
            poll=0.1,
            what=f"all {jobs} jobs completed",
        )
        finished = True

    await client.start()
    try:
        faults, _ = await asyncio.gather(fault(lambda: finished), all_completed())
    finally:
        await client.stop()
        await client.close()
    elapsed = time.monotonic() - started
    rows = await asyncio.to_thread(
        sql, check_url, schema, "SELECT id, state::text, attempt, errors FROM river_job"
    )
    assert sorted(r[0] for r in rows) == sorted(ids), "no job lost"
    assert {r[1] for r in rows} == {"completed"}
    rescued = {r[0] for r in rows if any(e.get("error") == RESCUE_ERROR for e in r[3] or [])}
    assert set(ran) == set(ids), "every job ran"
    reruns = {j for j, n in ran.items() if n > 1}
    # Said when it fails: how many of them the rescuer ran again, and their ids (one
    # claim batch is a contiguous run of max_workers).
    assert not reruns, (
        f"{len(reruns)} jobs ran twice ({len(reruns & rescued)} of them rescued; ids "
        f"{min(reruns)}..{max(reruns)}): a completion was lost"
    )
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    by_logger = Counter(r.name for r in warnings)
    return {
        "jobs": jobs,
        "faults": faults,
        "seconds": round(elapsed, 1),
        "lost": 0,
        "reruns": len(reruns),
        "rescued (claim reply lost)": len(rescued),
        "warnings": dict(by_logger),
    }


def _counts(url: str, schema: str | None) -> dict[str, int]:
    try:
        return counts_by_state(url, schema)
    except psycopg.OperationalError:  # the server is restarting
        return {}


def _url_with(url: str, **params: str) -> str:
    sep = "&" if "?" in url else "?"
    return url + sep + "&".join(f"{k}={v}" for k, v in params.items())


async def test_terminate_backends_in_a_loop(
    pg_url: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = "rb_rel_terminate"

    async def terminate(done: Callable[[], bool]) -> int:
        killed = 0
        stop_at = time.monotonic() + FAULT_WINDOW
        while not done() and time.monotonic() < stop_at:
            await asyncio.sleep(0.15)
            rows = await asyncio.to_thread(
                sql,
                pg_url,
                None,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                app,
            )
            killed += sum(1 for (ok,) in rows if ok)
        return killed

    figures = await _flow(
        client_url=_url_with(pg_url, application_name=app),
        check_url=pg_url,
        schema=pg_schema,
        jobs=20_000,
        fault=terminate,
        caplog=caplog,
        timeout=90,
    )
    print("terminate backends:", figures)
    assert figures["faults"] > 0
    assert figures["warnings"], "the client logged the lost connections"


def _restart(server: PgServer) -> None:
    """``pg_ctl restart -m fast``, keeping the server's log file. (PgServer.restart passes
    no ``-l``, so the restarted postmaster inherits pg_ctl's captured stdout and
    ``subprocess.run`` waits on that pipe forever.)"""
    import subprocess

    subprocess.run(
        server._cmd(
            str(server.bin / "pg_ctl"),
            "-D",
            str(server.data),
            "-l",
            str(server.dir / "server.log"),
            "-m",
            "fast",
            "-w",
            "restart",
        ),
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )


async def test_server_restart_mid_run(caplog: pytest.LogCaptureFixture) -> None:
    server = PgServer()
    server.start()
    try:
        from riverboat.drivers.psycopg import PsycopgDriver
        from riverboat.migrations import Migrator

        driver = PsycopgDriver(server.url, max_pool_size=2)
        try:
            Migrator(driver).up()
        finally:
            driver.close()

        async def restart(done: Callable[[], bool]) -> int:
            await wait_until_async(
                lambda: asyncio.to_thread(lambda: _counts(server.url, None).get("completed")),
                timeout=30,
                poll=0.05,
                what="a first completed job",
            )
            await asyncio.to_thread(_restart, server)
            return 1

        figures = await _flow(
            client_url=server.url,
            check_url=server.url,
            schema=None,
            jobs=5_000,
            fault=restart,
            caplog=caplog,
            timeout=60,
        )
    finally:
        server.stop()
    print("server restart:", figures)
    assert figures["warnings"], "the client logged the restart"


async def test_proxy_cuts_every_connection(
    pg_url: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    proxy = CuttingProxy(str(info.get("host", "127.0.0.1")), int(info.get("port") or 5432)).start()
    user, dbname = info.get("user", "postgres"), info.get("dbname", "postgres")
    proxied = f"postgresql://{user}@127.0.0.1:{proxy.port}/{dbname}"

    async def cut(done: Callable[[], bool]) -> int:
        dropped = 0
        stop_at = time.monotonic() + FAULT_WINDOW
        while not done() and time.monotonic() < stop_at:
            await asyncio.sleep(0.1)
            dropped += await asyncio.to_thread(proxy.cut)
        return dropped

    try:
        figures = await _flow(
            client_url=proxied,
            check_url=pg_url,
            schema=pg_schema,
            jobs=10_000,
            fault=cut,
            caplog=caplog,
            timeout=60,
        )
    finally:
        proxy.close()
    figures["cuts"] = proxy.cuts
    print("proxy cuts:", figures)
    assert figures["faults"] > 0
