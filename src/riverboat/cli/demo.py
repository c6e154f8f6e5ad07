"""``riverboat demo``: work a realistic mix of jobs on an embedded SQLite file.

Creates (or reuses) ``riverboat-demo.sqlite3`` in the current directory, migrates it,
clears the demo's rows from earlier runs, and shows retries, snoozes, scheduled, unique,
cancelled, discarded and periodic jobs being worked, with a summary at the end. Needs
``riverboat[demo]`` for the live display (plain lines otherwise) and a SQLite of 3.45 or
newer (``riverboat[sqlite]`` bundles one).
"""

from __future__ import annotations

import argparse
import signal

from riverboat.cli._arguments import integer
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
        "--jobs", type=integer, default=50, metavar="N", help="fast jobs to insert (default 50)"
    )
    parser.add_argument(
        "--plain", action="store_true", help="plain lines even on a terminal (no live display)"
    )
    parser.add_argument(
        "--ui",
        action="store_true",
        help="serve the dashboard (riverboat ui) on the demo's database while it runs, "
        "then keep a stream of jobs going for it to show until Ctrl-C (needs the ui extra)",
    )
    parser.add_argument(
        "--ui-port", type=integer, default=8080, metavar="PORT", help="the dashboard's port (8080)"
    )


def run(args: argparse.Namespace) -> int:
    from riverboat.demo import run_demo

    if args.jobs < 1 or args.jobs > 100_000:
        raise InvalidInputError("--jobs", "must be between 1 and 100000")
    if not args.ui:
        report = run_demo(args.database_url, jobs=args.jobs, plain=args.plain)
        return 0 if report.ok else 1
    from riverboat.cli.ui import serve_in_thread
    from riverboat.demo import keep_producing

    # The dashboard needs River's tables from its first page on: migrate before serving
    # (the demo's own migration then finds nothing to do).
    prepare_schema(args.database_url)
    url, stop = serve_in_thread(args.database_url, "127.0.0.1", args.ui_port)
    print(f"riverboat demo: dashboard at {url} (watch the jobs move)", flush=True)
    _open_browser(url)
    try:
        report = run_demo(args.database_url, jobs=args.jobs, plain=args.plain)
        print(
            f"riverboat demo: tour done; the dashboard stays at {url}, with new jobs every "
            "second to watch, until Ctrl-C",
            flush=True,
        )

        # Ctrl-C sets ``stop``, which the stream checks every second, and it stops its
        # client in order. Left to asyncio.run, the first Ctrl-C cancelled the stream's
        # task wherever it awaited; a cancellation lost there kept the demo running
        # (the dashboard test saw it not exit in 3 of 5 full runs). A second Ctrl-C
        # interrupts at once.
        def on_ctrl_c(signum: int, frame: object) -> None:
            if stop.is_set():
                raise KeyboardInterrupt
            stop.set()

        previous = signal.signal(signal.SIGINT, on_ctrl_c)
        try:
            keep_producing(args.database_url, stop)
        finally:
            signal.signal(signal.SIGINT, previous)
    except KeyboardInterrupt:
        return 0
    finally:
        stop.set()
    return 0 if report.ok else 1


def prepare_schema(url: str) -> None:
    from riverboat._url import driver_from_url
    from riverboat.migrations import up_all

    driver = driver_from_url(url)
    try:
        up_all(driver)
    finally:
        driver.close()


def _open_browser(url: str) -> None:
    """Open the dashboard in the user's browser when there is one (a desktop session);
    on a server this does nothing and the printed URL is the way in."""
    import os
    import webbrowser

    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or os.name != "posix":
        webbrowser.open(url)
