"""Drivers after fork(): a process forked from one whose driver made its own pool or
connection (gunicorn --preload with a module-level client, multiprocessing's fork)
opens new ones and leaves the inherited ones to the parent, which still uses them."""

from __future__ import annotations

import os
import weakref
from typing import Any, Protocol

__all__ = ["new_pool_after_fork", "set_aside"]


class _ForkAware(Protocol):
    def _after_fork(self) -> Any:
        """In the child of a fork: set the inherited pool aside (with
        :func:`set_aside`) and start an empty one."""


# Drivers whose pool they made themselves (from a URL): a process forked from one
# (gunicorn --preload, multiprocessing's fork) must not use the connections it inherited,
# which the parent still uses. Two processes talking over one socket interleaved their
# messages ("prepared statement already exists", or the parent's next call failing).
_OWN_POOLS: weakref.WeakSet[_ForkAware] = weakref.WeakSet()
# The inherited pools, kept referenced and never closed in the child: closing one would
# end the parent's sessions (libpq's terminate message goes over the shared socket).
_INHERITED: list[Any] = []


def new_pool_after_fork(driver: _ForkAware) -> None:
    """Give ``driver`` (which made its pool from a URL) a pool of its own in any process
    forked from this one: its ``_after_fork`` runs there, before anything else."""
    _OWN_POOLS.add(driver)


def set_aside(pool: Any) -> None:
    """Keep an inherited pool from being used or closed, in a forked child."""
    _INHERITED.append(pool)


def _after_fork_in_child() -> None:
    for driver in list(_OWN_POOLS):
        driver._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
