"""The process executor's cost and gain (``riverboat bench --only process``).

- ``noop``: no-op jobs one at a time, on the executors alone (no database, so what is
  compared is what differs: a thread pool's hand-off against a round trip to a child,
  the job's row and function reference out as JSON and its outcome back through pipes),
  through the thread executor then through a warm one-child pool, in three interleaved
  rounds (the best of each): milliseconds per job each, and the difference (the process
  executor's overhead per job; the target is ≤ 1 ms).
- ``end_to_end`` (when the bench has a database): the same no-op jobs through a real
  client, claimed and completed in the database, with the thread executor and the process
  executor (``max_workers`` twice the cores, one child per core, all started before the
  clock): jobs/s, wall and CPU milliseconds per job (the worker's CPU plus its
  children's; the outcomes still buffered when the last job ends are not counted).
- ``cpu``: CPU-bound jobs (a pure-Python loop of about 100 ms; no database), six per
  core, run with 1, 2, ... children up to the core count, and with as many threads for
  contrast: jobs/s and speed-up over one child. Threads share the GIL and don't scale;
  children do, up to the cores. Three interleaved rounds in alternating order, the best
  of each kept.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from riverboat._job import JobRow, JobState
from riverboat.runtime.process_pool import ProcessPool, usable_cores
from riverboat.runtime.threads import DaemonThreadPool
from riverboat.runtime.worker import (
    Job,
    RegisteredWorker,
    Workers,
    _WorkContext,
    prepare_for_process,
)

__all__ = ["noop", "run_process_bench", "spin"]

NOOP_TARGET_MS = 1.0
CPU_JOB_SECONDS = 0.1
CPU_JOBS_PER_CORE = 6
CPU_ROUNDS = 3


def noop(job: Job[Any]) -> None:
    """The no-op job (importable by the children)."""


def spin(job: Job[Any]) -> int:
    """A CPU-bound job: ``args["n"]`` iterations of a pure-Python loop."""
    total = 0
    for i in range(job.args["n"]):
        total += i
    return total


def _row(job_id: int, args: str) -> JobRow:
    now = datetime.now(UTC)
    return JobRow(
        id=job_id,
        encoded_args=args,
        attempt=1,
        attempted_at=now,
        attempted_by=["bench"],
        created_at=now,
        errors=[],
        finalized_at=None,
        kind="bench",
        max_attempts=25,
        metadata={},
        priority=1,
        queue="default",
        state=JobState.RUNNING,
        scheduled_at=now,
        tags=[],
        unique_key=None,
        unique_states=None,
    )


def _worker(fn: Callable[[Job[Any]], Any]) -> RegisteredWorker:
    workers = Workers()
    workers.register(fn.__name__, executor="process")(fn)
    worker = workers.get(fn.__name__)
    assert worker is not None
    prepare_for_process(worker)  # what a client does when it is made
    return worker


async def _in_thread(pool: DaemonThreadPool, fn: Callable[[Job[Any]], Any], job: Job[Any]) -> None:
    await asyncio.get_running_loop().run_in_executor(pool, fn, job)


async def _in_process(pool: ProcessPool, worker: RegisteredWorker, job: Job[Any]) -> None:
    assert worker.process_reference is not None
    await pool.run(worker, job, _WorkContext(), worker.process_reference)


async def _sequential(run: Callable[[Job[Any]], Any], calls: int) -> float:
    """Milliseconds per job, one job at a time."""
    job: Job[Any] = Job(_row(1, "{}"), {})
    for _ in range(min(50, calls)):  # warm up
        await run(job)
    started = time.perf_counter()
    for _ in range(calls):
        await run(job)
    return (time.perf_counter() - started) * 1000 / calls


async def _all_at_once(run: Callable[[Job[Any]], Any], jobs: list[Job[Any]], width: int) -> float:
    """Seconds to run ``jobs`` with ``width`` at a time."""
    gate = asyncio.Semaphore(width)

    async def one(job: Job[Any]) -> None:
        async with gate:
            await run(job)

    started = time.perf_counter()
    await asyncio.gather(*(one(job) for job in jobs))
    return time.perf_counter() - started


def _calibrate(job_seconds: float) -> int:
    """Loop iterations that take about ``job_seconds`` here."""
    n = 100_000
    while True:
        started = time.perf_counter()
        spin(Job(_row(0, "{}"), {"n": n}))
        took = time.perf_counter() - started
        if took > 0.01:
            return max(1, int(n * job_seconds / took))
        n *= 4


class _CountWork:
    """Work middleware counting finished jobs in the worker (where the executors meet)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.all_done = asyncio.Event()

    async def work(self, job: Job[Any], call_next: Callable[[], Any]) -> None:
        try:
            await call_next()
        finally:
            self.done += 1
            if self.done >= self.total:
                self.all_done.set()


def _cpu_seconds(pids: list[int]) -> float:
    """CPU seconds of this process and of the live children ``pids`` so far (from
    /proc: a child's start-up, before the clock, must not count)."""
    total = time.process_time()
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


async def _end_to_end(
    make_client: Callable[..., Any],
    reset: Callable[[], Any],
    jobs: int,
    cores: int,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    width = 2 * cores
    from riverboat import InsertManyParams
    from riverboat.runtime.producer import QueueConfig

    out: dict[str, Any] = {"jobs": jobs, "max_workers": width, "children": cores}
    for executor in ("thread", "process"):
        progress(f"process executor: {jobs} no-op jobs end to end, {executor} executor")
        await reset()
        workers = Workers()
        workers.register("bench_noop")(noop)
        counter = _CountWork(jobs)
        queue = QueueConfig(max_workers=width, executor=executor, process_pool_size=cores)
        client = make_client(
            queues={"default": queue},
            workers=workers,
            middleware=[counter],
            fetch_cooldown=0.002,
            fetch_poll_interval=0.02,
        )
        try:
            await client.insert_many([InsertManyParams({}, kind="bench_noop") for _ in range(jobs)])
            await client.start()
            pool = client.runtime.producers["default"].process_pool
            pids: list[int] = []
            if pool is not None:  # the clock starts with the whole pool up
                while len(pool.pids) < cores:
                    await asyncio.sleep(0.01)
                pids = pool.pids
            cpu, wall = _cpu_seconds(pids), time.perf_counter()
            await asyncio.wait_for(counter.all_done.wait(), 600)
            wall, cpu = time.perf_counter() - wall, _cpu_seconds(pids) - cpu
            await client.stop()
        finally:
            await client.close()
        out[executor] = {
            "jobs_per_sec": round(jobs / wall, 1),
            "wall_ms_per_job": round(wall * 1000 / jobs, 4),
            "cpu_ms_per_job": round(cpu * 1000 / jobs, 4),
        }
    out["overhead_cpu_ms_per_job"] = round(
        out["process"]["cpu_ms_per_job"] - out["thread"]["cpu_ms_per_job"], 4
    )
    return out


async def _cpu_round(
    setting: str,
    jobs: list[Job[Any]],
    cores: int,
    threads: DaemonThreadPool,
    noop_worker: RegisteredWorker,
    spin_worker: RegisteredWorker,
) -> float:
    """Seconds for ``jobs`` with ``setting``: "threads" (as many as cores) or
    "children:N" (a fresh pool of N, every child started before the clock)."""
    if setting == "threads":
        return await _all_at_once(lambda job: _in_thread(threads, spin, job), jobs, cores)
    size = int(setting.partition(":")[2])
    pool = ProcessPool(size, name="bench")
    try:
        await _all_at_once(partial(_in_process, pool, noop_worker), jobs, size)
        return await _all_at_once(partial(_in_process, pool, spin_worker), jobs, size)
    finally:
        await pool.close()


async def run_process_bench(
    calls: int,
    progress: Callable[[str], None],
    cores: int | None = None,
    *,
    make_client: Callable[..., Any] | None = None,
    reset: Callable[[], Any] | None = None,
    cpu_job_seconds: float = CPU_JOB_SECONDS,
) -> dict[str, Any]:
    cores = cores or usable_cores()
    threads = DaemonThreadPool("riverboat-bench")
    report: dict[str, Any] = {"cores": cores}
    try:
        noop_worker = _worker(noop)
        pool = ProcessPool(1, name="bench")
        thread_ms = process_ms = float("inf")
        try:
            for round_ in range(CPU_ROUNDS):  # interleaved, best of each
                progress(
                    f"process executor: {calls} no-op jobs one at a time "
                    f"(round {round_ + 1}/{CPU_ROUNDS})"
                )
                thread_ms = min(
                    thread_ms,
                    await _sequential(lambda job: _in_thread(threads, noop, job), calls),
                )
                process_ms = min(
                    process_ms,
                    await _sequential(lambda job: _in_process(pool, noop_worker, job), calls),
                )
        finally:
            await pool.close()
        report["noop"] = {
            "jobs": calls,
            "thread_ms_per_job": round(thread_ms, 4),
            "process_ms_per_job": round(process_ms, 4),
            "overhead_ms_per_job": round(process_ms - thread_ms, 4),
            "target_ms_per_job": NOOP_TARGET_MS,
        }
        if make_client is not None and reset is not None:
            report["end_to_end"] = await _end_to_end(make_client, reset, calls, cores, progress)
        n = _calibrate(cpu_job_seconds)
        spin_worker = _worker(spin)
        count = CPU_JOBS_PER_CORE * cores
        jobs = [Job(_row(i, f'{{"n": {n}}}'), {"n": n}) for i in range(count)]
        # On a shared machine one run can lose a core to a neighbour at any moment, so
        # the settings run in interleaved rounds, in alternating order, best of each.
        best: dict[str, float] = {}
        settings = [f"children:{size}" for size in range(1, cores + 1)] + ["threads"]
        for round_ in range(CPU_ROUNDS):
            for setting in settings if round_ % 2 == 0 else settings[::-1]:
                progress(
                    f"process executor: {count} CPU-bound jobs, {setting} "
                    f"(round {round_ + 1}/{CPU_ROUNDS})"
                )
                took = await _cpu_round(setting, jobs, cores, threads, noop_worker, spin_worker)
                best[setting] = max(best.get(setting, 0.0), count / took)
        base = best["children:1"]
        rows = [
            {
                "children": size,
                "jobs_per_sec": round(best[f"children:{size}"], 2),
                "speedup": round(best[f"children:{size}"] / base, 2),
            }
            for size in range(1, cores + 1)
        ]
        report["cpu"] = {
            "jobs": count,
            "job_seconds": cpu_job_seconds,
            "processes": rows,
            "rounds": CPU_ROUNDS,
            "threads": {
                "threads": cores,
                "jobs_per_sec": round(best["threads"], 2),
                "speedup": round(best["threads"] / base, 2),
            },
        }
    finally:
        threads.shutdown()
    return report
