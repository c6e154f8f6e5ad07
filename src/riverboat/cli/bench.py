"""``riverboat bench``: per-operation timings, an end-to-end run, the seed's scenarios
and a raw-SQL floor, on a scratch schema (or SQLite file) it creates and removes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from riverboat._seconds import is_seconds
from riverboat.bench.env import DRIVERS
from riverboat.bench.runner import DEFAULT_PARTS, PARTS
from riverboat.cli._arguments import integer, plain_number
from riverboat.errors import InvalidInputError

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL"),
        help="Postgres URL (default $DATABASE_URL); the sqlite driver uses a temp file",
    )
    parser.add_argument("--driver", default="psycopg", choices=sorted(DRIVERS))
    parser.add_argument("--jobs", type=integer, default=20_000, help="end-to-end jobs (20,000)")
    parser.add_argument("--calls", type=integer, default=200, help="calls per operation (200)")
    parser.add_argument(
        "--duration",
        type=plain_number,
        default=None,
        help="stop the end-to-end phase after S seconds, whatever is left (River's --duration)",
    )
    parser.add_argument(
        "--e2e-events",
        action="store_true",
        help="count the end-to-end phase's completions from a subscription to completion "
        "events, as River's bench does (adds the event path's CPU per job); by default the "
        "jobs count themselves and stopping the client writes every outcome",
    )
    parser.add_argument(
        "--only",
        choices=PARTS,
        action="append",
        help="run only these parts (repeatable); 'scale' (worker processes 1 vs 2, and "
        "1,000,000 finalized rows), 'workflow' (what dependencies cost), 'flow' (a "
        "global limit that does not bind, 4 worker processes) and 'process' (the process "
        "executor's overhead per job and CPU-bound scaling with children) run only when named",
    )
    parser.add_argument(
        "--finalized-rows",
        type=integer,
        default=1_000_000,
        help="finalized rows beside the backlog in the 'scale' part (1,000,000)",
    )
    parser.add_argument(
        "--latency-jobs",
        type=integer,
        default=None,
        help="jobs inserted one at a time for each pick-up latency figure (1%% of --jobs, "
        "10 to 200)",
    )
    parser.add_argument(
        "--burst-jobs",
        type=integer,
        default=None,
        help="single inserts in the latency part's burst (half of --jobs, at most 10,000)",
    )
    parser.add_argument(
        "--claim-jobs",
        type=integer,
        default=5_000,
        help="jobs claimed in the SQLite batch-claim scenario (5,000)",
    )
    parser.add_argument(
        "--stale-rows",
        type=integer,
        default=100_000,
        help="running jobs in the stale-statistics scenario's table (100,000)",
    )
    parser.add_argument(
        "--cpu-job-ms",
        type=plain_number,
        default=None,
        help="how long each CPU-bound job of the 'process' part runs (100 ms)",
    )
    parser.add_argument(
        "--compare-river",
        action="store_true",
        help="also build interop/go (River 0.51.2) and work the same backlog with River at "
        "its defaults and with a 1 ms FetchCooldown, beside riverboat (Postgres and a SQLite "
        "file), and run River's own `river bench` (cmd/river, go install or "
        "$RIVERBOAT_RIVER_CLI) beside riverboat at its settings; needs Go ('--only river': "
        "only these)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--compare",
        metavar="BASELINE.json",
        help="print each figure beside a saved baseline, with the ratio",
    )
    parser.add_argument("--output", metavar="FILE", help="also write the JSON report here")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def run(args: argparse.Namespace) -> int:
    from riverboat.bench.report import compare, render_table
    from riverboat.bench.runner import BenchConfig, run_bench

    if args.jobs < 1 or args.calls < 1:
        raise InvalidInputError("--jobs/--calls", "must be positive")
    for name in ("latency_jobs", "burst_jobs", "claim_jobs", "stale_rows"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise InvalidInputError("--" + name.replace("_", "-"), "must be positive")
    # NaN passed `<= 0` (every comparison with it is false) and ran the bench uncapped.
    for name in ("cpu_job_ms", "duration"):
        value = getattr(args, name)
        if value is not None and not is_seconds(value, positive=True):
            raise InvalidInputError("--" + name.replace("_", "-"), "must be a positive number")
    # Read and checked before the run, not after it: a wrong path (the docs' baselines
    # are relative to the checkout) ended a whole run in a traceback.
    baseline = _baseline(args.compare) if args.compare else None
    if args.output and not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
        raise InvalidInputError("--output", f"{args.output}: no such directory")
    if args.output and os.path.isdir(args.output):
        raise InvalidInputError("--output", f"{args.output} is a directory, not a file")
    # --only names the parts to run, else a default run's; --compare-river adds River's.
    parts = frozenset(args.only or DEFAULT_PARTS) | ({"river"} if args.compare_river else set())
    config = BenchConfig(
        database_url=None if args.driver == "sqlite" else args.database_url,
        driver=args.driver,
        jobs=args.jobs,
        op_calls=args.calls,
        duration=args.duration,
        e2e_events=args.e2e_events,
        parts=parts,
        latency_jobs=args.latency_jobs or min(200, max(10, args.jobs // 100)),
        burst_jobs=args.burst_jobs or min(10_000, max(1, args.jobs // 2)),
        scale_finalized_rows=args.finalized_rows,
        claim_jobs=args.claim_jobs,
        stale_rows=args.stale_rows,
    )
    if args.cpu_job_ms is not None:
        config.process_cpu_job_seconds = args.cpu_job_ms / 1000
    report = run_bench(config, show_progress=not args.quiet)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(report, f, indent=2)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_table(report))
    if baseline is not None:
        print()
        print(compare(report, baseline))
    return 0


def _baseline(path: str) -> dict[str, Any]:
    """The saved report ``--compare`` names, or InvalidInputError saying why not."""
    try:
        with open(path) as f:
            baseline = json.load(f)
    except OSError as exc:
        raise InvalidInputError("--compare", f"{path}: {exc.strerror}") from None
    except ValueError as exc:
        raise InvalidInputError("--compare", f"{path} is not a JSON report: {exc}") from None
    if not isinstance(baseline, dict):
        raise InvalidInputError("--compare", f"{path} is not a JSON report (an object)")
    return baseline
