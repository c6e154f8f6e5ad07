"""``riverboat periodic [list|forget]``: durable periodic jobs from the shell.

``list`` (the default) prints each periodic job the leaders stored (those with an id) in
riverboat's table ``riverboat_periodic_job``: its schedule, catch-up policy, last run and
next run. ``forget ID...`` deletes stored rows (of a job no client defines any more).
See docs/periodic-jobs.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime

from riverboat._periodic import PeriodicJobRecord
from riverboat.cli._terminal import printable
from riverboat.cli.jobs import add_common, add_listing, open_client, print_records

__all__ = ["add_arguments", "run"]


def _when(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "-"
    seconds = (moment - now).total_seconds()
    size = abs(seconds)
    for unit, length in (("d", 86400), ("h", 3600), ("m", 60)):
        if size >= length:
            span = f"{size / length:.0f}{unit}"
            break
    else:
        span = f"{size:.0f}s"
    relative = f"in {span}" if seconds >= 0 else f"{span} ago"
    return f"{moment.astimezone(UTC).isoformat(timespec='seconds')} ({relative})"


def _status(record: PeriodicJobRecord) -> str:
    if record.removed_at is not None:
        return "removed"
    return "added at runtime" if record.template is not None else "defined"


def _print(records: Sequence[PeriodicJobRecord], as_json: bool) -> None:
    now = datetime.now(UTC)
    print_records(
        records,
        as_json,
        ("ID", "SCHEDULE", "CATCH UP", "LAST RUN", "NEXT RUN", "STATUS"),
        lambda r: (
            r.id,
            r.schedule,
            r.catch_up,
            _when(r.last_run_at, now),
            _when(r.next_run_at, now),
            _status(r),
        ),
        empty="(no durable periodic job stored: give a periodic job an id to make it durable)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``periodic``'s subcommands on its parser (``list`` by default)."""
    sub = add_listing(parser, "list the stored periodic jobs (the default)")
    forget = sub.add_parser(
        "forget", help="delete the stored times of periodic jobs no client defines any more"
    )
    add_common(forget, after_action=True)
    forget.add_argument("ids", nargs="+", metavar="ID")


def run(args: argparse.Namespace) -> int:
    """Run one ``periodic`` action; returns the exit code."""
    with open_client(args, riverboat_line=True) as client:
        if args.action == "forget":
            gone = client.periodic_job_forget(args.ids)
            unknown = sorted(set(args.ids) - set(gone))
            print(printable(f"forgot {len(gone)} periodic job(s): {', '.join(gone) or '-'}"))
            if unknown:
                print(printable(f"not stored: {', '.join(unknown)}"))
                return 1
            return 0
        _print(client.periodic_job_list(), args.json)
    return 0
