"""``riverboat queues list|pause|resume|limits``: queue administration from the shell.

``pause`` and ``resume`` take a queue name or ``*`` (every queue); producers of running
clients hear about it through ``river_control``. ``limits`` shows each flow-control limit
live workers report, per partition: its use and the due jobs it holds back.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from riverboat._admin import JOB_LIST_LIMIT_MAX
from riverboat._queue import QueueRow
from riverboat.cli._arguments import add_limit
from riverboat.cli.jobs import (
    add_common,
    add_queue_actions,
    open_client,
    print_records,
    print_table,
)
from riverboat.flow import LimitUse

__all__ = ["add_arguments", "run"]


def _print_queues(queues: Sequence[QueueRow], as_json: bool) -> None:
    fmt = "%Y-%m-%d %H:%M:%S"
    print_records(
        queues,
        as_json,
        ("NAME", "PAUSED_AT", "UPDATED_AT", "CREATED_AT"),
        lambda q: (
            q.name,
            q.paused_at.strftime(fmt) if q.paused_at else "-",
            q.updated_at.strftime(fmt),
            q.created_at.strftime(fmt),
        ),
    )


def _describe(use: LimitUse) -> str:
    if use.limit == "rate":
        return f"rate {use.value}/{use.period:g}s"
    if use.limit == "local":
        return f"local {use.value} ({use.worker})" if use.worker else f"local {use.value}"
    if use.limit == "sequence":
        return "sequence"
    return f"concurrency {use.value}"


def _print_limits(uses: Sequence[LimitUse], as_json: bool) -> None:
    if as_json:
        out = [
            {
                "queue": u.queue,
                "limit": u.limit,
                "value": u.value,
                "period": u.period,
                "partition": u.partition,
                "in_use": u.in_use,
                "due": u.due,
                "held_back": u.held_back,
                "worker": u.worker,
            }
            for u in uses
        ]
        print(json.dumps(out, indent=2))
        return
    if not uses:
        print("no limits: no live worker reports flow control for these queues")
        return
    print_table(
        ("QUEUE", "LIMIT", "PARTITION", "IN_USE", "DUE", "HELD_BACK"),
        [
            (
                u.queue,
                _describe(u),
                _cut(json.dumps(u.partition)) if u.partition else "(queue)",
                str(u.in_use),
                str(u.due),
                str(u.held_back),
            )
            for u in uses
        ],
    )


PARTITION_WIDTH = 60  # characters of a partition the table shows (--json: all of it)


def _cut(text: str) -> str:
    """A partition as the table shows it: a 300-character args value widened every row
    past 300 columns."""
    return text if len(text) <= PARTITION_WIDTH else text[: PARTITION_WIDTH - 1] + "…"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``queues``' subcommands on its parser."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="list queues by name")
    add_common(listing)
    add_limit(listing, JOB_LIST_LIMIT_MAX, 100, "at most this many")
    limits = sub.add_parser(
        "limits",
        help="flow-control limits, their use and the jobs they hold back",
        description="Each concurrency and rate limit live workers report (docs/flow-control.md),"
        " per partition: IN_USE is jobs running (a rate limit: started in its window), DUE"
        " available jobs already due, HELD_BACK those the limit keeps from starting now.",
    )
    add_common(limits)
    limits.add_argument("queue", nargs="?", metavar="QUEUE", help="only this queue")
    add_queue_actions(
        sub,
        (
            ("pause", "pause a queue, or every queue with '*'"),
            ("resume", "resume a queue, or every queue with '*'"),
        ),
    )


def run(args: argparse.Namespace) -> int:
    """Run one ``queues`` action; returns the exit code."""
    with open_client(args, riverboat_line=args.action == "limits") as client:
        if args.action == "limits":
            _print_limits(client.queue_limits(args.queue), args.json)
            return 0
        # Every other action shows the queues it listed or changed.
        if args.action == "list":
            queues = client.queue_list(limit=args.limit)
        elif args.action == "pause":
            queues = client.queue_pause(args.queue)
        else:
            queues = client.queue_resume(args.queue)
        _print_queues(queues, args.json)
    return 0
