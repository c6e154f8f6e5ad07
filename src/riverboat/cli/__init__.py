"""The ``riverboat`` command line.

Commands live in their own modules, registered in :data:`COMMANDS` and imported only
when chosen, so ``riverboat --help`` and one command's start-up stay fast whatever the
others import. A command module provides ``add_arguments(parser)`` and
``run(args) -> int`` (the exit code).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager
from types import ModuleType

from riverboat.errors import RiverboatError

__all__ = ["COMMANDS", "main"]

# name -> (module, one-line help). Add a command by adding a row.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("riverboat.cli.demo", "work a tour of jobs on an embedded SQLite file, no server"),
    "migrate": ("riverboat.cli.migrate", "apply, revert, list or print River's schema migrations"),
    "bench": ("riverboat.cli.bench", "benchmark operations and an end-to-end run (seed PR)"),
    "worker": ("riverboat.cli.worker", "work jobs with a client's workers until signalled"),
    "jobs": ("riverboat.cli.jobs", "list, show, count, tail, cancel, retry or delete jobs"),
    "queues": ("riverboat.cli.queues", "list, pause or resume queues"),
    "workflows": ("riverboat.cli.workflows", "show, wait for, retry or cancel a workflow"),
    "workers": ("riverboat.cli.workers", "list live workers; scale, stop or start a queue on them"),
    "periodic": ("riverboat.cli.periodic", "list durable periodic jobs: last and next run"),
    "ui": ("riverboat.cli.ui", "serve the web dashboard (needs riverboat[ui])"),
}


def _version() -> str:
    """The installed distribution's version (a wheel, a checkout installed with pip), else
    the package's own ``__version__`` (a source tree on sys.path)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("riverboat")
    except PackageNotFoundError:
        from riverboat import __version__

        return __version__


def _silence_stdout() -> None:
    if sys.stdout is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)


def _load(name: str) -> ModuleType:
    return importlib.import_module(COMMANDS[name][0])


def _chosen_command(argv: Sequence[str]) -> str | None:
    # The first bare word is the command; options before it belong to the top level.
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The top-level parser; only the command named in ``argv`` gets its arguments."""
    parser = argparse.ArgumentParser(
        prog="riverboat",
        description="riverboat: a Python job queue on River's schema",
    )
    parser.add_argument("--version", action="version", version=f"riverboat {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = _chosen_command(argv)
    for name, (_module, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            _load(name).add_arguments(command_parser)
    return parser


# Seconds each database call of an operator's command (jobs, queues, workflows, workers,
# periodic) may take: a server that stopped answering without closing the connection
# (a stalled proxy, a partitioned host) held the command for ever, --timeout or not.
# Generous, for a count or a bulk batch on a big table; a command with --timeout (the
# waits, tail) bounds each call by it, and CALL_SLACK. Not for worker, ui, migrate,
# bench and demo, which run long on purpose (the worker and the dashboard set deadlines
# of their own).
OPERATOR_CALL_TIMEOUT = 60.0
# Seconds past its --timeout a call of a command that takes one may take.
CALL_SLACK = 2.0
_OPERATOR_COMMANDS = frozenset({"jobs", "queues", "workflows", "workers", "periodic"})


def calls_within(seconds: float | None) -> AbstractContextManager[None]:
    """Each database call in the block ends within ``seconds`` and CALL_SLACK (None: no
    time of the command's own), and at most OPERATOR_CALL_TIMEOUT."""
    from riverboat.drivers.base import call_deadline

    if seconds is None:
        return call_deadline(OPERATOR_CALL_TIMEOUT)
    return call_deadline(min(OPERATOR_CALL_TIMEOUT, seconds + CALL_SLACK))


# A write to stdout failed for a reason of the machine's, not of riverboat's.
_OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EBADF)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``riverboat`` console script; returns the exit code.

    Errors riverboat raises on purpose (bad URL, schema too new, a failing migration)
    are printed as one line on stderr with exit code 1. Set ``RIVERBOAT_TRACEBACK=1``
    to see the traceback instead.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    try:
        if args.command in _OPERATOR_COMMANDS:
            # The pool's own warnings (a connection found broken and dropped) went to
            # stderr beside the command's one-line error.
            logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
            with calls_within(getattr(args, "timeout", None)):
                code: int = _load(args.command).run(args)
        else:
            code = _load(args.command).run(args)
        if sys.stdout is not None:  # None when started with stdout closed (>&-)
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`riverboat jobs list --json | head`): not an error of
        # ours. Point stdout at /dev/null so the interpreter's final flush is quiet too.
        _silence_stdout()
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by it
    except RiverboatError as exc:
        if os.environ.get("RIVERBOAT_TRACEBACK"):
            raise
        # Server messages can span lines (HINT, DETAIL); keep the error on one, and
        # write the control characters of text it quotes as escapes (cli/_terminal.py).
        from riverboat.cli._terminal import printable

        print(f"riverboat: error: {printable(' '.join(str(exc).split()))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRNOS or os.environ.get("RIVERBOAT_TRACEBACK"):
            raise
        # Output that could not be written (a full disk, a closed descriptor): one line.
        _silence_stdout()
        print(f"riverboat: error: writing output: {exc.strerror}", file=sys.stderr)
        return 1
    return code
