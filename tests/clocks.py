"""A fixed "now" for tests of the periodic enqueuer, far from every tick boundary.

Interval ticks are aligned to the epoch (River's too), and the enqueuer inserts every
tick before now + DUE_MARGIN. On the process's clock, a test that made a job due "a
second ago", or ran one at "now", also got the next tick whenever a minute (or the
interval) began within that window: one run too many. Tests give the enqueuer's clock
this time instead (``ctx.clock.set(lambda: FAR_FROM_TICKS)``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["FAR_FROM_TICKS"]


def _far_from_ticks() -> datetime:
    """2.5 minutes before a 5-minute boundary: 30 s from any minute's."""
    now = datetime.now(UTC)
    five = now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0)
    return five - timedelta(seconds=150)


FAR_FROM_TICKS = _far_from_ticks()
