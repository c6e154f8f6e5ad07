"""A hard stop hands back the sync jobs whose threads still run them (available again,
attempt restored): what such a thread does afterwards is discarded, and the job runs
again later. A sync job whose body had already returned on its thread, its result not
yet back on the event loop (a loop iteration or more later; longer on a busy loop, and
for as long as an ``AFTER_SYNC_JOB`` hook runs on that thread), was handed back too: it
had run to its end, and it ran a second time. Seen as quick sync jobs run twice, both
times at attempt 1, with ``stop_and_cancel()`` while ``pg_terminate_backend`` kept the
loop busy with reconnects.

Now the body's result stands, and the stop still waits for nothing the job does after
its body: not for the hook (its thread is left to it), nor for work middleware that
calls the body again or awaits something after it, nor for error handlers. Those are
cut short at once (a middleware still running is handed back, as at any other moment),
even with ``soft_stop_timeout=None``, where nothing else would end the stop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import riverboat
from riverboat import ErrorHandlerResult, Job, JobRow, JobState, QueueConfig, Workers
from riverboat.runtime import threads
from tests.runtime.dbs import Db, any_db  # noqa: F401

STOP_WITHIN = 5.0  # seconds: the hard stop ends at once; this only catches a wait


class Holds:
    """An AFTER_SYNC_JOB hook that holds a pool thread once a body call returned (the
    window between the body's end and its result reaching the event loop), until
    released. ``calls`` tells which calls of the pool's it holds (1: the first)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.calls = {1}
        self.held = asyncio.Event()
        self.release = threading.Event()
        self.seen = 0

    def __call__(self) -> None:
        if not threading.current_thread().name.startswith("riverboat"):
            return
        self.seen += 1
        if self.seen in self.calls:
            self.loop.call_soon_threadsafe(self.held.set)
            self.release.wait(30)


@pytest.fixture
async def hold(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Holds]:
    holds = Holds()
    monkeypatch.setattr(threads, "AFTER_SYNC_JOB", [holds])
    try:
        yield holds
    finally:
        holds.release.set()


async def _stop_while(
    db: Db,
    workers: Workers,
    ready: asyncio.Event,
    *,
    soft_stop_timeout: float | None,
    middleware: list[Any] | None = None,
    release: Callable[[], None],
) -> tuple[JobRow, riverboat.AsyncClient]:
    """Insert a job, start a client, hard-stop it once ``ready`` is set, and return the
    job's row and the client (closed). The stop must end within STOP_WITHIN, whatever
    the job's thread or code still does; ``release`` then lets the test's threads go
    (before the client closes, which would wait for a stop still under way)."""
    client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=1)},
        workers=workers,
        middleware=middleware or [],
        soft_stop_timeout=soft_stop_timeout,
        fetch_poll_interval=0.1,
    )
    other = riverboat.AsyncClient(db.url, schema=db.schema)
    try:
        opts = riverboat.InsertOpts(max_attempts=1)
        job_id = (await other.insert({}, kind="body", opts=opts)).job.id
        await client.start()
        async with asyncio.timeout(10):
            await ready.wait()
        async with asyncio.timeout(STOP_WITHIN):
            await client.stop_and_cancel()
        row = await other.job_get(job_id)
    finally:
        release()
        await client.close()
        await other.close()
    return row, client


@pytest.mark.parametrize("soft_stop_timeout", [None, 25.0])
@pytest.mark.parametrize("body", ["returns", "raises"])
async def test_hard_stop_keeps_a_sync_job_whose_body_returned(
    any_db: Db,  # noqa: F811
    hold: Holds,
    soft_stop_timeout: float | None,
    body: str,
) -> None:
    """The hook still holds the thread when the stop ends: the stop did not wait for
    it, and the body's result is the outcome. Before: handed back (``available``,
    attempt 0) and run again."""
    runs: list[int] = []
    workers = Workers()

    @workers.register("body")
    def work(job: Job[Any]) -> None:
        runs.append(job.id)
        if body == "raises":
            raise ValueError("the body failed")

    still_held: list[bool] = []

    def release() -> None:
        still_held.append(not hold.release.is_set())
        hold.release.set()

    row, client = await _stop_while(
        any_db, workers, hold.held, soft_stop_timeout=soft_stop_timeout, release=release
    )
    assert still_held == [True], "the stop ended while the hook held the thread"
    assert runs == [row.id]
    if body == "returns":
        assert (row.state, row.attempt) == (JobState.COMPLETED, 1)
    else:
        assert (row.state, row.attempt) == (JobState.DISCARDED, 1)
        assert row.errors[-1].error == "ValueError: the body failed"
    assert client.runtime.abandoned_threads == 0, "not counted as handed back"


class SlowHandler:
    """A plain error handler that does not answer (on a worker thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.started = asyncio.Event()
        self.release = threading.Event()
        self.calls = 0

    def handle_error(self, job: JobRow, exc: BaseException) -> ErrorHandlerResult:
        self.calls += 1
        self.loop.call_soon_threadsafe(self.started.set)
        self.release.wait(30)
        return ErrorHandlerResult(set_cancelled=True)


@pytest.mark.parametrize("when", ["in_the_handler", "body_just_returned"])
async def test_hard_stop_cuts_slow_sync_error_handlers_short(
    any_db: Db,  # noqa: F811
    hold: Holds,
    when: str,
) -> None:
    """A sync body raised; its (sync) error handler does not answer. A hard stop with
    ``soft_stop_timeout=None`` ends at once, the failure written without the handler's
    verdict: whether it came while the handler ran, or once the body had returned, its
    error not yet back on the loop (the handler not yet called)."""
    loop = asyncio.get_running_loop()
    runs: list[int] = []
    workers = Workers()

    @workers.register("body")
    def work(job: Job[Any]) -> None:
        runs.append(job.id)
        raise ValueError("the body failed")

    handler = SlowHandler(loop)
    if when == "in_the_handler":
        hold.calls = set()  # the body's result goes straight back

    def release() -> None:
        handler.release.set()
        hold.release.set()

    row, _ = await _stop_while(
        any_db,
        workers,
        handler.started if when == "in_the_handler" else hold.held,
        soft_stop_timeout=None,
        middleware=[handler],
        release=release,
    )
    assert runs == [row.id]
    # max_attempts 1: the failure stands, not the handler's set_cancelled.
    assert (row.state, row.attempt) == (JobState.DISCARDED, 1)
    assert row.errors[-1].error == "ValueError: the body failed"


@pytest.mark.parametrize("when", ["body_running", "body_just_returned"])
@pytest.mark.parametrize("middleware", ["calls_again", "awaits_after"])
async def test_hard_stop_does_not_wait_for_work_middleware(
    any_db: Db,  # noqa: F811
    hold: Holds,
    middleware: str,
    when: str,
) -> None:
    """Work middleware around a sync body still runs when the hard stop comes, with
    ``soft_stop_timeout=None``: ``calls_again`` retries the body once after a failure
    (the second run long), ``awaits_after`` does async work once the body returned (an
    export that does not answer). The stop ends at once and the job is handed back
    (``available``, attempt 0), as any job whose code still runs: ``body_running``, the
    stop comes while the body runs (the retry's, or the body before the await);
    ``body_just_returned``, once the body returned on its thread (its result not yet
    back): the middleware gets the result, and what it does next is cut short, its
    retry never started."""
    loop = asyncio.get_running_loop()
    calls: list[int] = []
    running = asyncio.Event()  # a body call that does not return runs
    in_middleware = asyncio.Event()  # the middleware awaits after the body
    release = threading.Event()
    exported = asyncio.Event()  # the export the middleware awaits: never, unless let go

    async def calls_again(job: Job[Any], call_next: Callable[[], Awaitable[None]]) -> None:
        try:
            await call_next()
        except ValueError:
            await call_next()

    async def awaits_after(job: Job[Any], call_next: Callable[[], Awaitable[None]]) -> None:
        await call_next()
        in_middleware.set()
        await exported.wait()

    workers = Workers()

    @workers.register(
        "body", middleware=[calls_again if middleware == "calls_again" else awaits_after]
    )
    def work(job: Job[Any]) -> None:
        calls.append(job.id)
        if middleware == "awaits_after":
            return
        if len(calls) == 1:
            raise ValueError("the first try failed")
        loop.call_soon_threadsafe(running.set)  # the retry: a long one
        release.wait(30)

    if when == "body_running":
        hold.calls = set()
        ready = running if middleware == "calls_again" else in_middleware
    else:
        ready = hold.held  # the first body call, held once it returned

    def let_go() -> None:
        release.set()
        exported.set()
        hold.release.set()

    row, client = await _stop_while(any_db, workers, ready, soft_stop_timeout=None, release=let_go)
    assert (row.state, row.attempt, row.errors) == (JobState.AVAILABLE, 0, [])
    if middleware == "calls_again":
        # The retry runs (and is left to its thread) only if the stop came after it began.
        assert len(calls) == (2 if when == "body_running" else 1)
        assert client.runtime.abandoned_threads == (1 if when == "body_running" else 0)
    else:
        assert len(calls) == 1
        assert client.runtime.abandoned_threads == 0
