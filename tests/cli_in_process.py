"""``riverboat`` commands run by calling ``riverboat.cli.main`` in the test's process.

For tests about what a command does (its output, its exit code, what it changes) rather
than about the process that runs it: a subprocess costs an interpreter's start-up and
riverboat's imports, about half a second a call on an idle machine and several under the
suite's load. Tests about the process itself (the console script, environment defaults,
signals, a closed pipe, concurrent processes) keep a real subprocess. Only from a
synchronous test: the commands run their own event loop.
"""

from __future__ import annotations

import io
import os
import subprocess
from contextlib import redirect_stderr, redirect_stdout

__all__ = ["cli_in_process"]


def cli_in_process(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``riverboat ARGS`` in this process: its exit code, stdout and stderr, as
    ``subprocess.run(..., capture_output=True, text=True)`` returns them, with
    ``DATABASE_URL`` and ``RIVERBOAT_TRACEBACK`` hidden from the command (a test passes
    its database explicitly, and expects errors as one line) unless ``env`` sets them;
    ``env``'s variables are set for the call only."""
    from riverboat.cli import main

    out, err = io.StringIO(), io.StringIO()
    hidden = {
        k: os.environ.pop(k)
        for k in {"DATABASE_URL", "RIVERBOAT_TRACEBACK", *(env or {})}
        if k in os.environ
    }
    os.environ.update(env or {})
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        for k in env or {}:
            os.environ.pop(k, None)
        os.environ.update(hidden)
    return subprocess.CompletedProcess(["riverboat", *args], code, out.getvalue(), err.getvalue())
