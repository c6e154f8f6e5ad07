"""The ``flow`` part of ``riverboat bench`` (runs only when named): what a global
concurrency limit costs when it does not bind.

Four ``riverboat worker`` processes of 10 slots each work the same backlog of no-op jobs
twice per round, without a limit and with ``ConcurrencyLimit(global_limit=40)`` (as many
as the slots: it never holds a job back, so any difference is the limit's own cost);
two rounds in opposite orders, best of each. River Pro users reported this exact setup
halving their throughput (river#1145); the target is at least 0.9x.
"""

from __future__ import annotations

from typing import Any

from riverboat.bench import scale
from riverboat.bench.measure import PostgresBench

__all__ = ["run_flow_bench"]

PROCESSES = 4
SLOTS = 10
LIMIT = PROCESSES * SLOTS


def run_flow_bench(pg: PostgresBench, jobs: int) -> dict[str, Any]:
    settings = {
        "unlimited": {scale.MAX_WORKERS_ENV: str(SLOTS)},
        "global_limit_40": {scale.MAX_WORKERS_ENV: str(SLOTS), scale.GLOBAL_LIMIT_ENV: str(LIMIT)},
    }
    best: dict[str, float] = {}
    for order in (("unlimited", "global_limit_40"), ("global_limit_40", "unlimited")):
        for name in order:
            pg.progress(f"flow: {PROCESSES} processes x {SLOTS} slots, {name}")
            result = scale.processes(pg, jobs, (PROCESSES,), settings[name])
            rate = result.get(f"processes_{PROCESSES}_jobs_per_sec") or 0.0
            best[name] = max(best.get(name, 0.0), rate)
    out: dict[str, Any] = {
        "jobs": jobs,
        "processes": PROCESSES,
        "slots": SLOTS,
        **{f"{name}_jobs_per_sec": rate for name, rate in best.items()},
    }
    if best.get("unlimited"):
        out["ratio"] = round(best["global_limit_40"] / best["unlimited"], 2)
    return out
