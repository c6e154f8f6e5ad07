"""What becomes of a job once it has been tried: every outcome rule, in one place.

- what a work function raises to steer its outcome other than by failing:
  :class:`JobSnooze` (try again later, no attempt counted) and :class:`JobCancel` (stop
  for good);
- when a failed job runs again: the retry policy (:class:`RetryPolicy`, River's default
  backoff with jitter, :func:`default_next_retry`) and a worker's own ``next_retry``
  (:func:`retry_time`);
- in which state it waits: ``available`` when the retry is due within River's
  SchedulerInterval, else ``retryable``, or ``discarded`` once its attempts are used up
  (:func:`retry_state`, :func:`attempts_exhausted`);
- how long it may run: the job's timeout, else its worker's, else the client's, with
  River's ``-1`` for none (:func:`effective_timeout`);
- the state update each outcome hands to the completer (:func:`completed`,
  :func:`interrupted`, :func:`snoozed`, :func:`cancelled`, :func:`failed`,
  :func:`undecodable`) and the one the rescuer writes for a stuck job (:func:`rescued`);
- which event a stored outcome reports (:func:`persisted_event_kind`).

The executor (runtime/executor.py), the undecodable-row path and the rescuer
(runtime/maintenance/rescuer.py) only find out what happened and call these. Where
River's executor and rescuer decide differently on purpose, the difference is a
:class:`RetryRules` field, :data:`EXECUTOR_RETRY` or :data:`RESCUER_RETRY`.

No I/O and no clock: ``now`` is passed in (the backoff's jitter and the user's own
policy and ``next_retry`` functions aside, the answers follow from the arguments). Below
both the worker registry and the middleware: this module imports neither.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from riverboat._job import RESCUE_ERROR, AttemptError, JobRow, JobState
from riverboat._json import go_json_storable
from riverboat._seconds import GO_DURATION_MAX, is_seconds
from riverboat.dialect.base import JobStateUpdate, RescueUpdate
from riverboat.errors import CALLBACK_FAILURES, InvalidInputError
from riverboat.runtime.events import EventKind

__all__ = [
    "ERROR_MESSAGE_MAX",
    "ERROR_TRACE_MAX",
    "EXECUTOR_RETRY",
    "RESCUER_RETRY",
    "RESCUE_ERROR",
    "SCHEDULER_INTERVAL",
    "JobCancel",
    "JobSnooze",
    "RetryPolicy",
    "RetryRules",
    "attempt_error",
    "attempts_exhausted",
    "cancelled",
    "completed",
    "decode_error_message",
    "default_next_retry",
    "effective_timeout",
    "error_message",
    "failed",
    "interrupted",
    "persisted_event_kind",
    "policy_retry_time",
    "rescued",
    "retry_state",
    "retry_time",
    "snoozed",
    "undecodable",
]

log = logging.getLogger("riverboat.retry")

# River's SchedulerInterval: a retry or snooze this close is made available directly
# instead of waiting for the scheduler to promote it.
SCHEDULER_INTERVAL = timedelta(seconds=5)

# Go's time.Duration tops out near 292 years; River caps the backoff there.
_MAX_BACKOFF_SECONDS = (2**63 - 1) / 1e9


# What one attempt's error entry keeps of a failure's text (characters). River keeps
# it all: an exception carrying a 50 MB response body stored 100 MB per attempt (the
# message, and again at the end of the trace), a job list holding that row took a
# second to read, and a few attempts took the row past what jsonb can store.
ERROR_MESSAGE_MAX = 16 * 1024
ERROR_TRACE_MAX = 64 * 1024


def error_message(exc: BaseException) -> str:
    """``str(exc)``, or a note when the error's own ``__str__`` raises: the job's error
    is still recorded as its own class, in either executor (in a child process the
    failure ended the child, recorded as ChildProcessDied)."""
    try:
        return str(exc)
    except Exception as failure:
        return f"<str() of the error raised {type(failure).__name__}>"


def capped_error_text(
    message: str, trace: str, message_max: int = ERROR_MESSAGE_MAX
) -> tuple[str, str]:
    """An error's message and trace as stored: the message keeps its start, the trace
    its end (the innermost frames and the exception), each saying what was cut."""
    if len(message) > message_max:
        cut = len(message) - message_max
        message = f"{message[:message_max]}… ({cut:,} more characters not stored)"
    if len(trace) > ERROR_TRACE_MAX:
        cut = len(trace) - ERROR_TRACE_MAX
        trace = f"({cut:,} characters of the trace not stored) …{trace[-ERROR_TRACE_MAX:]}"
    return message, trace


def attempt_error(at: datetime, attempt: int, message: str, trace: str) -> str:
    """An attempt's error entry (JSON), its text capped (:func:`capped_error_text`)."""
    message, trace = capped_error_text(message, trace)
    return AttemptError(at, attempt, message, trace).to_json()


# -- what a work function raises -----------------------------------------------------


class JobSnooze(Exception):
    """Raise from a work function to try the job again after ``seconds`` without counting
    an attempt (River's ``JobSnooze``). ``0`` makes it available again at once."""

    def __init__(self, seconds: float | timedelta) -> None:
        delay = seconds.total_seconds() if isinstance(seconds, timedelta) else float(seconds)
        # Refused here, in the work function (so the attempt fails with this error), not
        # later where the outcome is computed: NaN, infinity or 1e300 seconds once made
        # that fail and left the job running until the rescuer.
        if not is_seconds(delay) or delay > GO_DURATION_MAX:
            raise InvalidInputError(
                "seconds",
                f"snooze duration must be from 0 to {GO_DURATION_MAX:.0f} seconds (River's is a "
                f"Go time.Duration, at most 292 years), not {delay!r}",
            )
        super().__init__(f"job snoozed for {delay:g}s")
        self.seconds = delay


class JobCancel(Exception):
    """Raise from a work function to cancel the job for good, recording ``reason`` as its
    error, whatever attempts remain (River's ``JobCancel``)."""

    def __init__(self, reason: str | BaseException = "job cancelled") -> None:
        super().__init__(str(reason))
        self.reason = reason


# -- when a failed job runs again -----------------------------------------------------


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


def policy_retry_time(job: JobRow, policy: RetryPolicy, now: datetime) -> datetime:
    """``policy.next_retry``, or River's default when it raises (logged once, with the
    traceback and the job id) or returns a time that is naive or past (River falls back
    the same way): one job a user policy chokes on must not stop a batch."""
    try:
        when: datetime | None = policy.next_retry(job, now)
    except CALLBACK_FAILURES:
        log.exception("job %d (%s): retry policy failed; using the default", job.id, job.kind)
        when = None
    if not isinstance(when, datetime) or when.tzinfo is None or when < now:
        when = default_next_retry(job, now)
    return when


@dataclass(frozen=True, slots=True)
class RetryRules:
    """Where River's executor and its rescuer decide a retry differently, on purpose."""

    # A retry due within SCHEDULER_INTERVAL is written ``available`` (else ``retryable``,
    # for the scheduler to promote).
    soon_is_available: bool
    # A worker's ``next_retry`` before ``now`` is kept as it is (else River's default
    # backoff replaces it).
    keep_past_worker_time: bool


# River's executor: a short retry is not held back a whole scheduler run, and a
# worker's time in the past is replaced by the default backoff (logged by River).
EXECUTOR_RETRY = RetryRules(soon_is_available=True, keep_past_worker_time=False)
# River's rescuer (makeRetryDecision in internal/maintenance/job_rescuer.go) writes every
# retried job ``retryable`` at the worker's time as given: no SchedulerInterval shortcut
# and no past-time check. River says nothing on why (neither the code nor the changelog);
# both are harmless there: a rescued job has already waited out the rescue horizon (an
# hour by default), and the scheduler makes a retryable job that is due (past time
# included) available at its next run. Kept so a rescue writes the row River writes.
# riverboat's one addition on both paths: a retry *policy* that fails or answers a
# naive or past time falls back to the default backoff (policy_retry_time).
RESCUER_RETRY = RetryRules(soon_is_available=False, keep_past_worker_time=True)


def retry_time(
    job: JobRow,
    now: datetime,
    policy: RetryPolicy,
    worker_time: Callable[[], object] | None,
    rules: RetryRules,
) -> datetime:
    """When ``job`` runs again: the worker's ``next_retry`` (``worker_time``, given only
    when the job's args decoded, as River asks a worker only then), else the retry
    policy. A worker function that raises is logged; one that returns no time, or a
    naive one, defers to the policy."""
    if worker_time is not None:
        try:
            candidate = worker_time()
        except CALLBACK_FAILURES:
            log.exception(
                "job %d (%s): the worker's next_retry failed; using the retry policy",
                job.id,
                job.kind,
            )
        else:
            if isinstance(candidate, datetime) and candidate.tzinfo is not None:
                if candidate >= now or rules.keep_past_worker_time:
                    return candidate
                return default_next_retry(job, now)
    return policy_retry_time(job, policy, now)


def retry_state(when: datetime, now: datetime, rules: RetryRules) -> JobState:
    """The state a job retried at ``when`` waits in."""
    if rules.soon_is_available and when - now <= SCHEDULER_INTERVAL:
        return JobState.AVAILABLE
    return JobState.RETRYABLE


def attempts_exhausted(job: JobRow) -> bool:
    """Whether a failed ``job`` is discarded rather than retried (a negative
    ``max_attempts`` counts as none, as River reads it)."""
    return job.attempt >= max(job.max_attempts, 0)


# -- how long a job may run -----------------------------------------------------------


def effective_timeout(own: float | None, client_default: float | None) -> float | None:
    """The seconds a job may run, or None for no limit: the job's own timeout (its
    worker's ``timeout(job)``, else the worker's ``timeout``; None when it names none),
    else the client's ``job_timeout``. ``-1`` at either level means no limit, as in
    River; riverboat's client takes None for that too (River's client has no "none"
    besides -1, its 0 meaning the 60 s default that riverboat's client writes out)."""
    value = own if own is not None else client_default
    if value is None or value <= 0:
        return None
    return value


# -- the update each outcome hands to the completer -----------------------------------


def _encoded(staged: Mapping[str, Any] | None) -> str | None:
    return go_json_storable(dict(staged)) if staged else None


def completed(job_id: int, staged: Mapping[str, Any] | None = None) -> JobStateUpdate:
    """The work function returned: completed, with what it staged in metadata."""
    if not staged:  # most outcomes: built as cheaply as the executor's hot path needs
        return JobStateUpdate(job_id, JobState.COMPLETED, finalized=True)
    return JobStateUpdate(
        job_id, JobState.COMPLETED, finalized=True, metadata_updates=_encoded(staged)
    )


def interrupted(
    job: JobRow, now: datetime, staged: Mapping[str, Any] | None = None
) -> JobStateUpdate:
    """A hard stop took the job away: available now, the attempt given back, no error
    (River 0.44's soft-stop outcome)."""
    return JobStateUpdate(
        job.id,
        JobState.AVAILABLE,
        attempt=max(job.attempt - 1, 0),
        scheduled_at=now,
        metadata_updates=_encoded(staged),
    )


def snoozed(
    job: JobRow, seconds: float, now: datetime, staged: Mapping[str, Any] | None = None
) -> JobStateUpdate:
    """:class:`JobSnooze`: the attempt given back, ``snoozes`` in metadata counted up,
    scheduled ``seconds`` from now (available at once within SCHEDULER_INTERVAL)."""
    snoozes = job.metadata.get("snoozes")
    count = snoozes if isinstance(snoozes, int) and not isinstance(snoozes, bool) else 0
    delay = timedelta(seconds=seconds)
    return JobStateUpdate(
        job.id,
        JobState.SCHEDULED if delay > SCHEDULER_INTERVAL else JobState.AVAILABLE,
        attempt=max(job.attempt - 1, 0),
        scheduled_at=now + delay,
        metadata_updates=_encoded({**(staged or {}), "snoozes": count + 1}),
    )


def cancelled(job: JobRow, error: str, staged: Mapping[str, Any] | None = None) -> JobStateUpdate:
    """:class:`JobCancel` (or a remote cancel): cancelled for good with its error entry."""
    return JobStateUpdate(
        job.id, JobState.CANCELLED, error=error, finalized=True, metadata_updates=_encoded(staged)
    )


def failed(
    job: JobRow,
    error: str,
    now: datetime,
    policy: RetryPolicy,
    worker_time: Callable[[], object] | None = None,
    staged: Mapping[str, Any] | None = None,
) -> JobStateUpdate:
    """The attempt failed with the encoded ``error`` entry: discarded once its attempts
    are used up, else retried at :func:`retry_time` (executor rules)."""
    if attempts_exhausted(job):
        return JobStateUpdate(
            job.id,
            JobState.DISCARDED,
            error=error,
            finalized=True,
            metadata_updates=_encoded(staged),
        )
    when = retry_time(job, now, policy, worker_time, EXECUTOR_RETRY)
    return JobStateUpdate(
        job.id,
        retry_state(when, now, EXECUTOR_RETRY),
        error=error,
        scheduled_at=when,
        metadata_updates=_encoded(staged),
    )


def decode_error_message(job: JobRow) -> str:
    """The error entry's text for a row riverboat could not read: which columns, and
    why (:attr:`~riverboat._job.JobRow.decode_errors`)."""
    return "riverboat could not decode the job row: " + "; ".join(job.decode_errors)


def undecodable(job: JobRow, now: datetime, policy: RetryPolicy) -> JobStateUpdate:
    """A claimed row riverboat could not read is not run; its attempt fails as River 0.41
    fails args that don't unmarshal (the retry policy's time, no worker asked). On SQLite
    the retry also rewrites ``scheduled_at`` in River's form, so a job whose only problem
    was that timestamp runs normally on its next attempt."""
    error = AttemptError(now, max(job.attempt, 0), decode_error_message(job), "").to_json()
    return failed(job, error, now, policy)


def rescued(
    job: JobRow,
    now: datetime,
    policy: RetryPolicy,
    *,
    worker_known: bool,
    decoded: bool,
    timeout: float | None,
    claimant_dead: bool = False,
    worker_time: Callable[[], object] | None = None,
) -> RescueUpdate | None:
    """A stuck ``running`` job's fate in River's order, or None to leave it running:
    a cancel asked for (``cancel_attempted_at``) cancels; no worker for its kind
    discards; args (or a row) that don't decode retry by the policy while attempts
    remain; a decoded job is left running while its ``timeout`` (from
    :func:`effective_timeout`) is none or has not passed since its attempt began, unless
    its client is dead (``claimant_dead``: nothing will finish that run); then it is
    retried (:data:`RESCUER_RETRY` rules) or discarded. Every rescue records
    :data:`RESCUE_ERROR`; a finalized one keeps its ``scheduled_at``."""
    error = AttemptError(now, max(job.attempt, 0), RESCUE_ERROR, "").to_json()

    def final(state: JobState) -> RescueUpdate:
        return RescueUpdate(job.id, error, now, job.scheduled_at, state.value)

    if job.metadata.get("cancel_attempted_at") not in (None, ""):
        return final(JobState.CANCELLED)
    if not worker_known:
        return final(JobState.DISCARDED)
    if decoded and not claimant_dead:
        if timeout is None:
            return None  # no timeout at all: River never rescues such a job
        if job.attempted_at is not None and (now - job.attempted_at).total_seconds() < timeout:
            return None
    if attempts_exhausted(job):
        return final(JobState.DISCARDED)
    when = retry_time(job, now, policy, worker_time if decoded else None, RESCUER_RETRY)
    return RescueUpdate(job.id, error, None, when, retry_state(when, now, RESCUER_RETRY).value)


# -- the event a stored outcome reports -----------------------------------------------


def persisted_event_kind(state: JobState, requested: EventKind) -> EventKind | None:
    """The event for a job's stored outcome, not the one its worker asked for (River
    0.44.0, internal/jobcompleter): ``available`` is ambiguous (a retry due soon, a short
    snooze, an interruption) so it keeps the requested kind unless that was a completion
    or cancellation; every other finished state names its own event. A row that is
    running again or pending was not finished by this attempt: no event (River panics)."""
    if state is JobState.AVAILABLE:
        if requested in (EventKind.JOB_COMPLETED, EventKind.JOB_CANCELLED):
            return EventKind.JOB_FAILED
        return requested
    return _EVENT_BY_STATE.get(state)


_EVENT_BY_STATE = {
    JobState.CANCELLED: EventKind.JOB_CANCELLED,
    JobState.COMPLETED: EventKind.JOB_COMPLETED,
    JobState.DISCARDED: EventKind.JOB_FAILED,
    JobState.RETRYABLE: EventKind.JOB_FAILED,
    JobState.SCHEDULED: EventKind.JOB_SNOOZED,
}
