"""The clock a client and its runtime take as "now".

By default that is the database's own clock: :meth:`Clock.now` returns None and each
statement uses the server's time. ``riverboat.testing.use_test_config`` stubs it (River's
``TestConfig.Time``) for inserts, unique periods, claims and the scheduler. A client
makes one :class:`Clock` and hands the same object to its runtime, producers and
maintenance services, so setting it reaches every part at once (from their next read),
whichever thread sets it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

__all__ = ["Clock"]


class Clock:
    """``now()`` is the stub's time, or None for the database's clock."""

    __slots__ = ("_stub",)

    def __init__(self) -> None:
        self._stub: Callable[[], datetime] | None = None

    def set(self, stub: Callable[[], datetime] | None) -> None:
        """Take ``stub()`` as now from here on; None goes back to the database's clock."""
        self._stub = stub

    @property
    def stubbed(self) -> bool:
        return self._stub is not None

    def now(self) -> datetime | None:
        stub = self._stub
        return None if stub is None else stub()
