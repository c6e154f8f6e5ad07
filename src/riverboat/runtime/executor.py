"""Running one job and finding out what happened, for the completer.

What each outcome writes is decided in runtime/outcomes.py (River's executor rules):
success completes; an error retries with backoff or discards once attempts are used up;
``JobCancel`` cancels; ``JobSnooze`` reschedules without counting the attempt; a hard
stop interrupts (River 0.44). This module tells which of those happened. A sync job is
awaited until its thread returns, whatever its timeout: River keeps a job ``running``
until ``Work`` returns, and a row made available while its thread still ran would be run
twice at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import os
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from riverboat._job import JobRow, JobState
from riverboat._json import storable_text
from riverboat.dialect.base import JobStateUpdate
from riverboat.error_handler import run_error_handlers
from riverboat.errors import CALLBACK_FAILURES, UnknownJobKindError
from riverboat.middleware import call_with_middleware
from riverboat.runtime import outcomes
from riverboat.runtime.completer import PendingCompletion
from riverboat.runtime.events import EventKind
from riverboat.runtime.outcomes import RetryPolicy
from riverboat.runtime.threads import DaemonThreadPool, awaitable_error, call_then_release
from riverboat.runtime.worker import (
    Job,
    JobCancel,
    JobSnooze,
    RegisteredWorker,
    Workers,
    _work_context,
    _WorkContext,
    call_timeout_fn,
    prepare_for_process,
)

if TYPE_CHECKING:
    from riverboat.runtime.process_pool import ProcessPool

__all__ = [
    "ExecutorConfig",
    "JobTimeoutError",
    "execute_job",
    "timeout_for",
    "undecodable_completion",
]

log = logging.getLogger("riverboat.executor")
# A claimed row that can't be decoded is never run: its line is the producer's.
producer_log = logging.getLogger("riverboat.producer")


class JobTimeoutError(Exception):
    """A job ran past its timeout."""


class JobCancelledRemotely(Exception):
    """Someone cancelled this running job through the client (River's cancel control)."""

    def __init__(self) -> None:
        super().__init__("job cancelled remotely")


@dataclass(slots=True)
class ExecutorConfig:
    workers: Workers
    job_timeout: float | None  # seconds; None or -1 means no timeout
    retry_policy: RetryPolicy
    thread_pool: Executor | None
    # riverboat.middleware.MiddlewareStack with work middleware, else None (the plain path)
    middleware: Any = None
    # riverboat.runtime.process_pool.ProcessPool for the queue's process jobs, and the
    # queue's executor ("thread" or "process") for workers that don't name their own.
    process_pool: ProcessPool | None = None
    default_executor: str = "thread"


def runs_in_process(worker: RegisteredWorker, config: ExecutorConfig) -> bool:
    """Whether ``worker``'s jobs run in the process pool (else threads or the loop)."""
    return (
        config.process_pool is not None
        and not worker.is_async
        and (worker.executor or config.default_executor) == "process"
    )


@dataclass(slots=True)
class RunState:
    """Per-job flags the producer sets from outside (remote cancel, hard stop)."""

    job: Job[Any] | None = None
    cancelled_remotely: bool = False
    interrupted: bool = False
    # Threads can't be interrupted: cancelling a sync job's task would free its slot and
    # requeue it while the thread still runs it. A remote cancel or a timeout cancels
    # only async jobs; only a hard stop (the process is going away) hands back a sync job
    # whose thread still runs.
    cancellable: bool = True
    # The process pool is reading, for a hard stop, the outcome the job's child was
    # sending (bounded by SENT_READ_LIMIT): the job's deadline waits for that read to
    # end, then applies again (to work middleware that goes on awaiting).
    reading_sent: bool = False
    # Orphaned by a lost lease (Producer.orphan_running): its outcome is dropped.
    orphaned: bool = False
    # Set once execute_job runs. A task cancelled before its first step never runs any
    # of its code (so no outcome would be written); such jobs get flags instead.
    started: bool = False
    # Set once execute_job has returned: the attempt is over and its outcome decided, so
    # nothing is left to stop or time out. The outcome may still wait for room in the
    # completer (its backpressure); a cancel there would only drop it, and the job, run
    # and finished, would be rescued and run again.
    ended: bool = False
    # Set once the job's code is over (its body and work middleware returned or raised)
    # and its error decided, before its error handlers run. The job's timeout no longer
    # applies (River calls HandleError outside the timeout's context), and a hard stop
    # does not hand the job back: it cuts the handlers short, and the outcome stands.
    past_body: bool = False
    # A sync job's body call its task is awaiting (a thread's result reaches the task a
    # loop iteration or more after the body returned), else None.
    body_call: _BodyCall | None = None
    # A hard stop came while body_call had returned but its result had not reached the
    # task: the job was not handed back, its result goes on to the code awaiting it, and
    # that code is cut short at its next await (then the job is handed back after all).
    stopped_after_body: bool = False
    # The outcome goes to the completer without waiting for room past its high-water
    # mark: a stop or a cancel cut the job short, and waiting there for a database that
    # does not answer would hold the stop for as long.
    hand_over_now: bool = False
    # An async job's timeout watched by its producer (one timer for all its jobs, where
    # asyncio.timeout would cost a timer per job): the loop time it is due, its length,
    # and whether it fired.
    deadline: float | None = None
    timeout: float = 0.0
    timed_out: bool = False
    # A sync job still running past its timeout: logged once as stuck (River's
    # JobStuckHandler idea), and once more if it ever returns.
    stuck: bool = False
    # The job's deadline is set (and the producer's timer armed) by this, called when
    # its body starts (execute_job), as River's timeout counts from Work's call; for a
    # process job once a child takes it. A task that waited for its first step behind a
    # busy event loop (another job blocking it) was otherwise timed out before it ran,
    # or cancelled at its first await, having used an attempt.
    arm_deadline: Callable[[RunState], None] | None = None


class _BodyCall:
    """A sync job's body on its pool thread, seen from the job's task: ``returned`` turns
    True (on the thread, before the AFTER_SYNC_JOB hooks) once the body returned or
    raised (``error``); ``kept`` is set by a hard stop that found it so."""

    __slots__ = ("error", "kept", "returned")

    def __init__(self) -> None:
        self.returned = False
        self.error: BaseException | None = None
        self.kept = False


def _run_body(fn: Callable[..., Any], job: Job[Any], call: _BodyCall) -> None:
    """``fn(job)`` on the pool thread, noting on ``call`` that it returned, or what it
    raised."""
    try:
        fn(job)
    except BaseException as exc:
        call.error = exc
        call.returned = True
        raise
    call.returned = True


_RUNTIME_FRAMES = (
    os.path.dirname(os.path.abspath(__file__)),
    os.path.dirname(asyncio.__file__),
    os.path.dirname(concurrent.futures.__file__),
)


def _user_traceback(exc: BaseException) -> str:
    """The traceback without riverboat's and asyncio's own frames above the work function."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_RUNTIME_FRAMES):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


def _error_entry(row: JobRow, started: datetime, exc: BaseException) -> str:
    text = outcomes.error_message(exc)
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    # An error from a child process (runtime/process_pool.py) carries the child's trace.
    trace = getattr(exc, "remote_traceback", "") or (
        _user_traceback(exc) if exc.__traceback__ else ""
    )
    return outcomes.attempt_error(started, row.attempt, message, trace)


def timeout_for(
    worker: RegisteredWorker | None, default: float | None, job: Job[Any] | JobRow | None = None
) -> float | None:
    """The seconds a job of this worker may run, or None for no limit
    (:func:`~riverboat.runtime.outcomes.effective_timeout`). A worker with a per-job
    timeout function is asked with ``job`` (a row is decoded for it)."""
    own = worker.timeout if worker is not None else None
    if worker is not None and worker.timeout_fn is not None and job is not None:
        if isinstance(job, JobRow):
            try:
                job = Job(job, worker.decode(job))
            except Exception:
                job = None  # the executor reports the decode error; use the default
        own = call_timeout_fn(worker, job) if job is not None else None
    return outcomes.effective_timeout(own, default)


async def _call(
    worker: RegisteredWorker,
    job: Job[Any],
    ctx: _WorkContext,
    timeout: float | None,
    pool: Executor | None,
    watched: bool = False,
    process_pool: ProcessPool | None = None,
    state: RunState | None = None,
) -> None:
    if process_pool is not None:
        # A child process: the producer's deadline watch cancels this task at the job's
        # timeout (state.cancellable), and the pool kills the child. The timeout counts
        # from when a child takes the job, not from a wait for a free or new child.
        if worker.process_reference is None:  # registered after the client was made
            prepare_for_process(worker)
        reference = worker.process_reference
        assert reference is not None  # prepare_for_process set it, or raised
        arm = None
        if state is not None and state.arm_deadline is not None:
            arm = functools.partial(state.arm_deadline, state)
        if state is None:
            await process_pool.run(worker, job, ctx, reference, arm)
            return
        if state.interrupted or state.stopped_after_body:
            raise asyncio.CancelledError  # handed back: a middleware calling it again

        def keep_sent() -> bool:
            # A hard stop (not a timeout, not a remote cancel) that came once the child
            # had sent its outcome: the job ran to its end, and handed back it would run
            # again. Its outcome goes on, as for a sync job's body that returned on its
            # thread (below).
            # Not for a job orphaned by a lost lease: its outcome is dropped anyway, and
            # its child, read alive, would go on running it beside another attempt.
            if (
                state.interrupted
                and not state.orphaned
                and not state.cancelled_remotely
                and not state.timed_out
            ):
                state.reading_sent = True
                return True
            return False

        def keep() -> None:
            state.interrupted = False  # not handed back after all
            state.stopped_after_body = True

        try:
            await process_pool.run(worker, job, ctx, reference, arm, keep_sent, keep)
        finally:
            state.reading_sent = False
            # Set by keep() alone here: it was not when this call began (above), and
            # a process job has no body call for a hard stop to find returned.
            if state.stopped_after_body:
                # Once its child is reaped: what its code awaits next is cut short.
                task = asyncio.current_task()
                assert task is not None
                task.uncancel()
                asyncio.get_running_loop().call_soon(task.cancel)
        return
    if worker.is_async:
        _work_context.set(ctx)
        if timeout is None or watched:  # watched: the producer cancels it when due
            await worker.fn(job)
            return
        try:
            async with asyncio.timeout(timeout):
                await worker.fn(job)
        except TimeoutError:
            raise JobTimeoutError(f"job exceeded its timeout of {timeout:g}s") from None
        return
    # A thread cannot be stopped from outside, so a sync job is awaited to its end, as
    # River waits for Work to return: its row stays running and its slot held, and what
    # the body did (returned or raised) is its outcome. Past its timeout the producer
    # logs it as stuck and sets job.cancel_requested for bodies that check it.
    context = contextvars.copy_context()
    context.run(_work_context.set, ctx)
    if state is None:
        await _in_thread(pool, context, worker.fn, job)
        return
    if state.interrupted or state.stopped_after_body:
        # A hard stop handed the job back (or cut it short after its body returned) and
        # a middleware calls the body again: it does not start, the row may be claimed
        # by another worker already.
        raise asyncio.CancelledError
    call = state.body_call = _BodyCall()
    kept_error: BaseException | None = None
    try:
        await _in_thread(pool, context, _run_body, worker.fn, job, call)
    except asyncio.CancelledError:
        if not call.kept:
            raise
        # The hard stop came once the body had returned on its thread, its result not
        # yet here (Producer.interrupt_running): the body ran to its end, so its result
        # goes on to the code awaiting it, as if the stop had come a moment later. What
        # that code awaits next (work middleware, error handlers, the hand-over to the
        # completer) is cut short, so the stop does not wait for it.
        task = asyncio.current_task()
        assert task is not None
        task.uncancel()
        asyncio.get_running_loop().call_soon(task.cancel)
        kept_error = call.error
        if kept_error is None:
            return
    finally:
        # The error's traceback holds the frames that hold ``call``: no cycle to keep a
        # failed job's locals alive until the collector runs (see execute_job).
        state.body_call = call.error = None
    if kept_error is not None:
        # Raised here, outside the except block, so that its context is its own.
        try:
            raise awaitable_error(kept_error)
        finally:
            kept_error = None


async def _in_thread(
    pool: Executor | None, context: contextvars.Context, fn: Callable[..., Any], /, *args: Any
) -> Any:
    """``fn(*args)`` in ``context`` on a thread of ``pool``, then the AFTER_SYNC_JOB
    hooks there (threads.call_then_release)."""
    if isinstance(pool, DaemonThreadPool):  # the producer's: outcomes batched per wake-up
        return await pool.run(context.run, call_then_release, fn, *args)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(pool, context.run, call_then_release, fn, *args)


async def execute_job(row: JobRow, config: ExecutorConfig, state: RunState) -> PendingCompletion:
    """Run ``row``'s worker and return its outcome for the completer."""
    state.started = True
    started_mono = time.monotonic()
    started_at = time.time()
    worker = config.workers.get(row.kind)
    ctx = _WorkContext()
    error: BaseException | None = None
    in_process = False
    try:
        if state.interrupted or state.cancelled_remotely or state.timed_out:
            raise asyncio.CancelledError  # flagged before it started: same outcome
        if worker is None:
            raise UnknownJobKindError(row.kind)
        is_async = worker.is_async
        in_process = runs_in_process(worker, config)
        state.cancellable = is_async or in_process
        if state.arm_deadline is not None and not in_process:
            state.arm_deadline(state)
        job = Job(row, worker.decode(row), ctx)
        state.job = job
        if (config.middleware is None or not config.middleware.has_work) and not worker.middleware:
            if is_async and state.deadline is not None:
                # The common case, spelled out: an async job whose timeout the producer
                # watches needs no timeout lookup and no further coroutine frame.
                _work_context.set(ctx)
                await worker.fn(job)
            else:
                await _call(
                    worker,
                    job,
                    ctx,
                    timeout_for(worker, config.job_timeout, job),
                    config.thread_pool,
                    process_pool=config.process_pool if in_process else None,
                    state=state,
                )
        else:
            timeout = timeout_for(worker, config.job_timeout, job)
            watched = state.deadline is not None and (worker.is_async or in_process)

            def inner(target: RegisteredWorker) -> Any:
                process = config.process_pool if runs_in_process(target, config) else None
                return _call(target, job, ctx, timeout, config.thread_pool, watched, process, state)

            await call_with_middleware(config.middleware, worker, job, inner)
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        cancelled_here = task is not None and task.cancelling() > 0
        if task is not None and cancelled_here:
            task.uncancel()
        if state.cancelled_remotely:
            error = JobCancel(JobCancelledRemotely())
        elif state.timed_out:
            killed = "; its child process was killed" if in_process else ""
            error = JobTimeoutError(f"job exceeded its timeout of {state.timeout:g}s{killed}")
        elif state.interrupted or state.stopped_after_body:
            # Handed back; or cut short after a body that returned, in the code that
            # awaited it (work middleware): handed back as well, as if the stop had come
            # a moment later, since that code had not finished.
            state.interrupted = True
            error = None
        elif not cancelled_here:
            # The job's own code raised it (it awaited a task something else cancelled):
            # its attempt fails like any error. Re-raised, it left the row running with
            # no outcome until the rescuer ran it again.
            error = exc
        else:
            raise
    except BaseException as exc:
        # SystemExit (sys.exit(), argparse refusing its arguments) and KeyboardInterrupt
        # raised by the job's code fail its attempt like any error. Re-raised, they ended
        # the event loop and left the client hanging, its jobs running. A real Ctrl-C
        # never arrives here: it reaches the main thread (the sync client's loop runs in
        # a thread of its own) or, under asyncio.run, cancels the main task.
        error = exc
    state.past_body = True
    if state.cancelled_remotely and error is not None and not isinstance(error, JobCancel):
        # River: an error after a remote cancel becomes the cancellation.
        error = JobCancel(JobCancelledRemotely())
    if ctx.resumable is not None:
        error = ctx.resumable.finish(error, state.interrupted, ctx.metadata_updates)
    if (
        error is not None
        and config.middleware is not None
        and config.middleware.error_handlers
        and not isinstance(error, (JobSnooze, JobCancel))
    ):
        pool = config.thread_pool

        async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
            return await _in_thread(pool, contextvars.copy_context(), fn, *args)

        if state.interrupted or state.hand_over_now:
            # A stop came first (the job's code turned its cancel into this error): the
            # job is handed back, or its outcome goes at once; nothing is left to cut
            # handlers short that started now, and the stop would wait for them.
            _say_cut_short(row, "the client is stopping")
        else:
            try:
                if await run_error_handlers(
                    config.middleware.error_handlers, row, error, in_thread
                ):
                    error = JobCancel(error)
            except asyncio.CancelledError:
                if _cut_short(row, state):
                    # As a remote cancel that came a moment earlier: the cancellation.
                    error = JobCancel(JobCancelledRemotely())
    finished = time.monotonic()
    if error is None and not state.interrupted and not ctx.metadata_updates:
        # A plain completion (most outcomes): nothing to merge, no clock to read.
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "job %d (%s) attempt %d/%d completed in %.3fs",
                row.id,
                row.kind,
                row.attempt,
                row.max_attempts,
                finished - started_mono,
            )
        return PendingCompletion(
            outcomes.completed(row.id),
            row,
            EventKind.JOB_COMPLETED,
            started_at,
            finished - started_mono,
            finished,
        )
    started = datetime.fromtimestamp(started_at, UTC)
    try:
        update, kind = _outcome(row, error, ctx, state, worker, config, started)
    except CALLBACK_FAILURES as exc:
        # A bug of riverboat's, or a value from user code it did not foresee: the
        # attempt fails with it, as if the work function had raised it, rather than the
        # job staying running until the rescuer (with no outcome, nothing writes it).
        log.exception("job %d (%s): its outcome could not be computed", row.id, row.kind)
        entry = _error_entry(row, started, exc)
        # River's default backoff: the user's retry policy may be what raised.
        update = outcomes.failed(row, entry, datetime.now(UTC), outcomes.RetryPolicy())
        kind, error = EventKind.JOB_FAILED, exc
    if kind is EventKind.JOB_FAILED and error is not None:
        _log_failure(row, error, update, ctx.completed_in_tx)
    elif log.isEnabledFor(logging.DEBUG):
        log.debug(
            "job %d (%s) attempt %d/%d %s in %.3fs",
            row.id,
            row.kind,
            row.attempt,
            row.max_attempts,
            update.state.value,
            finished - started_mono,
        )
    # The error's traceback holds this frame, whose `error` holds the traceback: a cycle
    # that would keep the failed job's frames and their locals (a payload, a buffer)
    # alive until the collector's next run, which riverboat worker makes rare (see
    # runtime/collector.py). Dropping the reference frees them now.
    error = None
    return PendingCompletion(update, row, kind, started_at, finished - started_mono, finished)


def _cut_short(row: JobRow, state: RunState) -> bool:
    """A cancel reached the job's error handlers: a hard stop, a stop giving up on its
    producer, a remote cancel (the job's timeout no longer applies there). The body is
    over and its error decided, so the handlers are cut short and the attempt's outcome
    is still written, without their verdict; had the cancel gone on, the task would
    have ended with no outcome, the row left running, and the rescuer would have run
    the job again. (River waits for HandleError, which gets a cancelled context; a
    thread or a coroutine can't be made to return, so this does not wait.) The outcome
    then goes to the completer at once, past its high-water mark: a stop must not wait
    for room in it. True when the cancel was a remote cancel of the job."""
    task = asyncio.current_task()
    cancelled = task is not None and task.cancelling() > 0
    if task is not None and cancelled:
        task.uncancel()
    remote = cancelled and state.cancelled_remotely and not state.hand_over_now
    if not cancelled:
        why = "an error handler raised CancelledError"
    elif remote:
        why = "the job was cancelled remotely"
    else:
        why = "the client is stopping"  # a hard stop, or a stop giving up on its producer
    state.hand_over_now = state.hand_over_now or cancelled
    _say_cut_short(row, why)
    return remote


def _say_cut_short(row: JobRow, why: str) -> None:
    log.warning(
        "job %d (%s): its error handlers were cut short (%s); the attempt's outcome is "
        "written without their verdict",
        row.id,
        row.kind,
        why,
    )


def _log_failure(
    row: JobRow, error: BaseException, update: JobStateUpdate, completed_in_tx: bool = False
) -> None:
    """One line per failed attempt (kind, id, attempt, error): WARNING when it will be
    retried, ERROR when the job is discarded. The traceback goes with the final failure
    only, and to DEBUG for the others (a job retried 25 times would otherwise print its
    stack 25 times; River 0.33 demoted job errors for the same reason). A timeout or
    an unknown kind has none worth showing (it would only show riverboat).

    After ``job_complete_tx`` the failure decides nothing if that transaction
    committed (the row is completed; the outcome only changes rows still running), so
    it is one WARNING that says so, not an alert that the job was discarded."""
    if completed_in_tx:
        log.warning(
            "job %d (%s) attempt %d/%d raised after job_complete_tx: %s: %s; the job stays "
            "completed if that transaction committed, else this failure is its outcome",
            row.id,
            row.kind,
            row.attempt,
            row.max_attempts,
            type(error).__name__,
            storable_text(outcomes.error_message(error)),
        )
        return
    discarded = update.state is JobState.DISCARDED
    trace = not isinstance(error, (JobTimeoutError, UnknownJobKindError))
    log.log(
        logging.ERROR if discarded else logging.WARNING,
        "job %d (%s) attempt %d/%d failed%s: %s: %s",
        row.id,
        row.kind,
        row.attempt,
        row.max_attempts,
        ", discarded" if discarded else ", will retry",
        type(error).__name__,
        # A NUL in a log file makes tools call it binary; a __str__ that raises here
        # left the row running with no outcome.
        storable_text(outcomes.error_message(error)),
        exc_info=error if discarded and trace else None,
    )
    if trace and not discarded and log.isEnabledFor(logging.DEBUG):
        log.debug("job %d (%s) attempt %d traceback", row.id, row.kind, row.attempt, exc_info=error)


def _outcome(
    row: JobRow,
    error: BaseException | None,
    ctx: _WorkContext,
    state: RunState,
    worker: RegisteredWorker | None,
    config: ExecutorConfig,
    started: datetime,
) -> tuple[JobStateUpdate, EventKind]:
    """Which outcome the attempt had, and its update (runtime/outcomes.py)."""
    now = datetime.now(UTC)
    staged = ctx.metadata_updates
    if error is None and state.interrupted and not state.cancelled_remotely:
        return outcomes.interrupted(row, now, staged), EventKind.JOB_INTERRUPTED
    if error is None:
        return outcomes.completed(row.id, staged), EventKind.JOB_COMPLETED
    if isinstance(error, JobSnooze):
        return outcomes.snoozed(row, error.seconds, now, staged), EventKind.JOB_SNOOZED
    if isinstance(error, JobCancel):
        reason = error.reason
        cause = reason if isinstance(reason, BaseException) else error
        entry = _error_entry(row, started, cause)
        return outcomes.cancelled(row, entry, staged), EventKind.JOB_CANCELLED
    # The worker's next_retry is asked only about a job whose args decoded (River's rule).
    worker_time = None
    if worker is not None and worker.next_retry is not None and state.job is not None:
        worker_time = functools.partial(worker.next_retry, state.job)
    entry = _error_entry(row, started, error)
    update = outcomes.failed(row, entry, now, config.retry_policy, worker_time, staged)
    return update, EventKind.JOB_FAILED


def undecodable_completion(row: JobRow, policy: RetryPolicy, queue: str) -> PendingCompletion:
    """The completer update for a claimed row that can't be decoded (not run: its
    attempt fails, :func:`~riverboat.runtime.outcomes.undecodable`); logs it once."""
    update = outcomes.undecodable(row, datetime.now(UTC), policy)
    producer_log.error(
        "producer %s: job %d (%s) attempt %d/%d not run, %s: %s",
        queue,
        row.id,
        row.kind or "?",
        row.attempt,
        row.max_attempts,
        "discarded" if update.state is JobState.DISCARDED else "will retry",
        outcomes.decode_error_message(row),
    )
    return PendingCompletion(update, row, EventKind.JOB_FAILED, 0.0, 0.0, time.monotonic())
