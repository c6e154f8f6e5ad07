"""Running the whole benchmark and assembling one report document."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from riverboat.bench.env import (
    BenchTarget,
    ServerCpu,
    StatementCounter,
    make_async_driver,
    scratch_target,
)
from riverboat.bench.measure import PostgresBench
from riverboat.bench.process import CPU_JOB_SECONDS

__all__ = ["DEFAULT_PARTS", "PARTS", "BenchConfig", "environment", "run_bench"]

E2E_FLOOR_ROUNDS = 4


def environment() -> dict[str, Any]:
    """The Python and psycopg implementation the figures were measured with."""
    import platform

    out: dict[str, Any] = {
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
    }
    try:
        import psycopg
    except ImportError:
        return out
    # "c" (built locally), "binary" (the psycopg[binary] wheel) or "python".
    out["psycopg_version"] = psycopg.__version__
    out["psycopg_impl"] = psycopg.pq.__impl__
    return out


# The parts of a run, by the names ``riverboat bench --only`` takes, in the order its help
# lists them.
PARTS = (
    "ops",
    "e2e",
    "defaults",
    "inserts",
    "latency",
    "job-kinds",
    "river",
    "floor",
    "scenarios",
    "scale",
    "workflow",
    "flow",
    "process",
)
# What a default run leaves out, as costly or needing more than the database: River 0.51.2
# itself (the Go interop program), 'scale' (worker processes, 1,000,000 rows), 'workflow',
# 'flow' (worker processes) and 'process' (child processes).
DEFAULT_PARTS = frozenset(PARTS) - {"river", "scale", "workflow", "flow", "process"}


@dataclass(slots=True)
class BenchConfig:
    database_url: str | None
    driver: str = "psycopg"
    jobs: int = 20_000
    op_calls: int = 200
    duration: float | None = None  # caps the end-to-end working phase (seconds)
    # Count the end-to-end phase's completions from a subscription, as River's bench does
    # (the event path's cost then counts too); by default no subscriber (see bench/e2e.py).
    e2e_events: bool = False
    # Which PARTS run. 'latency' is pick-up latency and a burst of single inserts
    # (Postgres, and SQLite on a temp file); 'job-kinds' the jobs/s of sync no-op, async
    # no-op and 10 ms I/O jobs at max_workers=100 (Postgres).
    parts: frozenset[str] = DEFAULT_PARTS
    latency_jobs: int = 200
    burst_jobs: int = 10_000
    # How long each CPU-bound job of the process part runs (seconds).
    process_cpu_job_seconds: float = CPU_JOB_SECONDS
    scale_finalized_rows: int = 1_000_000
    # The seed's scenarios: jobs claimed on SQLite, running rows under stale statistics.
    claim_jobs: int = 5_000
    stale_rows: int = 100_000


def _progress_printer(enabled: bool) -> Callable[[str], None]:
    tty = sys.stderr.isatty()
    started = time.perf_counter()

    def emit(message: str) -> None:
        if not enabled:
            return
        text = f"[{time.perf_counter() - started:6.1f}s] {message}"
        if tty:
            sys.stderr.write("\r\033[K" + text)
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    return emit


async def _run(
    config: BenchConfig, target: BenchTarget, progress: Callable[[str], None]
) -> dict[str, Any]:
    import riverboat
    from riverboat.runtime.collector import tune_collector
    from riverboat.runtime.stacks import dump_stacks_on_signal

    # kill -USR1: what every task waits on (a run that hangs can say where).
    dump_stacks_on_signal(asyncio.get_running_loop())

    # The benchmark stands for a `riverboat worker` process, so it runs with the
    # collector setting the worker applies to itself (RIVERBOAT_GC_THRESHOLD=0: Python's).
    gc_threshold = tune_collector()
    report: dict[str, Any] = {
        "riverboat_version": riverboat.__version__,
        "driver": target.driver,
        "dialect": target.dialect,
        "jobs": config.jobs,
        "statement_source": "driver counter",
        **environment(),
        "gc_threshold": gc_threshold or gc.get_threshold()[0],
    }
    server_cpu: ServerCpu | None = None
    counter: StatementCounter | None = None
    if target.dialect == "postgres":
        import psycopg

        with psycopg.connect(target.url, autocommit=True) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            report["server_version"] = row[0] if row else None
            # Durability changes what every write costs: say what these figures had.
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                row = conn.execute(f"SHOW {setting}").fetchone()
                report[setting] = row[0] if row else None
        server_cpu = ServerCpu(target.url)
        if not server_cpu.available:
            server_cpu = None
        counter = StatementCounter(target.url)
        if counter.available:
            report["statement_source"] = "pg_stat_statements"
        else:
            counter = None
    else:
        from riverboat.drivers._sqlite_module import sqlite_module

        report["server_version"] = f"SQLite {sqlite_module().sqlite_version}"

    def server_statements() -> int:
        assert counter is not None and target.schema is not None
        return counter.total(target.schema)

    def make_client(**kwargs: Any) -> Any:
        return riverboat.AsyncClient(make_async_driver(target), **kwargs)

    async def reset() -> None:
        driver = make_async_driver(target)
        try:
            from riverboat.bench.ops import _truncate

            await driver.execute_script(_truncate(driver.dialect))
        finally:
            await driver.close()

    # The parts that need Postgres (and the scratch schema) share these.
    pg = PostgresBench(target.url, target.schema or "", make_client, progress)
    if "ops" in config.parts:
        from riverboat.bench.ops import run_ops

        client = make_client()
        try:
            ops = await run_ops(
                client,
                config.op_calls,
                server_statements if counter is not None else None,
                progress,
            )
        finally:
            await client.close()
        report["operations"] = [asdict(op) for op in ops]
    # The overhead ratio compares two CPU figures of one run. On a shared VM either can
    # move by a fifth from one minute to the next, so when both are asked for they are
    # measured in interleaved rounds and the best of each is kept (as the insert and
    # scale figures are). The order alternates (e2e first, then the floor first...): a
    # process warming up would otherwise favour whichever always runs second.
    with_floor = "floor" in config.parts and target.dialect == "postgres" and bool(target.schema)
    rounds = E2E_FLOOR_ROUNDS if "e2e" in config.parts and with_floor else 1
    floor: Any = None
    if "e2e" in config.parts:
        from riverboat.bench.e2e import run_e2e

        best: Any = None
        for round_ in range(1, rounds + 1):
            if rounds > 1:
                progress(f"e2e and raw SQL floor: round {round_}/{rounds}")
            if rounds > 1 and round_ % 2 == 0:
                floor = await _best_floor(floor, config, target, server_cpu, progress)
            await reset()
            e2e = await run_e2e(
                make_client,
                config.jobs,
                server_cpu=server_cpu.seconds if server_cpu is not None else None,
                server_statements=server_statements if counter is not None else None,
                reset=reset,
                progress=progress,
                # As the inserts part: no more single inserts than the run has jobs.
                single_inserts=min(1000, config.jobs),
                duration=config.duration,
                events=config.e2e_events,
            )
            if best is None or e2e.total_cpu_ms_per_job < best.total_cpu_ms_per_job:
                best = e2e
            if rounds > 1 and round_ % 2 == 1:
                floor = await _best_floor(floor, config, target, server_cpu, progress)
        report["end_to_end"] = best.to_dict()
        report["end_to_end"]["rounds"] = rounds
    if "inserts" in config.parts and target.dialect == "postgres" and target.schema:
        from riverboat.bench.inserts import run_inserts

        await reset()
        from riverboat.bench.inserts import pgqueuer_missing

        inserts, vs_pgqueuer = await run_inserts(
            pg, config.jobs, single_inserts=min(1000, config.jobs)
        )
        report["inserts"] = [figure.to_dict() for figure in inserts]
        report["inserts_vs_pgqueuer"] = (
            {"skipped": pgqueuer_missing()}
            if vs_pgqueuer is None
            else [figure.to_dict() for figure in vs_pgqueuer]
        )
    if "defaults" in config.parts and target.dialect == "postgres" and target.schema:
        from riverboat.bench.defaults import run_defaults

        defaults = await run_defaults(pg, config.jobs)
        report["defaults"] = [result.to_dict() for result in defaults]
    if "job-kinds" in config.parts and target.dialect == "postgres" and target.schema:
        from riverboat.bench.jobkinds import run_job_kinds

        kinds = await run_job_kinds(pg, config.jobs)
        report["job_kinds"] = [figure.to_dict() for figure in kinds]
    if "river" in config.parts:
        from riverboat.bench.river import (
            run_compare_river,
            run_compare_river_sqlite,
            run_river_bench,
        )

        if target.dialect == "postgres" and target.schema:
            report["compare_river"] = await run_compare_river(
                pg, config.jobs, server_cpu.seconds if server_cpu is not None else None
            )
            report["river_bench"] = await run_river_bench(pg, config.jobs)
        report["compare_river_sqlite"] = await run_compare_river_sqlite(config.jobs, progress)
    if "latency" in config.parts:
        report["latency"] = await _latency(config, target, make_client, progress)
    if "scale" in config.parts and target.dialect == "postgres" and target.schema:
        from riverboat.bench import scale

        report["scale"] = {
            "processes": await asyncio.to_thread(scale.processes, pg, config.jobs),
            "finalized_rows": await scale.finalized_rows(
                pg, config.jobs, config.scale_finalized_rows
            ),
        }
    if "flow" in config.parts and target.dialect == "postgres" and target.schema:
        from riverboat.bench.flow import run_flow_bench

        report["flow"] = await asyncio.to_thread(run_flow_bench, pg, config.jobs)
    if "workflow" in config.parts:
        from riverboat.bench.workflow import run_workflow_bench

        await reset()
        report["workflow"] = await run_workflow_bench(make_client, progress)
    if "process" in config.parts:
        from riverboat.bench.process import run_process_bench

        await reset()
        report["process_executor"] = await run_process_bench(
            min(config.jobs, 2000),
            progress,
            make_client=make_client,
            reset=reset,
            cpu_job_seconds=config.process_cpu_job_seconds,
        )
    if with_floor:
        if floor is None:
            floor = await _best_floor(None, config, target, server_cpu, progress)
        report["raw_sql_floor"] = floor.to_dict()
        e2e_total = report.get("end_to_end", {}).get("total_cpu_ms_per_job")
        if e2e_total and floor.total_cpu_ms_per_job:
            report["overhead_ratio"] = round(e2e_total / floor.total_cpu_ms_per_job, 2)
    if "scenarios" in config.parts:
        from riverboat.bench import scenarios

        report["scenarios"] = {}
        missing = scenarios.sqlite_missing()
        if missing is not None:
            # Postgres drivers don't need the SQLite extra; say why, keep the rest.
            report["scenarios"]["sqlite_batch_claim"] = {"skipped": missing}
        else:
            progress("scenario: SQLite batch claim")
            report["scenarios"]["sqlite_batch_claim"] = await asyncio.to_thread(
                scenarios.sqlite_batch_claim, config.claim_jobs
            )
        if target.dialect == "postgres" and target.schema:
            progress("scenario: stale statistics completion plan")
            report["scenarios"]["stale_statistics_completion"] = await asyncio.to_thread(
                scenarios.stale_statistics_completion,
                target.url,
                target.schema,
                config.stale_rows,
            )
    return report


async def _latency(
    config: BenchConfig,
    target: BenchTarget,
    make_client: Callable[..., Any],
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Pick-up latency and the burst on the target, and on SQLite (a temp file) when
    the target is Postgres and SQLite is available."""
    import riverboat
    from riverboat.bench import scenarios
    from riverboat.bench.latency import run_latency

    jobs, burst = config.latency_jobs, config.burst_jobs
    out = {
        target.dialect: await run_latency(
            make_client,
            target.url,
            target.schema,
            target.dialect,
            progress,
            jobs=jobs,
            burst_jobs=burst,
        )
    }
    if target.dialect == "postgres":
        missing = scenarios.sqlite_missing()
        if missing is not None:
            out["sqlite"] = {"skipped": missing}
            return out
        with scratch_target(None, "sqlite") as sqlite:

            def make_sqlite_client(**kwargs: Any) -> Any:
                return riverboat.AsyncClient(make_async_driver(sqlite), **kwargs)

            out["sqlite"] = await run_latency(
                make_sqlite_client,
                sqlite.url,
                None,
                "sqlite",
                progress,
                jobs=jobs,
                burst_jobs=burst,
            )
    return out


async def _best_floor(
    best: Any, config: BenchConfig, target: Any, server_cpu: Any, progress: Any
) -> Any:
    """One more run of the raw-SQL floor; the cheaper of it and ``best``."""
    from riverboat.bench.floor import run_floor

    progress("raw SQL floor")
    floor = await asyncio.to_thread(
        run_floor,
        target.url,
        target.schema,
        config.jobs,
        server_cpu.seconds if server_cpu is not None else None,
    )
    if best is None or floor.total_cpu_ms_per_job < best.total_cpu_ms_per_job:
        return floor
    return best


def run_bench(config: BenchConfig, *, show_progress: bool = True) -> dict[str, Any]:
    """Run the benchmark on a scratch schema (or SQLite file) and return the report."""
    progress = _progress_printer(show_progress)
    with scratch_target(config.database_url, config.driver) as target:
        report = asyncio.run(_run(config, target, progress))
    if show_progress and sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
    return report
