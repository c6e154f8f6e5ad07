"""``riverboat workers [list|scale|stop|start]``: the fleet of live workers from the shell.

``list`` (the default) reads riverboat's registry of live workers (``riverboat_client``):
one line per client with its host, pid, queues (running/max_workers), slots in use and
last heartbeat. ``scale QUEUE N``, ``stop QUEUE`` and ``start QUEUE`` ask every live
worker of that queue, or one with ``--worker ID``; each applies it at its next heartbeat.
See docs/fleet.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime

from riverboat._fleet import WorkerInfo
from riverboat.cli._arguments import whole_number
from riverboat.cli._terminal import printable
from riverboat.cli.jobs import (
    add_common,
    add_listing,
    add_queue_actions,
    add_worker_option,
    open_client,
    print_records,
)

__all__ = ["add_arguments", "run"]


def _queues_text(worker: WorkerInfo) -> str:
    parts = []
    for q in worker.queues:
        flags = "".join((" stopped" if q.stopped else "", " paused" if q.paused else ""))
        parts.append(f"{q.name} {q.running}/{q.max_workers}{flags}")
    return ", ".join(parts) or "-"


def _print_workers(workers: Sequence[WorkerInfo], as_json: bool) -> None:
    now = datetime.now(UTC)
    print_records(
        workers,
        as_json,
        ("ID", "HOST", "PID", "ALIVE", "QUEUES (RUNNING/MAX)", "SLOTS", "HEARTBEAT", "VERSION"),
        lambda w: (
            w.id,
            w.host,
            str(w.pid),
            "yes" if w.alive else "DEAD",
            _queues_text(w),
            str(w.slots_in_use),
            f"{max(0.0, (now - w.heartbeat_at).total_seconds()):.1f}s ago",
            w.riverboat_version,
        ),
        empty="(no worker in the registry)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``workers``' subcommands on its parser (``list`` by default)."""
    sub = add_listing(parser, "list the live workers (the default)")
    scale = sub.add_parser("scale", help="set a queue's max_workers on its live workers")
    add_common(scale, after_action=True)
    scale.add_argument("queue", metavar="QUEUE")
    scale.add_argument("max_workers", type=_max_workers, metavar="N")
    add_worker_option(scale)
    add_queue_actions(
        sub,
        (
            ("stop", "stop claiming from a queue on its live workers (running jobs finish)"),
            ("start", "start claiming from a queue again after `workers stop`"),
        ),
        worker=True,
        after_action=True,
    )


def _max_workers(text: str) -> int:
    from riverboat.runtime.producer import MAX_WORKERS_LIMIT

    return whole_number(1, MAX_WORKERS_LIMIT)(text)


def run(args: argparse.Namespace) -> int:
    """Run one ``workers`` action; returns the exit code."""
    action = args.action or "list"
    with open_client(args, riverboat_line=True) as client:
        if action == "list":
            _print_workers(client.workers_list(), args.json)
            return 0
        if action == "scale":
            ids = client.workers_scale(args.queue, args.max_workers, worker_id=args.worker)
            done = f"max_workers of {args.queue!r} set to {args.max_workers}"
        elif action == "stop":
            ids = client.workers_stop(args.queue, worker_id=args.worker)
            done = f"{args.queue!r} stopped"
        else:
            ids = client.workers_start(args.queue, worker_id=args.worker)
            done = f"{args.queue!r} started"
        print(
            printable(f"{done} on {len(ids)} worker(s), at their next heartbeat: {', '.join(ids)}")
        )
    return 0
