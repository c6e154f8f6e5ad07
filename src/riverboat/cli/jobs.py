"""``riverboat jobs list|get|wait|count|tail|cancel|retry|delete``: job administration
from the shell.

The database comes from ``--database-url`` or ``DATABASE_URL``. Output is a table, or
one JSON document with ``--json``. ``list`` prints the cursor of the next page (if any)
on stderr, to pass back with ``--cursor``. ``retry``, ``cancel`` and ``delete`` take job
ids, or filters (``--kind charge_card --state discarded``) for every matching job,
worked in bounded batches, with ``--dry-run`` to count them first.

Exit codes: 0 done (a bulk action that matched nothing says so and exits 0), 1 an error
(a job id that does not exist, a database that cannot be read; one ``riverboat: error:``
line), 2 a usage error. ``wait`` also exits 4 for a job that ended discarded or
cancelled (not 1: a script must tell a failed job from a job id that does not exist),
and 3 when ``--timeout`` passed first.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from riverboat._admin import JOB_LIST_LIMIT_MAX, JobListCursor
from riverboat._job import FINALIZED_STATES, LIFECYCLE_ORDER, JobRow, JobState
from riverboat._json import date_time_text
from riverboat.cli import calls_within
from riverboat.cli._arguments import add_limit, job_id, seconds, whole_number
from riverboat.cli._database import add_database_options, checked_driver, database_url
from riverboat.cli._terminal import printable
from riverboat.client import Client
from riverboat.errors import InvalidInputError, JobRunningError, NotFoundError, WaitTimeoutError
from riverboat.workflow import cancelled_by_dependency

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["add_arguments", "run"]

_LIST_FILTERS = ("ids", "kinds", "queues", "states", "priorities", "tags_all", "tags_any")
_PAST = {"retry": "retried", "cancel": "cancelled", "delete": "deleted"}
_DURATION_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*(s|m|h|d|w)$")
_DURATION_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
ERROR_WIDTH = 60


def add_common(parser: argparse.ArgumentParser, *, after_action: bool = False) -> None:
    """``--database-url``, ``--schema`` and ``--json``. ``after_action``: on an action
    of a command that also takes them before its action (:func:`add_listing`): one not
    given after the action leaves the value given before it alone, where argparse
    would write the action's default over it (and act on $DATABASE_URL's database)."""
    default = argparse.SUPPRESS if after_action else None
    add_database_options(parser, default=default)
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if after_action else False,
        help="print JSON instead of a table",
    )


@contextmanager
def open_client(args: argparse.Namespace, *, riverboat_line: bool = False) -> Iterator[Client]:
    """A client on the command's database, checked as migrated (with riverboat's own
    line too, for ``riverboat_line``: :func:`checked_driver`)."""
    with checked_driver(database_url(args), args.schema, riverboat_line=riverboat_line) as driver:
        yield Client(driver)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        # Naive only as datetime.min, an error entry's "at" another client left out or
        # wrote unreadably: with its offset, as every other time here is.
        return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return value


def _pretty(value: Any) -> str:
    """Indented JSON, or a note for a value another client nested too deeply to print."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except RecursionError:
        return "(nested too deeply to print)"


def _args_of(job: JobRow) -> Any:
    try:
        return job.args
    except ValueError:  # a row whose args can't be decoded: show the stored text
        return job.encoded_args


def _number_text(text: str) -> float | str:
    """A JSON number as Python reads it, or its text when it is past float's range."""
    value = float(text)
    return value if math.isfinite(value) else text


def _finite(value: Any) -> tuple[Any, bool]:
    """``value`` with each float JSON can't write (inf or NaN) as a string, and whether
    there was one."""
    if isinstance(value, float):
        return (value, False) if math.isfinite(value) else (json.dumps(value), True)
    if isinstance(value, dict):
        pairs = [(k, _finite(v)) for k, v in value.items()]
        return {k: v for k, (v, _) in pairs}, any(c for _, (_, c) in pairs)
    if isinstance(value, list):
        items = [_finite(v) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    return value, False


def _json_writable(value: Any, name: str, problems: list[str], text: str | None) -> Any:
    """``value`` as JSON can hold it. A row River's Go client wrote on SQLite keeps a
    number such as ``1e400`` as given; Python reads it as ``inf``, which ``json.dumps``
    writes as ``Infinity``, not JSON: it is shown as its stored ``text`` (or ``"Infinity"``
    without one) and named in ``problems``."""
    try:
        value, changed = _finite(value)
    except RecursionError:  # nested too deeply: _printable leaves it out
        return value
    if not changed:
        return value
    problems.append(f"{name}: a number past float's range is shown as a string")
    if text is not None:
        try:
            return json.loads(text, parse_float=_number_text)
        except (ValueError, RecursionError):
            pass
    return value


def job_dict(job: JobRow) -> dict[str, Any]:
    problems = list(job.decode_errors)
    try:
        args = _json_writable(job.args, "args", problems, job.encoded_args)
    except ValueError as exc:  # a row another client wrote: not JSON, or nested too deeply
        args = None
        problems.append(f"args: {exc}")
    metadata = _json_writable(job.metadata, "metadata", problems, None)
    out = {
        "id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "state": job.state.value,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "priority": job.priority,
        "args": args,
        "metadata": metadata,
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
    # datetime.min: an error entry another client wrote without a readable "at".
    if value is None or value == datetime.min:
        return "-"
    return date_time_text(value, " ")


def last_error(job: JobRow, width: int = ERROR_WIDTH) -> str:
    """The job's latest error on one line, cut to ``width`` (``-`` when it has none)."""
    if not job.errors:
        return "-"
    text = " ".join(job.errors[-1].error.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, empty: str | None = None
) -> None:
    """Rows under their headers in aligned columns; ``empty``: a line printed after the
    headers when there is no row, saying why."""
    # Stored text (a kind, an error) must not drive the terminal: see cli/_terminal.py.
    cells = [[printable(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for cell_row in cells:
        widths = [max(w, len(cell)) for w, cell in zip(widths, cell_row, strict=True)]
    for line in (headers, *cells):
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    if not cells and empty is not None:
        print(empty)


Record = TypeVar("Record", bound="DataclassInstance")


def print_records(
    records: Sequence[Record],
    as_json: bool,
    headers: Sequence[str],
    row: Callable[[Record], Sequence[str]],
    *,
    empty: str | None = None,
    derived: Callable[[Record], dict[str, Any]] | None = None,
) -> None:
    """A listing of dataclass records: with ``--json`` a JSON list, datetimes in ISO 8601,
    each object ending with what ``derived`` gives for its record (properties that are
    not fields); else a table of ``row(record)`` under ``headers`` (``empty`` as
    :func:`print_table`)."""
    if not as_json:
        print_table(headers, [row(r) for r in records], empty=empty)
        return
    out = [
        {
            **{k: v.isoformat() if isinstance(v, datetime) else v for k, v in asdict(r).items()},
            **(derived(r) if derived is not None else {}),
        }
        for r in records
    ]
    print(json.dumps(out, indent=2))


T = TypeVar("T")
EXIT_FAILED = 4  # `wait`: what was waited for finished, but not completed (1: an error)
EXIT_TIMEOUT = 3  # `wait`: still unfinished after --timeout


def wait_and_show(
    wait: Callable[[], T], show: Callable[[T], None], completed: Callable[[T], bool]
) -> int:
    """A ``wait`` command: show what ``wait()`` returns, or what it last saw when it
    timed out (with the timeout on stderr); the exit code says which and how it ended."""
    try:
        result = wait()
    except WaitTimeoutError as exc:
        show(cast(T, exc.last))  # the same kind wait() returns
        print(f"riverboat: {exc}", file=sys.stderr)
        return EXIT_TIMEOUT
    show(result)
    return 0 if completed(result) else EXIT_FAILED


def add_listing(parser: argparse.ArgumentParser, help: str) -> Any:
    """A command whose ``list`` subcommand (``help``) is also what it does without one:
    the common options on both; returns the subparsers, for the other actions."""
    add_common(parser)
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    add_common(sub.add_parser("list", help=help), after_action=True)
    return sub


def add_worker_option(parser: argparse.ArgumentParser) -> None:
    """``--worker ID``: a fleet command sent to one live worker instead of all."""
    parser.add_argument("--worker", metavar="ID", help="only this worker (default: all)")


def add_queue_actions(
    sub: Any,
    actions: Sequence[tuple[str, str]],
    *,
    worker: bool = False,
    after_action: bool = False,
) -> None:
    """Subcommands that each take a QUEUE (and with ``worker``, ``--worker``), as
    (name, help) pairs; ``after_action`` as for :func:`add_common`."""
    for action, text in actions:
        command = sub.add_parser(action, help=text, description=text)
        add_common(command, after_action=after_action)
        command.add_argument("queue", metavar="QUEUE")
        if worker:
            add_worker_option(command)


def print_jobs(jobs: Sequence[JobRow], as_json: bool) -> None:
    if as_json:
        print(json.dumps([_printable(j) for j in jobs], indent=2, default=str))
        return
    print_table(
        (
            "ID",
            "KIND",
            "QUEUE",
            "STATE",
            "ATTEMPT",
            "PRI",
            "SCHEDULED_AT",
            "FINALIZED_AT",
            "LAST_ERROR",
        ),
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
                last_error(j),
            )
            for j in jobs
        ],
    )


def _indented(text: str, prefix: str = "    ") -> str:
    """``text`` (made printable: its only line breaks are newlines) indented."""
    return "\n".join(prefix + line for line in text.rstrip("\n").split("\n"))


def _listed(items: Sequence[str | None]) -> str:
    """A text array's items (another client may have stored a NULL among them)."""
    return ", ".join("null" if item is None else item for item in items) or "-"


def print_job_detail(job: JobRow) -> None:
    """Everything about one job, for a person: fields, args and metadata as JSON, and
    every error with its trace (oldest first)."""
    fields = [
        ("id", str(job.id)),
        ("kind", job.kind),
        ("queue", job.queue),
        ("state", job.state.value),
        ("attempt", f"{job.attempt}/{job.max_attempts}"),
        ("priority", str(job.priority)),
        ("tags", _listed(job.tags)),
        ("created_at", _when(job.created_at)),
        ("scheduled_at", _when(job.scheduled_at)),
        ("attempted_at", _when(job.attempted_at)),
        ("finalized_at", _when(job.finalized_at)),
        ("attempted_by", _listed(job.attempted_by or [])),
    ]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name.ljust(width)}  {printable(value)}")
    print("args:")
    print(_indented(printable(_pretty(_args_of(job)), lines=True)))
    print("metadata:")
    print(_indented(printable(_pretty(job.metadata), lines=True)))
    # A row another client wrote that riverboat could not read whole, or args no JSON
    # reader takes as they are: what the fields above show in its place (--json's
    # "decode_errors", the same list).
    problems = _printable(job).get("decode_errors", [])
    if problems:
        print("could not decode:")
        for problem in problems:
            print(_indented(printable(problem)))
    if not job.errors:
        print("errors: none")
        return
    print(f"errors ({len(job.errors)}):")
    for entry in job.errors:
        print(f"  attempt {entry.attempt} at {_when(entry.at)}: {printable(entry.error)}")
        if entry.trace:
            print(_indented(printable(entry.trace.rstrip(), lines=True), "      "))


# The oldest age a filter takes: now minus more went past year 1 (an OverflowError).
AGE_MAX = timedelta(days=36_500)


def parse_age(text: str) -> timedelta:
    """``30s``, ``15m``, ``2h``, ``7d``, ``1w``; at most AGE_MAX (100 years)."""
    found = _DURATION_RE.match(text.strip())
    if not found or float(found.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age like 30m, 2h or 7d")
    seconds = float(found.group(1)) * _DURATION_UNIT[found.group(2)]
    if seconds > AGE_MAX.total_seconds():
        raise argparse.ArgumentTypeError(f"{text!r} is more than 100 years (36500d)")
    return timedelta(seconds=seconds)


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", action="append", dest="kinds", metavar="KIND")
    parser.add_argument("--queue", action="append", dest="queues", metavar="QUEUE")
    parser.add_argument(
        "--state", action="append", dest="states", choices=[s.value for s in JobState]
    )
    # The same meaning for list, count and the actions: `cancel --tag a --tag b` once
    # took any of them (--tag meant every one for list), and so acted on jobs that
    # `list` with the same filters did not show.
    parser.add_argument("--tag", action="append", dest="tags_all", metavar="TAG",
                        help="jobs having every given tag")  # fmt: skip
    parser.add_argument("--any-tag", action="append", dest="tags_any", metavar="TAG",
                        help="jobs having at least one of the given tags")  # fmt: skip
    parser.add_argument(
        "--args-key",
        action="append",
        dest="args_keys",
        metavar="KEY",
        help="jobs whose args have this top-level key (repeat: every one)",
    )
    parser.add_argument(
        "--args-text",
        metavar="TEXT",
        help="jobs whose args' JSON contains this text (case-insensitive)",
    )
    parser.add_argument(
        "--older-than",
        type=parse_age,
        metavar="AGE",
        help="jobs created longer ago than AGE (30m, 2h, 7d)",
    )


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    for name in (*_LIST_FILTERS, "args_keys", "args_text"):
        value = getattr(args, name, None)
        if value is not None:
            filters[name] = value
    if getattr(args, "older_than", None) is not None:
        filters["created_before"] = datetime.now(UTC) - args.older_than
    return filters


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``jobs``' subcommands on its parser."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = sub.add_parser(
        "list", help="list jobs, filtered and paginated, with their last error"
    )
    add_common(listing)
    listing.add_argument("--id", type=job_id, action="append", dest="ids", metavar="ID")
    _add_filters(listing)
    listing.add_argument("--priority", type=whole_number(1, 4), action="append", dest="priorities")
    listing.add_argument("--metadata", metavar="JSON", help="jobs whose metadata contains this")
    listing.add_argument(
        "--order-by", choices=("id", "time", "scheduled_at", "finalized_at"), default="id"
    )
    listing.add_argument("--desc", action="store_true", help="descending order")
    add_limit(listing, JOB_LIST_LIMIT_MAX, 100, "page size")
    listing.add_argument("--cursor", help="continue after this cursor (printed by a prior list)")

    get = sub.add_parser("get", help="show jobs: args, metadata, every error with its trace")
    add_common(get)
    get.add_argument("job_ids", type=job_id, nargs="+", metavar="ID")

    wait = sub.add_parser(
        "wait",
        help="wait until a job is finalized and show it (exit 0 completed, 4 discarded or "
        "cancelled, 3 timeout)",
    )
    add_common(wait)
    wait.add_argument("job_id", type=job_id, metavar="ID")
    wait.add_argument("--timeout", type=seconds(), default=60.0, help="seconds (default 60)")

    count = sub.add_parser("count", help="count jobs by state (and queue, kind)")
    add_common(count)
    _add_filters(count)
    count.add_argument(
        "--by",
        action="append",
        choices=("state", "queue", "kind"),
        help="group by these (repeatable; default: state)",
    )

    tail = sub.add_parser(
        "tail",
        aliases=["watch"],
        help="print job outcomes as they happen (completed, failed with their error...)",
    )
    add_common(tail)
    tail.add_argument("--kind", action="append", dest="kinds", metavar="KIND")
    tail.add_argument("--queue", action="append", dest="queues", metavar="QUEUE")
    tail.add_argument(
        "--interval",
        type=seconds(positive=True),
        default=1.0,
        metavar="S",
        help="poll every S seconds (1)",
    )
    tail.add_argument(
        "--max-events",
        type=whole_number(1),
        metavar="N",
        help="stop after N outcomes (default: never)",
    )
    tail.add_argument(
        "--timeout", type=seconds(), metavar="S", help="stop after S seconds (default: never)"
    )
    tail.add_argument("--since", type=parse_age, metavar="AGE", help="start AGE ago (default: now)")

    for action, text in (
        ("cancel", "cancel jobs (a running job is cancelled by its producer)"),
        ("retry", "make jobs available again now"),
        ("delete", "delete jobs (running jobs are refused)"),
    ):
        command = sub.add_parser(
            action,
            help=text + ", by id or by filter",
            description=text + ". Give job ids, or filters for every job matching them "
            "(worked in batches of --batch-size, each one bounded statement).",
        )
        add_common(command)
        command.add_argument("job_ids", type=job_id, nargs="*", metavar="ID")
        _add_filters(command)
        command.add_argument(
            "--all", action="store_true", help="every job the action applies to (no filter)"
        )
        command.add_argument(
            "--dry-run", action="store_true", help="only say how many jobs it would change"
        )
        command.add_argument(
            "--batch-size",
            type=whole_number(1, 10_000),
            default=500,
            metavar="N",
            help="rows per statement (500)",
        )


def _show_waited(job: JobRow, as_json: bool) -> None:
    if as_json:
        print_jobs([job], True)
    else:
        print_job_detail(job)


def _wait(client: Any, args: argparse.Namespace) -> int:
    """``jobs wait``: the job once finalized (``job_wait``: woken by LISTEN/NOTIFY on
    Postgres, see docs/workflows.md); exit 0 completed, 4 discarded or cancelled, 3
    still unfinished after ``--timeout``."""
    return wait_and_show(
        lambda: client.job_wait(args.job_id, timeout=args.timeout),
        lambda job: _show_waited(job, args.json),
        lambda job: job.state is JobState.COMPLETED,
    )


def run(args: argparse.Namespace) -> int:
    """Run one ``jobs`` action; returns the exit code."""
    with open_client(args) as client:
        if args.action == "list":
            return _list(client, args)
        if args.action == "get":
            jobs = [client.job_get(job_id) for job_id in args.job_ids]
            if args.json:
                print_jobs(jobs, True)
            else:
                for i, job in enumerate(jobs):
                    if i:
                        print()
                    print_job_detail(job)
            return 0
        if args.action == "wait":
            return _wait(client, args)
        if args.action == "count":
            return _count(client, args)
        if args.action in ("tail", "watch"):
            return _tail(client, args)
        return _act(client, args)


def _list(client: Client, args: argparse.Namespace) -> int:
    metadata = None
    if args.metadata is not None:
        try:
            metadata = json.loads(args.metadata)
        except ValueError as exc:
            raise InvalidInputError("metadata", f"is not JSON: {exc}") from exc
        except RecursionError:
            raise InvalidInputError("metadata", "is nested too deeply") from None
    page = client.job_list(
        **_filters(args),
        metadata=metadata,
        order_by=args.order_by,
        descending=args.desc,
        limit=args.limit,
        cursor=args.cursor,
        preview=not args.json,  # the table shows no args or metadata, one error
    )
    print_jobs(page.jobs, args.json)
    if page.next_cursor is not None:
        print(f"next page: --cursor {page.next_cursor}", file=sys.stderr)
    return 0


def _count(client: Client, args: argparse.Namespace) -> int:
    by = list(dict.fromkeys(args.by or ["state"]))
    rows = client.job_count_grouped(**_filters(args))
    totals: Counter[tuple[str, ...]] = Counter()
    for row in rows:
        values = {"state": row.state.value, "queue": row.queue, "kind": row.kind}
        totals[tuple(values[name] for name in by)] += row.count
    ordered: list[tuple[tuple[str, ...], int]]
    if by == ["state"]:  # every state, in lifecycle order, zeros included
        ordered = [((s.value,), totals.get((s.value,), 0)) for s in LIFECYCLE_ORDER]
    else:
        ordered = sorted(totals.items())
    if args.json:
        print(json.dumps([{**dict(zip(by, key, strict=True)), "count": n} for key, n in ordered]))
        return 0
    print_table(
        [*(name.upper() for name in by), "COUNT"],
        [[*key, str(n)] for key, n in ordered]
        + [[*([""] * (len(by) - 1)), "total", str(sum(totals.values()))]],
    )
    return 0


def _outcome_line(job: JobRow) -> str:
    moment = job.finalized_at or job.scheduled_at
    text = (
        f"{moment.astimezone(UTC).strftime('%H:%M:%S')}  {job.state.value:<9}  "
        f"job {job.id}  {job.kind}  queue={job.queue}  attempt {job.attempt}/{job.max_attempts}"
    )
    if job.state in (JobState.DISCARDED, JobState.RETRYABLE, JobState.CANCELLED) and job.errors:
        text += f"  error: {last_error(job, 200)}"
    return printable(text)


def _calls_until(deadline: float | None) -> AbstractContextManager[None]:
    """Database calls that end by ``deadline`` (monotonic; and CALL_SLACK): a server
    that stopped answering held `jobs tail --timeout 5` for minutes."""
    return calls_within(None if deadline is None else max(deadline - time.monotonic(), 0.0))


# How much older than the newest outcome printed a finalized_at may be and the outcome
# still be printed by `jobs tail` (see _tail): a transaction open longer that finalized
# a job, or a writer whose clock is that far behind, is missed.
TAIL_LATE = timedelta(seconds=10)


def _tail(client: Client, args: argparse.Namespace) -> int:
    """Poll for outcomes newer than the start: finalized jobs in the order they were
    finalized (a keyset on finalized_at), and failed attempts waiting for their retry
    (retryable jobs whose attempt was not printed yet)."""
    start = datetime.now(UTC) - (args.since or timedelta(0))
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    filters: dict[str, Any] = {
        k: v for k, v in (("kinds", args.kinds), ("queues", args.queues)) if v is not None
    }
    # The newest finalized_at read, and the outcomes printed within TAIL_LATE of it: a
    # row's finalized_at is its writer's clock or its transaction's start (now()), so a
    # job can turn up finalized before outcomes already printed. Each poll reads from
    # TAIL_LATE before the newest again, and skips what it printed.
    newest = start
    printed_finals: set[tuple[int, datetime]] = set()
    seen_failures: set[tuple[int, int]] = set()
    # Retryable jobs already failing before the start are not news.
    # The lines print no args or metadata and one error: rows read as a listing reads
    # them (every poll re-reads up to 10,000 retryable jobs). --json prints them whole.
    preview = not args.json

    def retryable() -> list[JobRow]:
        with _calls_until(deadline):
            return client.job_list(
                states=[JobState.RETRYABLE], limit=10_000, preview=preview, **filters
            ).jobs

    for job in retryable():
        if job.attempted_at is None or job.attempted_at < start:
            seen_failures.add((job.id, job.attempt))
    printed = 0
    while True:
        events: list[JobRow] = []
        cursor = JobListCursor(0, "finalized_at", "finalized_at", max(start, newest - TAIL_LATE))
        while True:  # every finalized page since the cursor
            with _calls_until(deadline):
                page = client.job_list(
                    states=sorted(FINALIZED_STATES),
                    order_by="finalized_at",
                    limit=500,
                    cursor=cursor,
                    preview=preview,
                    **filters,
                )
            for job in page.jobs:
                if job.finalized_at is None:
                    continue
                newest = max(newest, job.finalized_at)
                if (job.id, job.finalized_at) not in printed_finals:
                    printed_finals.add((job.id, job.finalized_at))
                    events.append(job)
            if page.last_cursor is not None:
                cursor = page.last_cursor
            if page.next_cursor is None:
                break
        printed_finals = {key for key in printed_finals if key[1] >= newest - TAIL_LATE}
        retrying = retryable()
        for job in retrying:
            if (job.id, job.attempt) not in seen_failures:
                seen_failures.add((job.id, job.attempt))
                events.append(job)
        events.sort(key=lambda j: (j.finalized_at or j.attempted_at or start, j.id))
        for job in events:
            print(json.dumps(job_dict(job)) if args.json else _outcome_line(job), flush=True)
            printed += 1
            if args.max_events is not None and printed >= args.max_events:
                return 0
        if deadline is not None and time.monotonic() >= deadline:
            return 0
        pause = args.interval
        if deadline is not None:
            pause = max(0.0, min(pause, deadline - time.monotonic()))
        time.sleep(pause)


def _act(client: Client, args: argparse.Namespace) -> int:
    action = args.action
    # Each job once, in the order given: `delete 35 35` deleted it, then failed with
    # "job 35 not found" (exit 1); `retry 2 2 2` printed it three times.
    args.job_ids = list(dict.fromkeys(args.job_ids))
    filters = _filters(args)
    if args.job_ids and not filters and not args.all:
        if args.dry_run:
            filters["ids"] = args.job_ids
        else:
            op = {"cancel": client.job_cancel, "retry": client.job_retry}.get(
                action, client.job_delete
            )
            # Each id on its own: one missing (or running, for delete) id neither stops
            # the rest nor hides what was already changed (printed first; then each
            # refusal, and exit 1).
            done: list[JobRow] = []
            missing: list[str] = []
            for job_id in args.job_ids:
                try:
                    done.append(op(job_id))
                except (NotFoundError, JobRunningError, InvalidInputError) as exc:
                    missing.append(str(exc))
            # A workflow task retried before its failed dependency, given later, was
            # cancelled again by it: retried again once the others were, for as long
            # as that changes something.
            while action == "retry":
                again = [n for n, job in enumerate(done) if cancelled_by_dependency(job)]
                redone = {n: op(done[n].id) for n in again}
                if not again or all(cancelled_by_dependency(job) for job in redone.values()):
                    break
                done = [redone.get(n, job) for n, job in enumerate(done)]
            if done or args.json:  # no table of nothing above the errors (JSON: [])
                print_jobs(done, args.json)
            for problem in missing:
                print(f"riverboat: error: {problem}", file=sys.stderr)
            return 1 if missing else 0
    if args.job_ids:
        filters["ids"] = args.job_ids
    if not filters and not args.all:
        raise InvalidInputError(
            "filters",
            f"give job ids, or filters (--state, --kind, --queue, --tag, --args-key, "
            f"--args-text, --older-than) for every job to {action}, or --all",
        )
    described = _describe(filters) or "every job"
    if args.dry_run:
        would = client.job_count_matching(action=action, **filters)
        matching = client.job_count_matching(**filters)
        others = matching - would
        if args.json:  # what a script piping --json to jq can read, as without --dry-run
            print(json.dumps({"action": action, "would": would, "matching": matching}))
            return 0
        note = f"; {matching} match, {action} leaves the other {others} alone" if others else ""
        print(f"would {action} {would} job{'s' if would != 1 else ''} ({described}{note})")
        return 0
    changed: list[JobRow] = []
    if action == "delete":
        while True:
            batch = client.job_delete_many(**filters, limit=args.batch_size, all=True)
            changed.extend(batch)
            if len(batch) < args.batch_size:
                break
    else:
        bulk = client.job_retry_many if action == "retry" else client.job_cancel_many
        after_id: int | None = 0
        while after_id is not None:
            result = bulk(**filters, limit=args.batch_size, after_id=after_id, all=True)
            changed.extend(result.jobs)
            after_id = result.next_after_id
    if args.json:
        print_jobs(changed, True)
        return 0
    # Workflow tasks whose dependency (outside the filters) still failed: the retry
    # cancelled them again at once, which is no retry.
    recancelled = [job for job in changed if action == "retry" and cancelled_by_dependency(job)]
    count = len(changed) - len(recancelled)
    if count == 0 and not recancelled:
        print(f"no job to {action} ({described})")
    else:
        print(f"{_PAST[action]} {count} job{'s' if count != 1 else ''} ({described})")
    if recancelled:
        tasks = f"{len(recancelled)} workflow task{'s' if len(recancelled) != 1 else ''}"
        print(
            f"riverboat: {tasks} cancelled again: a dependency still failed (retry that "
            "task, or the workflow): "
            + ", ".join(str(job.id) for job in recancelled[:20])
            + (" ..." if len(recancelled) > 20 else ""),
            file=sys.stderr,
        )
    return 0


def _describe(filters: dict[str, Any]) -> str:
    parts = []
    for name, value in filters.items():
        if name == "created_before":
            parts.append(f"created before {_when(value)} UTC")
        elif isinstance(value, list):
            parts.append(f"{name.removesuffix('s')}={','.join(map(str, value))}")
        else:
            parts.append(f"{name}={value}")
    return ", ".join(parts)
