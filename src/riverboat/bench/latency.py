"""Pick-up latency: how long a job inserted into an idle queue waits before its body
starts, at default settings, and what a burst of single inserts costs the worker.

- ``pickup``: ``jobs`` jobs inserted one at a time, ``spacing`` apart, by a client in
  another process (Postgres and SQLite) or in the worker's own process (SQLite: a sync
  insert-only ``Client`` on a thread of its own, as a web app's would be). Each job
  carries the wall-clock time taken just before its ``insert`` call; its body reads the
  clock again when it starts. Both clocks are the machine's, so the difference is the
  insert, the wake-up and the claim together.
- ``burst``: an idle worker, and 10,000 single inserts (each its own notification) from
  another process as fast as it can: the worker's statements, claims and wake-ups per job.
  A notification storm must not multiply claims.

The inserter runs as ``python -m riverboat.bench.latency`` (see ``_insert_main``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from riverboat.bench.measure import Figures
from riverboat.runtime.producer import QueueConfig
from riverboat.runtime.worker import Job, Workers

__all__ = ["BurstFigure", "LatencyFigure", "Target", "run_burst", "run_pickup"]

KIND = "latency"


@dataclass(slots=True)
class LatencyFigure(Figures):
    database: str
    pacing: str  # "defaults", or "river" (fetch_cooldown=0.1 set on both clients)
    inserter: str  # "other process" or "same process"
    jobs: int
    spacing_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    # How long the insert call itself took (its commit included): the part of the
    # latency that is the inserter's, not the wake-up's or the claim's.
    insert_p50_ms: float
    insert_p99_ms: float
    claims_per_job: float


@dataclass(slots=True)
class BurstFigure(Figures):
    database: str
    pacing: str
    jobs: int
    insert_seconds: float
    statements_per_job: float
    claims_per_job: float
    notifications_per_job: float
    python_cpu_ms_per_job: float


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _workers(seen: list[float], done: asyncio.Event, expected: int) -> Workers:
    workers = Workers()

    @workers.register(KIND)
    async def latency(job: Job[Any]) -> None:
        seen.append(time.time() - float(job.args["t"]))
        if len(seen) >= expected:
            done.set()

    return workers


def _inserter_command(
    url: str, schema: str | None, jobs: int, spacing: float, cooldown: float | None
) -> list[str]:
    command = [sys.executable, "-m", "riverboat.bench.latency", "--url", url]
    if schema:
        command += ["--schema", schema]
    if cooldown is not None:
        command += ["--fetch-cooldown", str(cooldown)]
    return [*command, "--jobs", str(jobs), "--spacing", str(spacing)]


def _make_sync_client(url: str, schema: str | None, cooldown: float | None) -> Any:
    import riverboat
    from riverboat._url import is_sqlite_url

    options: dict[str, Any] = {} if cooldown is None else {"fetch_cooldown": cooldown}
    if is_sqlite_url(url):
        from riverboat.drivers.sqlite import SqliteDriver

        return riverboat.Client(SqliteDriver(url), **options)
    from riverboat.drivers.psycopg import PsycopgDriver

    return riverboat.Client(PsycopgDriver(url, schema=schema, max_pool_size=2), **options)


def _pacing(cooldown: float | None) -> tuple[str, dict[str, Any]]:
    """The figure's label and the worker client's options: defaults, or River's pacing
    (a fetch cooldown set explicitly, which riverboat keeps between every two fetches and
    uses to limit insert notifications, as River does)."""
    if cooldown is None:
        return "defaults", {}
    return "river", {"fetch_cooldown": cooldown}


def insert_spaced(client: Any, jobs: int, spacing: float) -> list[float]:
    """Insert ``jobs`` jobs one at a time, each stamped with the time just before its
    insert, ``spacing`` seconds apart (0: as fast as possible); how long each insert
    call took (seconds)."""
    took = []
    next_at = time.perf_counter()
    for _ in range(jobs):
        if spacing:
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            next_at += spacing
        started = time.perf_counter()
        client.insert({"t": time.time()}, kind=KIND)
        took.append(time.perf_counter() - started)
    return took


async def _wait_for(done: asyncio.Event, process: Any, limit: float) -> None:
    try:
        await asyncio.wait_for(done.wait(), limit)
    except TimeoutError:
        raise TimeoutError("pick-up latency: not every job ran in time") from None
    finally:
        if process is not None and process.poll() is None:
            process.kill()


class Target(NamedTuple):
    """Where a latency run works: how to make its client, and the database."""

    make_client: Callable[..., Any]
    url: str
    schema: str | None
    database: str


def _worker(
    target: Target, jobs: int, cooldown: float | None
) -> tuple[Any, list[float], asyncio.Event, str]:
    """The worker a run measures, at defaults or with ``cooldown``: (its client, the
    times its ``jobs`` jobs started, set once all did, the pacing's label)."""
    seen: list[float] = []
    done = asyncio.Event()
    pacing, options = _pacing(cooldown)
    client = target.make_client(
        queues={"default": QueueConfig()}, workers=_workers(seen, done, jobs), **options
    )
    return client, seen, done, pacing


async def run_pickup(
    target: Target,
    *,
    jobs: int = 200,
    spacing: float = 0.02,
    same_process: bool = False,
    cooldown: float | None = None,
) -> LatencyFigure:
    """Pick-up latency at default settings (only ``queues`` and ``workers`` given), or
    with ``cooldown`` set on both clients."""
    client, seen, done, pacing = _worker(target, jobs, cooldown)
    _, url, schema, database = target
    process = None
    try:
        await client.start()
        producer = client._runtime.producers["default"]
        claims = producer.fetches
        took: list[float] = []
        if same_process:
            inserter = _make_sync_client(url, schema, cooldown)
            thread = threading.Thread(
                target=lambda: took.extend(insert_spaced(inserter, jobs, spacing)), daemon=True
            )
            thread.start()
            try:
                await _wait_for(done, None, 60 + jobs * spacing * 4)
            finally:
                await asyncio.to_thread(thread.join)
                inserter.driver.close()
        else:
            process = subprocess.Popen(
                _inserter_command(url, schema, jobs, spacing, cooldown),
                env=_child_env(),
                stdout=subprocess.PIPE,
                text=True,
            )
            await _wait_for(done, process, 60 + jobs * spacing * 4)
            out, _ = await asyncio.to_thread(process.communicate)
            took = [float(line) for line in out.split()]
        claims = producer.fetches - claims
    finally:
        await client.close()
        await client.driver.close()
    ms = [value * 1000 for value in seen]
    return LatencyFigure(
        database,
        pacing,
        "same process" if same_process else "other process",
        len(ms),
        spacing * 1000,
        round(statistics.median(ms), 2),
        round(_percentile(ms, 0.9), 2),
        round(_percentile(ms, 0.99), 2),
        round(max(ms), 2),
        round(statistics.median(took) * 1000, 2) if took else 0.0,
        round(_percentile(took, 0.99) * 1000, 2) if took else 0.0,
        round(claims / len(ms), 3),
    )


async def run_burst(
    target: Target,
    *,
    jobs: int = 10_000,
    cooldown: float | None = None,
) -> BurstFigure:
    """An idle worker at defaults (or with ``cooldown`` on both clients), and ``jobs``
    single inserts from another process as fast as it goes: what the worker spent per
    job."""
    client, _, done, pacing = _worker(target, jobs, cooldown)
    _, url, schema, database = target
    process = None
    notifications = 0

    def count(_payload: dict[str, Any]) -> None:
        nonlocal notifications
        notifications += 1

    try:
        await client.start()
        runtime = client._runtime
        producer = runtime.producers["default"]
        if runtime.notifier is not None:
            runtime.notifier.subscribe("river_insert", count)
        claims = producer.fetches
        statements = client.driver.stats.statements
        cpu = time.process_time()
        wall = time.perf_counter()
        process = subprocess.Popen(
            _inserter_command(url, schema, jobs, 0.0, cooldown),
            env=_child_env(),
            stdout=subprocess.DEVNULL,
        )
        await _wait_for(done, process, 120 + jobs / 100)
        await asyncio.to_thread(process.wait)
        insert_seconds = time.perf_counter() - wall
        await client.stop()  # every outcome written: the completions count too
        cpu = time.process_time() - cpu
        statements = client.driver.stats.statements - statements
        claims = producer.fetches - claims
    finally:
        await client.close()
        await client.driver.close()
    return BurstFigure(
        database,
        pacing,
        jobs,
        round(insert_seconds, 2),
        round(statements / jobs, 4),
        round(claims / jobs, 4),
        round(notifications / jobs, 4),
        round(cpu / jobs * 1000, 4),
    )


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # The child imports riverboat from wherever this process did.
    import riverboat

    src = os.path.dirname(os.path.dirname(os.path.abspath(riverboat.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    return env


RIVER_COOLDOWN = 0.1  # River's FetchCooldownDefault, set explicitly


async def run_latency(
    make_client: Callable[..., Any],
    url: str,
    schema: str | None,
    database: str,
    progress: Callable[[str], None] = lambda _m: None,
    *,
    jobs: int = 200,
    burst_jobs: int = 10_000,
) -> dict[str, Any]:
    """Every latency figure for one database, at defaults and with River's pacing side
    by side (the two alternate, so both see the same machine): pick-up from another
    process (and, on SQLite, from the same process), then the burst."""
    target = Target(make_client, url, schema, database)
    pickups = []
    bursts = []
    where = [False, True] if database == "sqlite" else [False]
    for same_process in where:
        for cooldown in (None, RIVER_COOLDOWN) if same_process else (RIVER_COOLDOWN, None):
            label, _ = _pacing(cooldown)
            progress(
                f"latency: {database} ({label}), {jobs} jobs 20 ms apart from "
                f"{'the same' if same_process else 'another'} process"
            )
            pickups.append(
                await run_pickup(
                    target,
                    jobs=jobs,
                    same_process=same_process,
                    cooldown=cooldown,
                )
            )
    for cooldown in (None, RIVER_COOLDOWN):
        label, _ = _pacing(cooldown)
        progress(f"latency: {database} ({label}), burst of {burst_jobs} single inserts")
        bursts.append(await run_burst(target, jobs=burst_jobs, cooldown=cooldown))
    return {
        "pickup": [figure.to_dict() for figure in pickups],
        "burst": [figure.to_dict() for figure in bursts],
    }


def _insert_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="riverboat bench's latency inserter")
    parser.add_argument("--url", required=True)
    parser.add_argument("--schema", default=None)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--spacing", type=float, required=True)
    parser.add_argument("--fetch-cooldown", type=float, default=None)
    args = parser.parse_args(argv)
    client = _make_sync_client(args.url, args.schema, args.fetch_cooldown)
    try:
        took = insert_spaced(client, args.jobs, args.spacing)
    finally:
        client.driver.close()
    sys.stdout.write("".join(f"{seconds:.6f}\n" for seconds in took))
    return 0


if __name__ == "__main__":
    sys.exit(_insert_main())
