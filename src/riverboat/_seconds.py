"""What every duration setting accepts: a finite number of seconds.

NaN passes any test written as ``value < 0`` (every comparison with it is false), and
infinity reaches datetime arithmetic (an OverflowError deep in a maintenance service or
an outcome) or a JSON document (which has no spelling for it). So settings ask this one
function instead of comparing by hand.
"""

from __future__ import annotations

import math
from typing import TypeGuard

__all__ = ["GO_DURATION_MAX", "is_seconds"]

# Seconds in Go's largest time.Duration (about 292 years): the most River takes for a
# snooze or a periodic interval, and far less than a datetime can be moved by.
GO_DURATION_MAX = (2**63 - 1) / 1e9


def is_seconds(value: object, *, at_least: float = 0.0, positive: bool = False) -> TypeGuard[float]:
    """Whether ``value`` is a finite int or float (not a bool) of at least ``at_least``
    seconds, or above zero with ``positive``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        if not math.isfinite(value):
            return False
    except OverflowError:  # an int too large for a float (10**400) is no duration either
        return False
    return value > 0 if positive else value >= at_least
