"""Claiming ahead, before and after, in one process: the job-kinds backlog (``riverboat
bench --only job-kinds``) worked with claiming ahead off (``AHEAD_WINDOW = 0``: the
producer as it was before) and on, in interleaved rounds, the order reversed every round.

    python scripts/bench_claim_ahead.py --database-url $URL [--jobs 20000] [--rounds 3]
        [--kinds async_io_10ms,sync_noop,async_noop] [--max-workers 100]
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import riverboat
import riverboat.runtime.producer as producer
from riverboat.bench import jobkinds
from riverboat.bench.defaults import _work_backlog
from riverboat.bench.env import BenchTarget, make_async_driver, scratch_target
from riverboat.bench.measure import PostgresBench, fill_backlog
from riverboat.runtime.collector import tune_collector


async def _main(target: BenchTarget, args: argparse.Namespace) -> None:
    def make_client(**kwargs: Any) -> Any:
        return riverboat.AsyncClient(make_async_driver(target), **kwargs)

    pg = PostgresBench(target.url, target.schema or "", make_client)
    makers = dict(jobkinds.KINDS)
    window = producer.AHEAD_WINDOW
    runs: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for round_ in range(args.rounds):
        for kind in args.kinds.split(","):
            order = [("before", 0.0), ("after", window)]
            for name, ahead_window in order if round_ % 2 == 0 else order[::-1]:
                producer.AHEAD_WINDOW = ahead_window
                await asyncio.to_thread(fill_backlog, pg.url, pg.schema, args.jobs)
                done, wall, cpu, statements = await _work_backlog(
                    pg, args.jobs, args.max_workers, 120.0, makers[kind]()
                )
                done = max(done, 1)
                figure = (done / wall, cpu / done * 1000, statements / done)
                runs.setdefault((kind, name), []).append(figure)
                print(
                    f"round {round_ + 1} {kind:<14} {name:<7}{figure[0]:>9,.0f} jobs/s"
                    f"  py {figure[1]:.4f} ms/job  stmts/job {figure[2]:.4f}",
                    flush=True,
                )
    producer.AHEAD_WINDOW = window
    print("best of each (jobs/s, Python ms/job, statements/job):")
    for (kind, name), figures in runs.items():
        best_rate, best_cpu, per_job = max(figures)
        print(f"{kind:<14} {name:<7}{best_rate:>9,.0f}  {best_cpu:.4f}  {per_job:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", default="async_io_10ms,sync_noop,async_noop")
    parser.add_argument("--max-workers", type=int, default=jobkinds.MAX_WORKERS)
    args = parser.parse_args()
    tune_collector()
    with scratch_target(args.database_url, "psycopg") as target:
        asyncio.run(_main(target, args))


if __name__ == "__main__":
    main()
