"""River's default retry policy."""

from __future__ import annotations

import logging
import random
from datetime import datetime, timedelta

from riverboat._job import JobRow

__all__ = ["RetryPolicy", "default_next_retry", "safe_next_retry"]

log = logging.getLogger("riverboat.retry")

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


def safe_next_retry(job: JobRow, policy: RetryPolicy, now: datetime) -> datetime:
    """``policy.next_retry``, or River's default when it raises (logged once, with the
    traceback and the job id) or returns a time that is naive or past (River falls back
    the same way): one job a user policy chokes on must not stop a batch."""
    try:
        when: datetime | None = policy.next_retry(job, now)
    except Exception:
        log.exception("job %d (%s): retry policy failed; using the default", job.id, job.kind)
        when = None
    if when is None or when.tzinfo is None or when < now:
        when = default_next_retry(job, now)
    return when
