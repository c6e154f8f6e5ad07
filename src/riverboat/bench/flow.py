"""The ``flow`` part of ``riverboat bench`` (runs only when named): what a global
concurrency limit costs when it does not bind.

Four ``riverboat worker`` processes of 10 slots each work the same backlog of no-op jobs
twice per round, without a limit and with ``ConcurrencyLimit(global_limit=40)`` (as many
as the slots: it never holds a job back, so any difference is the limit's own cost).
Eight rounds, each in the opposite order of the one before; the ratio of each round's
pair, and their median (one build's single-round ratios spread from 0.66x to 0.98x on a
shared 2-core machine, and medians of four rounds from 0.79x to 1.05x). River Pro users
reported this exact setup halving their throughput (river#1145); the target is at least
0.9x. Beside jobs/s, the worker processes' CPU per job (their CPU over the run less that
of the same workers starting and stopping on an empty queue), which another load on the
machine moves much less.
"""

from __future__ import annotations

import statistics
from typing import Any

from riverboat.bench import scale
from riverboat.bench.measure import PostgresBench

__all__ = ["run_flow_bench"]

PROCESSES = 4
SLOTS = 10
LIMIT = PROCESSES * SLOTS
ROUNDS = 8


def run_flow_bench(pg: PostgresBench, jobs: int) -> dict[str, Any]:
    settings = {
        "unlimited": {scale.MAX_WORKERS_ENV: str(SLOTS)},
        "global_limit_40": {scale.MAX_WORKERS_ENV: str(SLOTS), scale.GLOBAL_LIMIT_ENV: str(LIMIT)},
    }
    rates: dict[str, list[float]] = {name: [] for name in settings}
    cpu: dict[str, list[float]] = {name: [] for name in settings}
    ratios: list[float] = []
    for round_ in range(ROUNDS):
        order = list(settings) if round_ % 2 == 0 else list(reversed(settings))
        for name in order:
            pg.progress(f"flow: round {round_ + 1}/{ROUNDS}, {PROCESSES} x {SLOTS} slots, {name}")
            result = scale.processes(pg, jobs, (PROCESSES,), settings[name])
            rates[name].append(result.get(f"processes_{PROCESSES}_jobs_per_sec") or 0.0)
            done = result.get(f"processes_{PROCESSES}_jobs_done")
            if done:
                # CPU per job, steadier than jobs/s on a machine doing other work.
                busy = result[f"processes_{PROCESSES}_cpu_seconds"]
                busy -= scale.idle_cpu(pg, PROCESSES, settings[name])
                cpu[name].append(busy / done * 1e6)
        if rates["unlimited"][-1]:
            ratios.append(rates["global_limit_40"][-1] / rates["unlimited"][-1])
    out: dict[str, Any] = {
        "jobs": jobs,
        "processes": PROCESSES,
        "slots": SLOTS,
        **{f"{name}_jobs_per_sec": round(statistics.median(r)) for name, r in rates.items()},
        **{
            f"{name}_worker_cpu_us_per_job": round(statistics.median(c), 1)
            for name, c in cpu.items()
            if c
        },
        "round_ratios": [round(r, 2) for r in ratios],
    }
    if ratios:
        out["ratio"] = round(statistics.median(ratios), 2)
    return out
