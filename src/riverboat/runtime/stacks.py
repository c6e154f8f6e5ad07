"""What a stuck process is waiting on: every asyncio task's and every thread's stack.

``riverboat worker`` and ``riverboat bench`` call :func:`dump_stacks_on_signal` on their
event loop (an application running its own loop can too), so ``kill -USR1 PID`` prints,
to standard error, the stack of each task of that loop (what each one awaits) and of
each thread, and the process carries on. A thread's stack alone shows an asyncio
program sitting in ``select``; the tasks say which statement, lock or event it waits
for.
"""

from __future__ import annotations

import asyncio
import faulthandler
import io
import signal
import sys
from typing import TextIO

__all__ = ["DUMP_SIGNAL", "dump_stacks", "dump_stacks_on_signal"]

# None where the platform has no SIGUSR1 (Windows): then nothing is installed.
DUMP_SIGNAL: signal.Signals | None = getattr(signal, "SIGUSR1", None)
# Frames shown per task: enough to reach the driver call under a runtime loop.
TASK_FRAMES = 25


def dump_stacks(loop: asyncio.AbstractEventLoop, out: TextIO | None = None) -> None:
    """Write the stack of every task of ``loop`` and of every thread to ``out``
    (standard error by default)."""
    out = out if out is not None else sys.stderr
    text = io.StringIO()
    tasks = sorted(asyncio.all_tasks(loop), key=lambda task: task.get_name())
    text.write(f"riverboat: {len(tasks)} asyncio tasks\n")
    for task in tasks:
        text.write(f"--- task {task.get_name()}: {task.get_coro()!r}\n")
        task.print_stack(limit=TASK_FRAMES, file=text)
    out.write(text.getvalue())
    out.write("riverboat: threads\n")
    out.flush()
    try:
        faulthandler.dump_traceback(file=out, all_threads=True)
    except (AttributeError, ValueError, io.UnsupportedOperation):
        # No file descriptor behind ``out`` (a StringIO): the tasks are what it gets.
        pass


def dump_stacks_on_signal(loop: asyncio.AbstractEventLoop) -> bool:
    """Make ``kill -USR1`` print :func:`dump_stacks` for ``loop``; returns whether it
    could (not on Windows, nor off the main thread, nor where the application handles
    SIGUSR1 itself: its handler is left in place)."""
    if DUMP_SIGNAL is None or signal.getsignal(DUMP_SIGNAL) is not signal.SIG_DFL:
        return False
    try:
        loop.add_signal_handler(DUMP_SIGNAL, dump_stacks, loop)
    except (NotImplementedError, RuntimeError, ValueError):
        return False
    return True
