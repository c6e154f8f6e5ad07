"""``riverboat demo``: work a realistic mix of jobs on an embedded SQLite file.

Creates (or reuses) ``riverboat-demo.sqlite3`` in the current directory, migrates it,
clears the demo's rows from earlier runs, and shows retries, snoozes, scheduled, unique,
cancelled, discarded and periodic jobs being worked, with a summary at the end. Needs
``riverboat[demo]`` for the live display (plain lines otherwise) and a SQLite of 3.45 or
newer (``riverboat[sqlite]`` bundles one).
"""

from __future__ import annotations

import argparse

from riverboat.errors import InvalidInputError

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from riverboat.demo import DEFAULT_URL

    parser.add_argument(
        "--database-url",
        metavar="URL",
        default=DEFAULT_URL,
        help=f"sqlite:///path or postgresql://... (default: {DEFAULT_URL})",
    )
    parser.add_argument(
        "--jobs", type=int, default=50, metavar="N", help="fast jobs to insert (default 50)"
    )
    parser.add_argument(
        "--plain", action="store_true", help="plain lines even on a terminal (no live display)"
    )


def run(args: argparse.Namespace) -> int:
    from riverboat.demo import run_demo

    if args.jobs < 1 or args.jobs > 100_000:
        raise InvalidInputError("--jobs", "must be between 1 and 100000")
    report = run_demo(args.database_url, jobs=args.jobs, plain=args.plain)
    return 0 if report.ok else 1
