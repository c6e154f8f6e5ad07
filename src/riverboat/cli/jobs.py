"""``riverboat jobs list|get|cancel|retry|delete``: job administration from the shell.

The database comes from ``--database-url`` or ``DATABASE_URL``. Output is a table, or
one JSON document with ``--json``. ``list`` prints the cursor of the next page (if any)
on stderr, to pass back with ``--cursor``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from riverboat._job import JobRow, JobState
from riverboat.cli._database import add_database_options, checked_driver, database_url
from riverboat.client import Client
from riverboat.errors import InvalidInputError

__all__ = ["add_arguments", "run"]

_LIST_FILTERS = ("ids", "kinds", "queues", "states", "priorities", "tags_all", "tags_any")


def add_common(parser: argparse.ArgumentParser) -> None:
    add_database_options(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


@contextmanager
def open_client(args: argparse.Namespace) -> Iterator[Client]:
    with checked_driver(database_url(args), args.schema) as driver:
        yield Client(driver)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return value


def job_dict(job: JobRow) -> dict[str, Any]:
    problems = list(job.decode_errors)
    try:
        args = job.args
    except ValueError as exc:  # a row another client wrote: not JSON, or nested too deeply
        args = None
        problems.append(f"args: {exc}")
    out = {
        "id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "state": job.state.value,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "priority": job.priority,
        "args": args,
        "metadata": job.metadata,
        "tags": job.tags,
        "created_at": _jsonable(job.created_at),
        "scheduled_at": _jsonable(job.scheduled_at),
        "attempted_at": _jsonable(job.attempted_at),
        "finalized_at": _jsonable(job.finalized_at),
        "attempted_by": job.attempted_by,
        "errors": [
            {"at": _jsonable(e.at), "attempt": e.attempt, "error": e.error, "trace": e.trace}
            for e in job.errors
        ],
        "unique_key": _jsonable(job.unique_key),
        "unique_states": job.unique_states,
    }
    if problems:
        out["decode_errors"] = problems
    return out


def _printable(job: JobRow) -> dict[str, Any]:
    """:func:`job_dict`, with args or metadata nested too deeply for indented JSON (a row
    another client wrote) left out and named in ``decode_errors``."""
    out = job_dict(job)
    for name in ("args", "metadata"):
        try:
            json.dumps(out[name], indent=2)
        except RecursionError:
            out[name] = None
            out.setdefault("decode_errors", []).append(f"{name}: nested too deeply to print")
    return out


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    for row in (headers, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def print_jobs(jobs: Sequence[JobRow], as_json: bool) -> None:
    if as_json:
        print(json.dumps([_printable(j) for j in jobs], indent=2))
        return
    print_table(
        ("ID", "KIND", "QUEUE", "STATE", "ATTEMPT", "PRI", "SCHEDULED_AT", "FINALIZED_AT"),
        [
            (
                str(j.id),
                j.kind,
                j.queue,
                j.state.value,
                f"{j.attempt}/{j.max_attempts}",
                str(j.priority),
                _when(j.scheduled_at),
                _when(j.finalized_at),
            )
            for j in jobs
        ],
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``jobs``' subcommands on its parser."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = sub.add_parser("list", help="list jobs, filtered and paginated")
    add_common(listing)
    listing.add_argument("--id", type=int, action="append", dest="ids", metavar="ID")
    listing.add_argument("--kind", action="append", dest="kinds", metavar="KIND")
    listing.add_argument("--queue", action="append", dest="queues", metavar="QUEUE")
    listing.add_argument(
        "--state", action="append", dest="states", choices=[s.value for s in JobState]
    )
    listing.add_argument("--priority", type=int, action="append", dest="priorities")
    listing.add_argument("--tag", action="append", dest="tags_all", metavar="TAG",
                         help="jobs having every given tag")  # fmt: skip
    listing.add_argument("--any-tag", action="append", dest="tags_any", metavar="TAG",
                         help="jobs having at least one of the given tags")  # fmt: skip
    listing.add_argument("--metadata", metavar="JSON", help="jobs whose metadata contains this")
    listing.add_argument(
        "--order-by", choices=("id", "time", "scheduled_at", "finalized_at"), default="id"
    )
    listing.add_argument("--desc", action="store_true", help="descending order")
    listing.add_argument("--limit", type=int, default=100, help="page size (default 100)")
    listing.add_argument("--cursor", help="continue after this cursor (printed by a prior list)")

    for action, text in (
        ("get", "show jobs"),
        ("cancel", "cancel jobs (a running job is cancelled by its producer)"),
        ("retry", "make jobs available again now"),
        ("delete", "delete jobs (running jobs are refused)"),
    ):
        command = sub.add_parser(action, help=text, description=text)
        add_common(command)
        command.add_argument("job_ids", type=int, nargs="+", metavar="ID")


def run(args: argparse.Namespace) -> int:
    """Run one ``jobs`` action; returns the exit code."""
    with open_client(args) as client:
        if args.action == "list":
            metadata = None
            if args.metadata is not None:
                try:
                    metadata = json.loads(args.metadata)
                except ValueError as exc:
                    raise InvalidInputError("metadata", f"is not JSON: {exc}") from exc
                except RecursionError:
                    raise InvalidInputError("metadata", "is nested too deeply") from None
            # Each filter option's dest is the job_list argument it fills.
            filters = {name: getattr(args, name) for name in _LIST_FILTERS}
            page = client.job_list(
                **filters,
                metadata=metadata,
                order_by=args.order_by,
                descending=args.desc,
                limit=args.limit,
                cursor=args.cursor,
            )
            print_jobs(page.jobs, args.json)
            if page.next_cursor is not None:
                print(f"next page: --cursor {page.next_cursor}", file=sys.stderr)
            return 0
        op = {
            "get": client.job_get,
            "cancel": client.job_cancel,
            "retry": client.job_retry,
            "delete": client.job_delete,
        }[args.action]
        print_jobs([op(job_id) for job_id in args.job_ids], args.json)
        return 0
