"""Every outcome a worker can produce, written as River writes it."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from riverboat import (
    EventKind,
    InsertOpts,
    InvalidInputError,
    Job,
    JobCancel,
    JobRow,
    JobSnooze,
    JobState,
    Worker,
    Workers,
    record_output,
)
from tests.runtime.helpers import make_client, next_events, wait_for

pytestmark = pytest.mark.asyncio


async def _first(
    driver: Any,
    workers: Workers,
    kind: str,
    event_kind: EventKind,
    opts: InsertOpts | None = None,
    **client_options: Any,
) -> JobRow:
    """Insert one job of ``kind``, work it, and return the job as the first
    ``event_kind`` event for it shows it."""
    client = make_client(driver, workers, **client_options)
    inserted = (await client.insert({}, opts, kind=kind)).job
    sub = client.subscribe(event_kind)
    await client.start()
    try:
        event = await wait_for([event_kind], sub, inserted.id)
    finally:
        await client.stop()
    assert event.job is not None
    return event.job


@dataclass
class Greet:
    kind: ClassVar[str] = "greet"
    name: str


async def test_async_worker_completes_with_typed_args(apg_driver: Any) -> None:
    seen: list[str] = []
    workers = Workers()

    @workers.register(Greet)
    async def greet(job: Job[Greet]) -> None:
        seen.append(job.args.name)
        record_output({"hello": job.args.name})

    client = make_client(apg_driver, workers)
    inserted = await client.insert(Greet(name="ada"))
    sub = client.subscribe(EventKind.JOB_COMPLETED)
    await client.start()
    try:
        (event,) = await next_events(sub, 1)
    finally:
        await client.stop()
    job = event.job
    assert job is not None and job.id == inserted.job.id
    assert seen == ["ada"]
    assert job.state == JobState.COMPLETED
    assert job.attempt == 1
    assert job.attempted_by == [client.id]
    assert job.finalized_at is not None and job.attempted_at is not None
    assert job.metadata == {"output": {"hello": "ada"}}
    assert event.stats is not None and event.stats.run_duration >= 0
    stored = await client.job_get(job.id)
    assert stored == job


async def test_sync_worker_runs_in_a_thread(apg_driver: Any) -> None:
    threads: list[str] = []
    workers = Workers()

    @workers.register("sync_kind")
    def work(job: Job[dict[str, Any]]) -> None:
        threads.append(threading.current_thread().name)
        assert job.args == {"n": 1}

    client = make_client(apg_driver, workers)
    await client.insert({"n": 1}, kind="sync_kind")
    sub = client.subscribe(EventKind.JOB_COMPLETED)
    await client.start()
    try:
        await next_events(sub, 1)
    finally:
        await client.stop()
    assert len(threads) == 1 and threads[0].startswith("riverboat-default")


async def test_error_retries_soon_then_with_backoff(apg_driver: Any) -> None:
    workers = Workers()

    @workers.register("flaky")
    async def flaky(job: Job[Any]) -> None:
        raise RuntimeError(f"attempt {job.attempt} failed")

    client = make_client(apg_driver, workers)
    inserted = (await client.insert({}, kind="flaky")).job
    sub = client.subscribe(EventKind.JOB_FAILED)
    await client.start()
    try:
        event = await wait_for([EventKind.JOB_FAILED], sub, inserted.id)
        first = event.job
        assert first is not None
        # The first retry is ~1 s away (≤ 5 s): River makes it available at once with a
        # future scheduled_at instead of waiting for the scheduler.
        assert first.state == JobState.AVAILABLE
        assert first.scheduled_at > first.attempted_at  # type: ignore[operator]
        assert len(first.errors) == 1
        err = first.errors[0]
        assert err.attempt == 1 and err.error == "RuntimeError: attempt 1 failed"
        assert "raise RuntimeError" in err.trace and "riverboat/runtime" not in err.trace
        event = await wait_for([EventKind.JOB_FAILED], sub, inserted.id)
        second = event.job
    finally:
        await client.stop()
    assert second is not None
    # Second failure: (2 errors)^4 = 16 s ± 10% → retryable, for the scheduler.
    assert second.state == JobState.RETRYABLE
    assert second.attempt == 2 and len(second.errors) == 2
    delay = (second.scheduled_at - datetime.now(UTC)).total_seconds()
    assert 12 < delay < 18


async def test_exhausted_attempts_discard(apg_driver: Any) -> None:
    workers = Workers()

    @workers.register("doomed")
    async def doomed(job: Job[Any]) -> None:
        raise ValueError("no")

    job = await _first(
        apg_driver, workers, "doomed", EventKind.JOB_FAILED, InsertOpts(max_attempts=1)
    )
    assert job.state == JobState.DISCARDED
    assert job.finalized_at is not None
    assert job.errors[0].error == "ValueError: no"


async def test_a_cancelled_error_of_the_jobs_own_fails_its_attempt(apg_driver: Any) -> None:
    """A job that awaits a task something else cancelled raises CancelledError without
    the runtime having cancelled it: its attempt fails like any error (it used to be
    re-raised, leaving the row running with no outcome until the rescuer)."""
    workers = Workers()

    @workers.register("awaits_a_cancelled_task")
    async def awaits_a_cancelled_task(job: Job[Any]) -> None:
        other = asyncio.create_task(asyncio.sleep(10))
        await asyncio.sleep(0)
        other.cancel()
        await other

    job = await _first(
        apg_driver,
        workers,
        "awaits_a_cancelled_task",
        EventKind.JOB_FAILED,
        InsertOpts(max_attempts=1),
    )
    assert job.state == JobState.DISCARDED
    assert job.errors[0].error == "CancelledError"


async def test_a_huge_error_is_stored_capped(apg_driver: Any) -> None:
    """An exception carrying a 5 MB text stored it twice per attempt (the message, and
    the trace ending with it): one failing job's row grew by megabytes per attempt and
    every list of it read them all. The entry keeps the message's start and the trace's
    end, and says what it cut."""
    from riverboat.runtime.outcomes import ERROR_MESSAGE_MAX, ERROR_TRACE_MAX

    workers = Workers()

    @workers.register("loud")
    async def loud(job: Job[Any]) -> None:
        raise ValueError("upstream said: " + "x" * 5_000_000)

    job = await _first(
        apg_driver, workers, "loud", EventKind.JOB_FAILED, InsertOpts(max_attempts=1)
    )
    error = job.errors[0]
    message_cut = len("ValueError: upstream said: ") + 5_000_000 - ERROR_MESSAGE_MAX
    assert error.error == (
        f"ValueError: upstream said: {'x' * (ERROR_MESSAGE_MAX - 27)}… "
        f"({message_cut:,} more characters not stored)"
    )
    assert error.trace.startswith("(") and " characters of the trace not stored) …" in error.trace
    assert len(error.trace) < ERROR_TRACE_MAX + 100 and error.trace.endswith("x" * 1000 + "\n")


async def test_cancel_signal_cancels_with_error(apg_driver: Any) -> None:
    workers = Workers()

    @workers.register("cancel_me")
    async def cancel_me(job: Job[Any]) -> None:
        raise JobCancel("customer closed their account")

    job = await _first(apg_driver, workers, "cancel_me", EventKind.JOB_CANCELLED)
    assert job.state == JobState.CANCELLED and job.finalized_at
    assert job.errors[0].error == "JobCancel: customer closed their account"


@pytest.mark.parametrize(("seconds", "state"), [(30, JobState.SCHEDULED), (0, JobState.AVAILABLE)])
async def test_snooze_reschedules_without_counting_an_attempt(
    apg_driver: Any, seconds: int, state: JobState
) -> None:
    workers = Workers()
    runs = 0

    @workers.register("sleepy")
    async def sleepy(job: Job[Any]) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise JobSnooze(seconds)

    client = make_client(apg_driver, workers)
    inserted = (await client.insert({}, kind="sleepy")).job
    sub = client.subscribe(EventKind.JOB_SNOOZED, EventKind.JOB_COMPLETED)
    await client.start()
    try:
        event = await wait_for([EventKind.JOB_SNOOZED], sub, inserted.id)
        if seconds == 0:
            done = await wait_for([EventKind.JOB_COMPLETED], sub, inserted.id)
    finally:
        await client.stop()
    job = event.job
    assert job is not None
    assert job.state == state
    assert job.attempt == 0
    assert job.errors == []
    assert job.metadata == {"snoozes": 1}
    if seconds:
        wait = (job.scheduled_at - datetime.now(UTC)).total_seconds()
        assert 25 < wait <= 30
    else:
        assert done.job is not None and done.job.attempt == 1


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), 1e300, -1.0])
async def test_a_snooze_no_time_can_hold_is_refused_where_it_is_raised(seconds: float) -> None:
    with pytest.raises(InvalidInputError, match="snooze duration"):
        JobSnooze(seconds)


async def test_an_outcome_that_cannot_be_computed_fails_the_attempt(apg_driver: Any) -> None:
    """A value riverboat did not foresee (here a snooze changed after it was checked)
    fails the attempt with its error; before, the job stayed running until the rescuer
    (NaN, infinity or 1e300 seconds of JobSnooze did that, before they were refused)."""
    workers = Workers()

    @workers.register("odd_snooze")
    async def odd_snooze(job: Job[Any]) -> None:
        snooze = JobSnooze(1)
        snooze.seconds = float("nan")
        raise snooze

    job = await _first(apg_driver, workers, "odd_snooze", EventKind.JOB_FAILED)
    assert job.state in (JobState.AVAILABLE, JobState.RETRYABLE)
    assert job.attempt == 1 and "NaN" in job.errors[0].error


@pytest.mark.parametrize("is_async", [True, False], ids=["async", "sync"])
@pytest.mark.parametrize(
    ("raised", "error"),
    [(SystemExit(3), "SystemExit: 3"), (KeyboardInterrupt(), "KeyboardInterrupt")],
    ids=["sys_exit", "keyboard_interrupt"],
)
async def test_sys_exit_in_a_job_fails_its_attempt(
    apg_driver: Any, is_async: bool, raised: BaseException, error: str
) -> None:
    """sys.exit() in a job (argparse refusing arguments does it too) or a
    KeyboardInterrupt it raises fails the attempt; re-raised, they ended the event loop
    and the client hung with the job running."""
    workers = Workers()

    def leave(job: Job[Any]) -> None:
        raise raised

    async def leave_async(job: Job[Any]) -> None:
        raise raised

    workers.register("leaves")(leave_async if is_async else leave)
    job = await _first(apg_driver, workers, "leaves", EventKind.JOB_FAILED)
    assert job.errors[0].error == error and job.state is JobState.AVAILABLE


async def test_async_timeout_is_an_error(apg_driver: Any) -> None:
    workers = Workers()

    class Slow(Worker[dict[str, Any]]):
        kind = "slow"
        timeout = 0.05

        async def work(self, job: Job[dict[str, Any]]) -> None:
            await asyncio.Event().wait()

    workers.add(Slow())
    job = await _first(apg_driver, workers, "slow", EventKind.JOB_FAILED)
    assert job.errors[0].error == "JobTimeoutError: job exceeded its timeout of 0.05s"


async def test_unknown_kind_fails_with_rivers_error(apg_driver: Any) -> None:
    workers = Workers()

    @workers.register("known")
    async def known(job: Job[Any]) -> None:
        pass

    job = await _first(
        apg_driver, workers, "never_registered", EventKind.JOB_FAILED, skip_unknown_job_check=True
    )
    assert job.errors[0].error == (
        "UnknownJobKindError: job kind is not registered in the client's Workers bundle: "
        "never_registered"
    )
    assert job.state == JobState.AVAILABLE  # retried like any error


async def test_custom_next_retry(apg_driver: Any) -> None:
    workers = Workers()
    when = datetime.now(UTC) + timedelta(hours=3)

    @workers.register("later", next_retry=lambda job: when)
    async def later(job: Job[Any]) -> None:
        raise RuntimeError("try again in three hours")

    job = await _first(apg_driver, workers, "later", EventKind.JOB_FAILED)
    assert job.state == JobState.RETRYABLE
    assert abs((job.scheduled_at - when).total_seconds()) < 0.01


async def test_timeouts_fire_on_time_whatever_the_order_jobs_started(apg_driver: Any) -> None:
    # The producer keeps one timer for its async jobs' deadlines; a job with a short
    # timeout that starts after one with a long timeout must still be cut off on time.
    workers = Workers()
    release = asyncio.Event()

    @workers.register("patient", timeout=30)
    async def patient(job: Job[Any]) -> None:
        await release.wait()

    @workers.register("hasty", timeout=0.1)
    async def hasty(job: Job[Any]) -> None:
        await asyncio.Event().wait()

    client = make_client(apg_driver, workers)
    sub = client.subscribe(EventKind.JOB_FAILED, EventKind.JOB_COMPLETED)
    long_job = (await client.insert({}, InsertOpts(priority=1), kind="patient")).job
    await client.start()
    try:
        short_job = (await client.insert({}, kind="hasty")).job
        event = await wait_for([EventKind.JOB_FAILED], sub, short_job.id)
        assert event.job is not None
        assert event.job.errors[0].error == "JobTimeoutError: job exceeded its timeout of 0.1s"
        assert event.stats is not None and event.stats.run_duration < 5
        release.set()
        done = await wait_for([EventKind.JOB_COMPLETED], sub, long_job.id)
        assert done.job is not None and done.job.state == JobState.COMPLETED
    finally:
        await client.stop()


class _Payload:
    """Stands for what a job holds in its locals (a buffer, a parsed document)."""


@pytest.mark.parametrize("sync", [False, True])
async def test_a_failed_jobs_locals_are_freed_when_it_ends(apg_driver: Any, sync: bool) -> None:
    # riverboat worker runs the collector rarely (runtime/collector.py): what a failed
    # job held must not wait for it. The collector is off here, so only reference
    # counting can free the payload.
    payloads: list[weakref.ref[_Payload]] = []
    workers = Workers()

    def fail() -> None:
        payload = _Payload()
        payloads.append(weakref.ref(payload))
        raise ValueError("the upstream API said no")

    if sync:
        workers.register("fails_holding_a_payload")(lambda job: fail())
    else:

        @workers.register("fails_holding_a_payload")
        async def fails(job: Job[Any]) -> None:
            fail()

    client = make_client(apg_driver, workers)
    await client.insert({}, kind="fails_holding_a_payload")
    sub = client.subscribe(EventKind.JOB_FAILED)
    # A log record of the failure holds the exception (its traceback, its frames) for
    # as long as a handler keeps the record, and pytest's capture keeps them all.
    executor_log = logging.getLogger("riverboat.executor")
    was_enabled = gc.isenabled()
    gc.disable()
    executor_log.disabled = True
    try:
        await client.start()
        try:
            (event,) = await next_events(sub, 1)
        finally:
            await client.stop()
        assert event.job is not None and event.job.errors
        assert len(payloads) == 1  # its retry is a second away; the client has stopped
        assert payloads[0]() is None, "the failed job's locals outlived it"
    finally:
        executor_log.disabled = False
        if was_enabled:
            gc.enable()
