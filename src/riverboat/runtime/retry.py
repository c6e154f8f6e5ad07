"""River's default retry policy."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from riverboat._job import JobRow

__all__ = ["RetryPolicy", "default_next_retry"]

# Go's time.Duration tops out near 292 years; River caps the backoff there.
_MAX_BACKOFF_SECONDS = (2**63 - 1) / 1e9


def default_next_retry(job: JobRow, now: datetime) -> datetime:
    """``now + (errors + 1)^4 seconds ± 10%``: counts errors, not attempts, so snoozes
    don't stretch the backoff (River's DefaultRetryPolicy)."""
    base = float((len(job.errors) + 1) ** 4)
    seconds = min(base * (1 + random.uniform(-0.1, 0.1)), _MAX_BACKOFF_SECONDS)
    try:
        return now + timedelta(seconds=seconds)
    except OverflowError:
        return datetime.max.replace(tzinfo=now.tzinfo)


class RetryPolicy:
    """Override ``next_retry`` to change when failed jobs run again."""

    def next_retry(self, job: JobRow, now: datetime) -> datetime:
        return default_next_retry(job, now)
