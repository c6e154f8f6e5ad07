"""How the runtime knows its database paths are alive, and what it says when one isn't.

Every call the runtime's loops make (the producer's claim, the completer's writes, the
notifier's LISTEN connection, the elector's statements) runs under a deadline
(:func:`bounded`): a driver that honours :func:`~riverboat.drivers.base.call_deadline`
(psycopg's async driver, asyncpg) drops the connection of a call that misses it and
raises :class:`~riverboat.errors.DeadlineExceededError`, so the next call runs on a
fresh connection. Drivers that don't (SQLAlchemy, SQLite) are bounded by a backstop
timer a little later, which cancels the call.

:class:`PathHealth` turns a path's failures into a few log lines: one WARNING when it is
found dead, a summary every :data:`SUMMARY_INTERVAL` seconds while it stays dead (not a
line per failed poll), and one WARNING when it answers again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from riverboat.drivers.base import call_deadline
from riverboat.errors import DeadlineExceededError

__all__ = ["BACKSTOP_GRACE", "DEFAULT_CALL_TIMEOUT", "SUMMARY_INTERVAL", "PathHealth", "bounded"]

#: Seconds a runtime database call may take by default (``RuntimeConfig.db_call_timeout``).
#: Generous for a healthy server (a claim or a 5,000-row completion takes milliseconds),
#: short enough that a connection that stopped answering is replaced within seconds.
DEFAULT_CALL_TIMEOUT = 10.0
#: Extra seconds before the backstop cancels a call whose driver ignored the deadline.
BACKSTOP_GRACE = 1.0
#: Seconds between two summaries while a path stays dead.
SUMMARY_INTERVAL = 30.0


@asynccontextmanager
async def bounded(
    seconds: float | None, what: str = "", grace: float = BACKSTOP_GRACE
) -> AsyncIterator[None]:
    """Database calls awaited in this block must answer within ``seconds`` (None: no
    deadline). A miss raises :class:`DeadlineExceededError` (a ``DriverError``).

    The backstop cancels the block ``grace`` seconds later, for drivers that ignore
    the deadline; the later it is, the surer a driver that honours it drops the
    connection itself first (cancelling a psycopg query in flight makes psycopg try to
    cancel it on the server, which on a silent connection takes up to 10 s)."""
    if seconds is None:
        yield
        return
    with call_deadline(seconds):
        try:
            async with asyncio.timeout(seconds + grace) as scope:
                yield
        except TimeoutError:
            if not scope.expired():
                raise
            label = f" ({what})" if what else ""
            raise DeadlineExceededError(
                f"no answer from the database within {seconds:g}s{label}; the call was cancelled"
            ) from None


class PathHealth:
    """The health of one database path (``"producer default"``, ``"completer"``...),
    as its log lines: call :meth:`failed` after each failed call, :meth:`ok` after each
    successful one (cheap while healthy)."""

    __slots__ = (
        "_last",
        "_log",
        "_next_summary",
        "_since_summary",
        "down_since",
        "failures",
        "name",
        "summary_every",
    )

    def __init__(
        self, name: str, logger: logging.Logger, summary_every: float = SUMMARY_INTERVAL
    ) -> None:
        self.name = name
        self.summary_every = summary_every
        self._log = logger
        self.down_since: float | None = None  # time.monotonic() of the first failure
        self.failures = 0  # failed calls in the current outage
        self._since_summary = 0
        self._next_summary = 0.0
        self._last = ""

    @property
    def dead(self) -> bool:
        return self.down_since is not None

    def failed(self, exc: BaseException, doing: str) -> None:
        """One failed call (``doing``: what it was, "fetching jobs")."""
        now = time.monotonic()
        self.failures += 1
        self._last = f"{doing}: {exc}"
        if self.down_since is None:
            self.down_since = now
            self._next_summary = now + self.summary_every
            self._since_summary = 0
            self._log.warning(
                "%s: database calls failing (%s); retrying, with a summary every %gs "
                "until it answers",
                self.name,
                self._last,
                self.summary_every,
            )
            return
        self._since_summary += 1
        if now >= self._next_summary:
            self._log.warning(
                "%s: still failing after %.0fs (%d failed calls since the last line; last: %s)",
                self.name,
                now - self.down_since,
                self._since_summary,
                self._last,
            )
            self._next_summary = now + self.summary_every
            self._since_summary = 0

    def ok(self) -> None:
        """A call succeeded: says so once if the path was dead."""
        if self.down_since is None:
            return
        self._log.warning(
            "%s: database calls work again after %.1fs (%d failed calls)",
            self.name,
            time.monotonic() - self.down_since,
            self.failures,
        )
        self.down_since = None
        self.failures = 0
