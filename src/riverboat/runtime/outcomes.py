"""What a work function raises to steer its job's outcome other than by failing:
:class:`JobSnooze` (try again later, no attempt counted) and :class:`JobCancel` (stop for
good). Their own module, below both the worker registry and the middleware that read
them, so neither has to import the other to know them."""

from __future__ import annotations

from datetime import timedelta

from riverboat.errors import InvalidInputError

__all__ = ["JobCancel", "JobSnooze"]


class JobSnooze(Exception):
    """Raise from a work function to try the job again after ``seconds`` without counting
    an attempt (River's ``JobSnooze``). ``0`` makes it available again at once."""

    def __init__(self, seconds: float | timedelta) -> None:
        delay = seconds.total_seconds() if isinstance(seconds, timedelta) else float(seconds)
        if delay < 0:
            raise InvalidInputError("seconds", "snooze duration must not be negative")
        super().__init__(f"job snoozed for {delay:g}s")
        self.seconds = delay


class JobCancel(Exception):
    """Raise from a work function to cancel the job for good, recording ``reason`` as its
    error, whatever attempts remain (River's ``JobCancel``)."""

    def __init__(self, reason: str | BaseException = "job cancelled") -> None:
        super().__init__(str(reason))
        self.reason = reason
