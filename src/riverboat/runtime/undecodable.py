"""Claimed jobs whose row could not be decoded: failed by id, never left running.

A row another client wrote can hold a value riverboat can't read (a timestamp form it
doesn't know, JSON SQLite can't parse, an unknown state). The dialect still returns it,
with :attr:`~riverboat._job.JobRow.decode_errors` naming the columns. Such a job is not
run; it gets an error entry and is retried by the retry policy, or discarded once its
attempts are used up, as River 0.41 does for args that don't unmarshal. On SQLite the
retry also rewrites ``scheduled_at`` in River's form, so a job whose only problem was
that timestamp runs normally on its next attempt.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

from riverboat._job import AttemptError, JobRow, JobState
from riverboat.dialect.base import JobStateUpdate
from riverboat.runtime.completer import PendingCompletion
from riverboat.runtime.events import EventKind
from riverboat.runtime.retry import RetryPolicy, safe_next_retry

__all__ = ["decode_error_message", "undecodable_outcome"]

log = logging.getLogger("riverboat.producer")

# River's SchedulerInterval: a retry this close is made available directly.
_SCHEDULER_INTERVAL = timedelta(seconds=5)


def decode_error_message(job: JobRow) -> str:
    """The error entry's text: which columns could not be read, and why."""
    return "riverboat could not decode the job row: " + "; ".join(job.decode_errors)


def undecodable_outcome(job: JobRow, policy: RetryPolicy, queue: str) -> PendingCompletion:
    """The completer update for a claimed job that can't be decoded; logs it once."""
    now = datetime.now(UTC)
    message = decode_error_message(job)
    error = AttemptError(now, max(job.attempt, 0), message, "").to_json()
    if job.attempt >= job.max_attempts:
        update = JobStateUpdate(job.id, JobState.DISCARDED, error=error, finalized=True)
    else:
        when = safe_next_retry(job, policy, now)
        state = JobState.AVAILABLE if when - now <= _SCHEDULER_INTERVAL else JobState.RETRYABLE
        update = JobStateUpdate(job.id, state, error=error, scheduled_at=when)
    log.error(
        "producer %s: job %d (%s) attempt %d/%d not run, %s: %s",
        queue,
        job.id,
        job.kind or "?",
        job.attempt,
        job.max_attempts,
        "discarded" if update.state is JobState.DISCARDED else "will retry",
        message,
    )
    return PendingCompletion(update, job, EventKind.JOB_FAILED, 0.0, 0.0, time.monotonic())
