"""End to end: insert N jobs, then work them with the real runtime, accounting CPU.

Settings follow River's riverbench (cmd/river bench): one queue, 2,000 workers, 2 ms
fetch cooldown, 20 ms poll, batch completion, no-op jobs of kind ``benchmark``, 5,000-job
insert batches. Throughput counts jobs whose completion is written, never the work
function returning.

River's bench counts completion events from a subscription. In Go that costs next to
nothing; here an event per job (and the loop that reads them) is a few microseconds of
Python CPU that a worker process without subscribers never spends, and that the raw-SQL
floor doesn't spend either. So by default the working phase runs without a subscriber:
the job counts itself, and the phase ends when ``client.stop()`` has written every
outcome. ``events=True`` (``riverboat bench --e2e-events``) measures River's way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from riverboat._job import InsertManyParams
from riverboat.bench.measure import CpuFigures
from riverboat.drivers.base import AsyncDriver, Driver
from riverboat.runtime.events import EventKind
from riverboat.runtime.producer import QueueConfig
from riverboat.runtime.worker import Job, Workers

__all__ = ["E2EResult", "InsertPhase", "run_e2e"]


InsertPhase = CpuFigures


@dataclass(slots=True)
class E2EResult(CpuFigures):
    """The working phase's figures, then what only the end-to-end run measures."""

    counted: str
    statements_per_job_with_insert: float
    server_statements_per_job: float | None
    connection_resets: int
    followup_job_reads: int
    insert_many: CpuFigures
    insert_single: CpuFigures


class _Meter:
    def __init__(
        self, server_cpu: Callable[[], float] | None, driver: Driver | AsyncDriver
    ) -> None:
        self._server_cpu = server_cpu
        self._driver = driver

    def __enter__(self) -> _Meter:
        self.cpu = time.process_time()
        self.wall = time.perf_counter()
        self.server = self._server_cpu() if self._server_cpu else None
        self.statements = self._driver.stats.statements
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu = time.process_time() - self.cpu
        self.wall = time.perf_counter() - self.wall
        if self._server_cpu is not None and self.server is not None:
            self.server = self._server_cpu() - self.server
        self.statements = self._driver.stats.statements - self.statements

    def phase(self, jobs: int) -> CpuFigures:
        return CpuFigures.measured(jobs, self.wall, self.cpu, self.server, self.statements)


async def run_e2e(
    make_client: Callable[..., Any],
    jobs: int,
    *,
    server_cpu: Callable[[], float] | None,
    server_statements: Callable[[], int] | None,
    reset: Callable[[], Any],
    progress: Callable[[str], None] = lambda _m: None,
    single_inserts: int = 1000,
    duration: float | None = None,
    events: bool = False,
) -> E2EResult:
    workers = Workers()
    ran = 0
    all_ran = asyncio.Event()

    @workers.register("benchmark")
    async def benchmark(job: Job[Any]) -> None:
        nonlocal ran
        ran += 1
        if ran == jobs:
            all_ran.set()

    client = make_client(
        queues={"default": QueueConfig(max_workers=2000)},
        workers=workers,
        fetch_cooldown=0.002,
        fetch_poll_interval=0.02,
    )
    driver = client.driver
    try:
        # Insert phase on its own: single inserts, then insert_many in 5,000-job batches.
        progress(f"e2e: {single_inserts} single inserts")
        with _Meter(server_cpu, driver) as meter:
            for num in range(single_inserts):
                await client.insert({"num": num}, kind="benchmark")
        single = meter.phase(single_inserts)
        await reset()
        progress(f"e2e: inserting {jobs} jobs with insert_many")
        with _Meter(server_cpu, driver) as meter:
            for start in range(0, jobs, 5000):
                count = min(5000, jobs - start)
                # Numbered jobs, as River's bench numbers them since 0.48 (PR #1379).
                await client.insert_many(
                    [
                        InsertManyParams({"num": num}, kind="benchmark")
                        for num in range(start, start + count)
                    ]
                )
        many = meter.phase(jobs)

        sub = None
        worked = 0
        if events:
            sub = client.subscribe(
                EventKind.JOB_COMPLETED,
                EventKind.JOB_FAILED,
                EventKind.JOB_CANCELLED,
                maxsize=jobs + 1000,
            )
        reads_before = driver.stats.by_query.get("job_get_by_id", 0)
        resets_before = driver.stats.resets
        server_before = server_statements() if server_statements else None
        progress(f"e2e: working {jobs} jobs" + (" (counting completion events)" if events else ""))
        deadline = time.perf_counter() + duration if duration else None
        with _Meter(server_cpu, driver) as meter:
            await client.start()
            if sub is not None:
                worked = await _count_events(sub, jobs, deadline, progress)
            else:
                await _wait_ran(all_ran, lambda: ran, jobs, deadline, progress)
            # Inside the measured phase: stopping writes every outcome still buffered.
            await client.stop()
        if sub is None:
            worked = ran  # each job that ran has its completion written by now
        work = meter.phase(max(worked, 1))
        server_statements_per_job = None
        if server_statements is not None and server_before is not None:
            server_statements_per_job = round(
                (server_statements() - server_before) / max(worked, 1), 4
            )
        return E2EResult(
            **asdict(work) | {"jobs": worked},  # the working phase's figures
            counted=("completion events" if events else "jobs run, outcomes written by stop"),
            statements_per_job_with_insert=round(
                work.statements_per_job + many.statements_per_job, 4
            ),
            server_statements_per_job=server_statements_per_job,
            connection_resets=driver.stats.resets - resets_before,
            followup_job_reads=driver.stats.by_query.get("job_get_by_id", 0) - reads_before,
            insert_many=many,
            insert_single=single,
        )
    finally:
        await client.close()


async def _count_events(
    sub: Any, jobs: int, deadline: float | None, progress: Callable[[str], None]
) -> int:
    """Completion events read until ``jobs`` arrived or the deadline passed."""
    worked = 0
    last_report = time.perf_counter()
    while worked < jobs:
        wait = 60.0
        if deadline is not None:
            wait = deadline - time.perf_counter()
            if wait <= 0:
                break
        # Drain what has arrived without a timer; wait_for (a Task and a timer handle on
        # 3.11) only when the queue is empty, about once per completion batch: per event
        # it would be benchmark overhead counted as riverboat's CPU.
        try:
            sub.get_nowait()
        except asyncio.QueueEmpty:
            try:
                await asyncio.wait_for(sub.get(), wait)
            except TimeoutError:
                if deadline is None:
                    raise
                break
        worked += 1
        if time.perf_counter() - last_report > 2:
            last_report = time.perf_counter()
            progress(f"e2e: worked {worked}/{jobs}")
    return worked


async def _wait_ran(
    all_ran: asyncio.Event,
    ran: Callable[[], int],
    jobs: int,
    deadline: float | None,
    progress: Callable[[str], None],
) -> None:
    """Until every job ran (or the deadline passed), reporting progress every 2 s.
    Without a deadline, 60 s in which no job ran is a TimeoutError, as 60 s without a
    completion event is when counting events."""
    last_count, last_progress = ran(), time.perf_counter()
    while not all_ran.is_set():
        wait = 2.0
        if deadline is not None:
            wait = min(wait, deadline - time.perf_counter())
            if wait <= 0:
                return
        try:
            await asyncio.wait_for(all_ran.wait(), wait)
        except TimeoutError:
            count = ran()
            if count != last_count:
                last_count, last_progress = count, time.perf_counter()
            elif deadline is None and time.perf_counter() - last_progress > 60:
                raise TimeoutError(f"e2e: no job ran for 60 s ({count}/{jobs} ran)") from None
            progress(f"e2e: ran {count}/{jobs}")
