"""The outcome rules of runtime/outcomes.py as pure functions: no database, no client.
What the rows look like once written is checked end to end in test_outcomes.py and the
rescuer's tests (tests/leadership/test_maintenance.py, tests/drivers/test_maintenance.py)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from riverboat import AttemptError, JobRow, JobState, RetryPolicy
from riverboat.runtime import outcomes
from riverboat.runtime.outcomes import EXECUTOR_RETRY, RESCUE_ERROR, RESCUER_RETRY

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def row(
    *,
    attempt: int = 1,
    max_attempts: int = 25,
    errors: int = 0,
    metadata: dict[str, Any] | None = None,
    attempted_at: datetime | None = NOW - timedelta(seconds=100),
    decode_errors: tuple[str, ...] = (),
) -> JobRow:
    return JobRow(
        id=7,
        encoded_args="{}",
        attempt=attempt,
        attempted_at=attempted_at,
        attempted_by=["client-a"],
        created_at=NOW - timedelta(hours=1),
        errors=[AttemptError(NOW, i + 1, "boom", "") for i in range(errors)],
        finalized_at=None,
        kind="k",
        max_attempts=max_attempts,
        metadata=metadata if metadata is not None else {},
        priority=1,
        queue="default",
        state=JobState.RUNNING,
        scheduled_at=NOW - timedelta(hours=1),
        tags=[],
        unique_key=None,
        unique_states=None,
        decode_errors=decode_errors,
    )


def seconds_after_now(when: datetime) -> float:
    return (when - NOW).total_seconds()


class FixedPolicy(RetryPolicy):
    def __init__(self, when: Any) -> None:
        self.when = when

    def next_retry(self, job: JobRow, now: datetime) -> datetime:
        if isinstance(self.when, Exception):
            raise self.when
        return self.when  # type: ignore[no-any-return]


# -- retry time -----------------------------------------------------------------------


@pytest.mark.parametrize("errors", [0, 1, 4])
def test_default_backoff_is_errors_plus_one_to_the_fourth_with_ten_percent_jitter(
    errors: int,
) -> None:
    base = (errors + 1) ** 4
    for _ in range(50):
        delay = seconds_after_now(outcomes.default_next_retry(row(errors=errors), NOW))
        assert base * 0.9 <= delay <= base * 1.1


def test_default_backoff_is_capped_where_go_durations_end() -> None:
    when = outcomes.default_next_retry(row(errors=5000), NOW)
    assert when.tzinfo is UTC
    assert seconds_after_now(when) <= (2**63 - 1) / 1e9 + 1


@pytest.mark.parametrize(
    "answer",
    [
        ValueError("policy bug"),
        NOW.replace(tzinfo=None) + timedelta(hours=1),
        NOW - timedelta(seconds=1),
        "tomorrow",
    ],
    ids=["raises", "naive", "past", "not-a-time"],
)
def test_a_policy_that_fails_or_answers_no_usable_time_falls_back_to_the_default(
    answer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    policy = FixedPolicy(answer)
    with caplog.at_level(logging.ERROR, "riverboat.retry"):
        when = outcomes.policy_retry_time(row(), policy, NOW)
    assert 0.9 <= seconds_after_now(when) <= 1.1  # the default for a first error
    logged = [r for r in caplog.records if "retry policy failed" in r.getMessage()]
    assert len(logged) == (1 if isinstance(answer, Exception) else 0)


def test_a_policy_time_in_the_future_is_used() -> None:
    later = NOW + timedelta(minutes=3)
    assert outcomes.policy_retry_time(row(), FixedPolicy(later), NOW) == later


def test_the_worker_time_comes_before_the_policy() -> None:
    later = NOW + timedelta(minutes=3)
    policy = FixedPolicy(NOW + timedelta(hours=1))
    for rules in (EXECUTOR_RETRY, RESCUER_RETRY):
        assert outcomes.retry_time(row(), NOW, policy, lambda: later, rules) == later


@pytest.mark.parametrize("answer", [None, NOW.replace(tzinfo=None) + timedelta(minutes=3)])
def test_a_worker_answering_no_time_or_a_naive_one_defers_to_the_policy(answer: Any) -> None:
    policy_time = NOW + timedelta(hours=1)
    for rules in (EXECUTOR_RETRY, RESCUER_RETRY):
        when = outcomes.retry_time(row(), NOW, FixedPolicy(policy_time), lambda: answer, rules)
        assert when == policy_time


def test_a_worker_next_retry_that_raises_is_logged_and_the_policy_decides(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> datetime:
        raise RuntimeError("worker bug")

    policy_time = NOW + timedelta(hours=1)
    with caplog.at_level(logging.ERROR, "riverboat.retry"):
        when = outcomes.retry_time(row(), NOW, FixedPolicy(policy_time), broken, EXECUTOR_RETRY)
    assert when == policy_time
    logged = [r for r in caplog.records if "next_retry failed" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


def test_a_past_worker_time_is_replaced_by_the_executor_and_kept_by_the_rescuer() -> None:
    past = NOW - timedelta(minutes=1)
    policy = FixedPolicy(NOW + timedelta(hours=1))
    by_executor = outcomes.retry_time(row(), NOW, policy, lambda: past, EXECUTOR_RETRY)
    # River's default backoff, not the client's policy (River's DefaultClientRetryPolicy).
    assert 0.9 <= seconds_after_now(by_executor) <= 1.1
    assert outcomes.retry_time(row(), NOW, policy, lambda: past, RESCUER_RETRY) == past


# -- retry state ----------------------------------------------------------------------


def test_a_retry_due_within_the_scheduler_interval_is_available_for_the_executor_only() -> None:
    soon = NOW + outcomes.SCHEDULER_INTERVAL
    later = soon + timedelta(microseconds=1)
    assert outcomes.retry_state(soon, NOW, EXECUTOR_RETRY) is JobState.AVAILABLE
    assert outcomes.retry_state(later, NOW, EXECUTOR_RETRY) is JobState.RETRYABLE
    assert outcomes.retry_state(soon, NOW, RESCUER_RETRY) is JobState.RETRYABLE
    assert outcomes.retry_state(NOW, NOW, RESCUER_RETRY) is JobState.RETRYABLE


@pytest.mark.parametrize(
    ("attempt", "max_attempts", "exhausted"),
    [(1, 25, False), (24, 25, False), (25, 25, True), (26, 25, True), (1, 0, True), (1, -3, True)],
)
def test_attempts_are_exhausted_at_max_attempts(
    attempt: int, max_attempts: int, exhausted: bool
) -> None:
    assert outcomes.attempts_exhausted(row(attempt=attempt, max_attempts=max_attempts)) is exhausted


# -- effective timeout ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("own", "client_default", "expected"),
    [
        (None, 60.0, 60.0),  # the worker names none: the client's
        (5.0, 60.0, 5.0),  # the worker's (or the job's timeout(job)) wins
        (5.0, None, 5.0),
        (5.0, -1, 5.0),
        (-1, 60.0, None),  # the worker says no limit, whatever the client's
        (None, -1, None),  # River's -1: no limit
        (None, None, None),  # riverboat's client: None is no limit too
    ],
)
def test_effective_timeout(
    own: float | None, client_default: float | None, expected: float | None
) -> None:
    assert outcomes.effective_timeout(own, client_default) == expected


# -- the updates handed to the completer ----------------------------------------------


def test_completed_carries_staged_metadata_only_when_there_is_some() -> None:
    plain = outcomes.completed(7)
    assert (plain.state, plain.finalized, plain.metadata_updates) == (
        JobState.COMPLETED,
        True,
        None,
    )
    staged = outcomes.completed(7, {"output": {"n": 1}})
    assert json.loads(staged.metadata_updates or "") == {"output": {"n": 1}}


def test_interrupted_gives_the_attempt_back_and_is_available_now() -> None:
    update = outcomes.interrupted(row(attempt=3), NOW, {"step": "b"})
    assert (update.state, update.attempt, update.scheduled_at, update.error) == (
        JobState.AVAILABLE,
        2,
        NOW,
        None,
    )
    assert not update.finalized
    assert json.loads(update.metadata_updates or "") == {"step": "b"}


@pytest.mark.parametrize(
    ("seconds", "state"),
    [(0, JobState.AVAILABLE), (5, JobState.AVAILABLE), (5.001, JobState.SCHEDULED)],
)
def test_snoozed_gives_the_attempt_back_and_counts_snoozes(seconds: float, state: JobState) -> None:
    update = outcomes.snoozed(row(attempt=2, metadata={"snoozes": 4}), seconds, NOW, {"a": 1})
    assert (update.state, update.attempt, update.error, update.finalized) == (state, 1, None, False)
    assert update.scheduled_at == NOW + timedelta(seconds=seconds)
    assert json.loads(update.metadata_updates or "") == {"a": 1, "snoozes": 5}


@pytest.mark.parametrize("stored", [None, "3", True, 2.5])
def test_a_snooze_count_that_is_not_an_integer_starts_again_at_one(stored: Any) -> None:
    metadata = {} if stored is None else {"snoozes": stored}
    update = outcomes.snoozed(row(metadata=metadata), 60, NOW)
    assert json.loads(update.metadata_updates or "") == {"snoozes": 1}


def test_cancelled_is_final_with_its_error() -> None:
    update = outcomes.cancelled(row(), "entry")
    assert (update.state, update.error, update.finalized, update.metadata_updates) == (
        JobState.CANCELLED,
        "entry",
        True,
        None,
    )


def test_failed_retries_at_the_retry_time_while_attempts_remain() -> None:
    later = NOW + timedelta(minutes=10)
    soon = NOW + timedelta(seconds=2)
    retried = outcomes.failed(row(), "entry", NOW, RetryPolicy(), lambda: later, {"x": 1})
    assert (retried.state, retried.scheduled_at, retried.error, retried.finalized) == (
        JobState.RETRYABLE,
        later,
        "entry",
        False,
    )
    assert json.loads(retried.metadata_updates or "") == {"x": 1}
    quick = outcomes.failed(row(), "entry", NOW, RetryPolicy(), lambda: soon)
    assert (quick.state, quick.scheduled_at) == (JobState.AVAILABLE, soon)


def test_failed_on_the_last_attempt_is_discarded_without_asking_for_a_retry_time() -> None:
    def not_asked() -> datetime:
        raise AssertionError("a discarded job needs no retry time")

    update = outcomes.failed(row(attempt=25), "entry", NOW, FixedPolicy(ValueError()), not_asked)
    assert (update.state, update.finalized, update.scheduled_at, update.error) == (
        JobState.DISCARDED,
        True,
        None,
        "entry",
    )


def test_an_undecodable_row_fails_naming_its_columns_and_retries_by_the_policy() -> None:
    bad = row(decode_errors=("scheduled_at: unknown form", "args: invalid JSON"))
    policy_time = NOW + timedelta(minutes=7)
    update = outcomes.undecodable(bad, NOW, FixedPolicy(policy_time))
    assert (update.state, update.scheduled_at) == (JobState.RETRYABLE, policy_time)
    error = json.loads(update.error or "")
    assert error["attempt"] == 1 and error["trace"] == ""
    assert error["error"] == (
        "riverboat could not decode the job row: scheduled_at: unknown form; args: invalid JSON"
    )
    last = outcomes.undecodable(
        row(attempt=3, max_attempts=3, decode_errors=("x",)), NOW, RetryPolicy()
    )
    assert (last.state, last.finalized) == (JobState.DISCARDED, True)


# -- the rescuer's update -------------------------------------------------------------


def rescue(job: JobRow, **kwargs: Any) -> Any:
    options: dict[str, Any] = {"worker_known": True, "decoded": True, "timeout": 60.0}
    options.update(kwargs)
    return outcomes.rescued(job, NOW, FixedPolicy(NOW + timedelta(hours=2)), **options)


def test_a_rescue_records_rivers_error_and_a_final_one_keeps_scheduled_at() -> None:
    job = row(attempt=25)
    update = rescue(job)
    assert (update.state, update.finalized_at, update.scheduled_at) == (
        "discarded",
        NOW,
        job.scheduled_at,
    )
    error = json.loads(update.error)
    assert (error["error"], error["attempt"], error["trace"]) == (RESCUE_ERROR, 25, "")


def test_a_cancel_asked_for_comes_first_even_without_a_worker() -> None:
    job = row(metadata={"cancel_attempted_at": "2026-01-02T03:00:00Z"})
    assert rescue(job, worker_known=False).state == "cancelled"
    assert rescue(job, timeout=None).state == "cancelled"
    assert rescue(row(metadata={"cancel_attempted_at": ""})).state == "retryable"


def test_a_job_of_an_unknown_kind_is_discarded() -> None:
    assert rescue(row(), worker_known=False).state == "discarded"


def test_a_decoded_job_is_left_running_until_its_timeout_passed() -> None:
    assert rescue(row(), timeout=None) is None  # no limit: River never rescues it
    assert rescue(row(), timeout=100.5) is None  # attempted 100 s ago
    assert rescue(row(), timeout=100.0).state == "retryable"
    assert rescue(row(attempted_at=None), timeout=100.5).state == "retryable"


def test_a_dead_claimant_makes_the_timeout_irrelevant() -> None:
    assert rescue(row(), timeout=None, claimant_dead=True).state == "retryable"
    assert rescue(row(), timeout=1e9, claimant_dead=True).state == "retryable"


def test_a_rescued_retry_is_retryable_at_the_workers_time_even_if_soon_or_past() -> None:
    for when in (NOW + timedelta(seconds=1), NOW - timedelta(minutes=5)):
        update = rescue(row(), worker_time=lambda when=when: when)
        assert (update.state, update.scheduled_at, update.finalized_at) == (
            "retryable",
            when,
            None,
        )


def test_args_that_do_not_decode_retry_by_the_policy_whatever_the_timeout() -> None:
    def not_asked() -> datetime:
        raise AssertionError("the worker is not asked about a job it can't decode")

    update = rescue(row(), decoded=False, timeout=None, worker_time=not_asked)
    assert (update.state, update.scheduled_at) == ("retryable", NOW + timedelta(hours=2))
    assert rescue(row(attempt=25), decoded=False).state == "discarded"
