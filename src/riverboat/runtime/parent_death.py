"""A process that must not outlive the one that started it: the kernel signals it when
its parent dies (Linux's ``PR_SET_PDEATHSIG``, which works whatever the process is doing,
even computing in C code). Elsewhere the caller's own rule applies (a process-executor
child exits when its pipe closes)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["parent_gone", "signal_at_parent_death"]

PR_SET_PDEATHSIG = 1


def signal_at_parent_death(signum: signal.Signals) -> None:
    """Ask for ``signum`` when the parent process dies (Linux; nothing elsewhere)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl
            pass


def parent_gone(parent_pid: int) -> bool:
    """Whether the parent ``parent_pid`` died already (this process was reparented): a
    death before :func:`signal_at_parent_death` took effect sends nothing."""
    return os.getppid() != parent_pid
