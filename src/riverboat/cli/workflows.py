"""``riverboat workflows list`` and ``riverboat workflows get|wait|retry|cancel ID``:
workflows from the shell (see docs/workflows.md).

``list`` prints the newest workflows with their task counts; ``get`` prints each task
with its dependencies, state and job id (``--json`` adds the jobs' rows); ``wait`` blocks
until every task is finalized (exit 0 when all completed, 4 when one failed, 3 on
``--timeout``); ``retry`` and ``cancel`` act, then print the workflow as ``get`` does.
"""

from __future__ import annotations

import argparse
import json

from riverboat.cli._arguments import add_limit, seconds
from riverboat.cli._terminal import printable
from riverboat.cli.jobs import (
    add_common,
    job_dict,
    open_client,
    print_records,
    print_table,
    wait_and_show,
)
from riverboat.workflow import WORKFLOW_LIST_MAX, WorkflowInfo, WorkflowSummary

__all__ = ["add_arguments", "run"]


def _print(info: WorkflowInfo, as_json: bool) -> None:
    if as_json:
        body = {
            "id": info.id,
            "name": info.name,
            "state": info.state,
            "tasks": [
                {
                    "name": t.name,
                    "deps": t.deps,
                    "on_dep_failure": t.on_dep_failure,
                    "cancelled_by": t.cancelled_by,
                    "job": job_dict(t.job),
                }
                for t in info.tasks
            ],
        }
        print(json.dumps(body, indent=2))
        return
    # The id and name are stored text (any client may have written them): escaped as
    # the tables' cells are.
    print(printable(f"workflow {info.id} ({info.name}): {info.state}, {len(info.tasks)} tasks"))
    print_table(
        ("TASK", "STATE", "JOB", "KIND", "DEPS", "NOTE"),
        [
            (
                t.name,
                str(t.state),
                str(t.job.id),
                t.job.kind,
                ",".join(t.deps) or "-",
                f"cancelled by {t.cancelled_by}" if t.cancelled_by else "",
            )
            for t in info.tasks
        ],
    )


def _print_list(summaries: list[WorkflowSummary], as_json: bool) -> None:
    print_records(
        summaries,
        as_json,
        ("ID", "NAME", "STATE", "TASKS", "COMPLETED", "FAILED", "UNFINISHED", "CREATED"),
        lambda s: (
            s.id,
            s.name or "-",
            s.state,
            str(s.tasks),
            str(s.completed),
            str(s.failed),
            str(s.unfinished),
            s.created_at.isoformat(timespec="seconds") if s.created_at else "-",
        ),
        empty="(no workflow)",
        derived=lambda s: {"state": s.state},
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``workflows``' subcommands on its parser."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    text = "list the newest workflows, their states and task counts"
    listing = sub.add_parser("list", help=text, description=text)
    add_common(listing)
    add_limit(listing, WORKFLOW_LIST_MAX, 20, "at most this many")
    for action, text in (
        ("get", "show a workflow's tasks, their dependencies and states"),
        ("wait", "wait until every task is finalized (exit 0 completed, 4 failed, 3 timeout)"),
        ("retry", "retry failed tasks; tasks they cancelled wait for them again"),
        ("cancel", "cancel every task that has not finished"),
    ):
        command = sub.add_parser(action, help=text, description=text)
        add_common(command)
        command.add_argument("workflow_id", metavar="ID")
        if action == "wait":
            command.add_argument(
                "--timeout", type=seconds(), default=60.0, help="seconds (default 60)"
            )


def run(args: argparse.Namespace) -> int:
    """Run one ``workflows`` action; returns the exit code."""
    with open_client(args) as client:
        if args.action == "list":
            _print_list(client.workflow_list(limit=args.limit), args.json)
        elif args.action == "get":
            _print(client.workflow_get(args.workflow_id), args.json)
        elif args.action == "wait":
            return wait_and_show(
                lambda: client.workflow_wait(args.workflow_id, timeout=args.timeout),
                lambda info: _print(info, args.json),
                lambda info: info.state == "completed",
            )
        else:
            if args.action == "retry":
                client.workflow_retry(args.workflow_id)
            else:
                client.workflow_cancel(args.workflow_id)
            _print(client.workflow_get(args.workflow_id), args.json)
    return 0
