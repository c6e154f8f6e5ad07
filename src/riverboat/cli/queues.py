"""``riverboat queues list|pause|resume``: queue administration from the shell.

``pause`` and ``resume`` take a queue name or ``*`` (every queue); producers of running
clients hear about it through ``river_control``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from riverboat._queue import QueueRow
from riverboat.cli.jobs import add_common, open_client, print_table

__all__ = ["add_arguments", "run"]


def _print_queues(queues: Sequence[QueueRow], as_json: bool) -> None:
    if as_json:
        out = [
            {
                "name": q.name,
                "created_at": q.created_at.isoformat(),
                "metadata": q.metadata,
                "paused_at": q.paused_at.isoformat() if q.paused_at else None,
                "updated_at": q.updated_at.isoformat(),
            }
            for q in queues
        ]
        print(json.dumps(out, indent=2))
        return
    fmt = "%Y-%m-%d %H:%M:%S"
    print_table(
        ("NAME", "PAUSED_AT", "UPDATED_AT", "CREATED_AT"),
        [
            (
                q.name,
                q.paused_at.strftime(fmt) if q.paused_at else "-",
                q.updated_at.strftime(fmt),
                q.created_at.strftime(fmt),
            )
            for q in queues
        ],
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``queues``' subcommands on its parser."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="list queues by name")
    add_common(listing)
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    for action, text in (
        ("pause", "pause a queue, or every queue with '*'"),
        ("resume", "resume a queue, or every queue with '*'"),
    ):
        command = sub.add_parser(action, help=text, description=text)
        add_common(command)
        command.add_argument("name", metavar="QUEUE")


def run(args: argparse.Namespace) -> int:
    """Run one ``queues`` action; returns the exit code."""
    with open_client(args) as client:
        if args.action == "list":
            _print_queues(client.queue_list(limit=args.limit), args.json)
        elif args.action == "pause":
            _print_queues(client.queue_pause(args.name), args.json)
        else:
            _print_queues(client.queue_resume(args.name), args.json)
    return 0
