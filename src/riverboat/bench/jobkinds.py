"""Jobs/s by kind of work function, at defaults with ``max_workers=100``: an async
no-op, a plain ``def`` no-op (run on the producer's thread pool), and an async job that
awaits 10 ms of I/O (``asyncio.sleep``), whose ideal is ``max_workers / 0.01 s``.

Each backlog is inserted by raw SQL (``fill_backlog``) so only the working is measured;
the three run in interleaved rounds, the order reversed every round, best of each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from riverboat.bench.defaults import _work_backlog
from riverboat.bench.measure import Figures, PostgresBench, fill_backlog
from riverboat.runtime.worker import Job, Workers

__all__ = ["JobKindFigure", "run_job_kinds"]

MAX_WORKERS = 100
IO_SECONDS = 0.01
ROUNDS = 2


@dataclass(slots=True)
class JobKindFigure(Figures):
    """Jobs/s of one kind of job (``name``) at ``max_workers``, against the figure
    named in ``compared_to``."""

    name: str
    max_workers: int
    jobs: int
    jobs_per_sec: float
    python_cpu_ms_per_job: float
    statements_per_job: float
    compared_to: str
    ratio: float


def _async_noop() -> Workers:
    workers = Workers()

    @workers.register("benchmark")
    async def benchmark(job: Job[Any]) -> None:
        return None

    return workers


def _sync_noop() -> Workers:
    workers = Workers()

    @workers.register("benchmark")
    def benchmark(job: Job[Any]) -> None:
        return None

    return workers


def _async_io() -> Workers:
    workers = Workers()

    @workers.register("benchmark")
    async def benchmark(job: Job[Any]) -> None:
        await asyncio.sleep(IO_SECONDS)

    return workers


KINDS: list[tuple[str, Callable[[], Workers]]] = [
    ("async_noop", _async_noop),
    ("sync_noop", _sync_noop),
    ("async_io_10ms", _async_io),
]


async def run_job_kinds(
    pg: PostgresBench, jobs: int, *, max_seconds: float = 30.0
) -> list[JobKindFigure]:
    best: dict[str, tuple[int, float, float, int]] = {}
    for round_ in range(1, ROUNDS + 1):
        order = KINDS if round_ % 2 else KINDS[::-1]
        for name, make_workers in order:
            pg.progress(f"job kinds: {name}, {jobs} jobs, round {round_}/{ROUNDS}")
            await asyncio.to_thread(fill_backlog, pg.url, pg.schema, jobs)
            run = await _work_backlog(pg, jobs, MAX_WORKERS, max_seconds, make_workers())
            if name not in best or run[0] / run[1] > best[name][0] / best[name][1]:
                best[name] = run

    def rate(name: str) -> float:
        done, wall, _, _ = best[name]
        return done / wall

    figures = []
    for name, _ in KINDS:
        done, wall, cpu, statements = best[name]
        done = max(done, 1)
        if name == "sync_noop":
            compared_to, ratio = "async_noop", rate(name) / rate("async_noop")
        elif name == "async_io_10ms":
            compared_to, ratio = "ideal max_workers/0.01 s", rate(name) / (MAX_WORKERS / IO_SECONDS)
        else:
            compared_to, ratio = "-", 1.0
        figures.append(
            JobKindFigure(
                name,
                MAX_WORKERS,
                done,
                round(done / wall, 1),
                round(cpu / done * 1000, 4),
                round(statements / done, 4),
                compared_to,
                round(ratio, 2),
            )
        )
    return figures
