"""Error handlers (River's ``ErrorHandler``): every failed attempt, including unknown
kinds and args that fail to decode, reaches ``handle_error``; it may cancel the job for
good or let the retry go on. On Postgres and SQLite."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

import pytest

import riverboat
from riverboat import (
    ErrorHandlerResult,
    Job,
    JobCancel,
    JobRow,
    JobSnooze,
    JobState,
    QueueConfig,
    Workers,
)
from riverboat.runtime.producer import Producer
from tests.runtime.dbs import Db, any_db  # noqa: F401


@dataclass
class Strict:
    kind: ClassVar[str] = "strict"
    needed: int


class Reporter:
    """Reports everything; cancels ValueErrors and jobs whose kind has no worker. A sync
    handler runs on a worker thread, never on the runtime's loop (one posting to a
    reporting service, or writing with Django's ORM, held up or failed on it)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.on_loop: list[bool] = []

    def handle_error(self, job: JobRow, exc: BaseException) -> ErrorHandlerResult | None:
        self.seen.append((job.kind, type(exc).__name__))
        try:
            asyncio.get_running_loop()
            self.on_loop.append(True)
        except RuntimeError:
            self.on_loop.append(False)
        if isinstance(exc, (ValueError, riverboat.UnknownJobKindError)):
            return ErrorHandlerResult(set_cancelled=True)
        return None


class AsyncBroken:
    def __init__(self) -> None:
        self.calls = 0

    async def handle_error(self, job: JobRow, exc: BaseException) -> None:
        self.calls += 1
        raise RuntimeError("the reporting service is down")


class Exits:
    """A handler that calls sys.exit(): its failure, as any error it raises (re-raised,
    SystemExit ended the event loop, and the jobs it handled stayed running)."""

    def __init__(self) -> None:
        self.calls = 0

    def handle_error(self, job: JobRow, exc: BaseException) -> None:
        self.calls += 1
        raise SystemExit(2)


def later(job: Job[Any]) -> Any:
    return job.row.created_at + timedelta(hours=1)


class InAnHour(riverboat.RetryPolicy):
    """For the retries no worker decides (args that don't decode): out of the drain."""

    def next_retry(self, job: JobRow, now: datetime) -> datetime:
        return now + timedelta(hours=1)


def test_error_handler_sees_failures_and_can_cancel(
    any_db: Db,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = any_db
    workers = Workers()

    @workers.register("bad_value", next_retry=later)
    def bad_value(job: Job[Any]) -> None:
        raise ValueError("never going to work")

    @workers.register("flaky", next_retry=later)
    async def flaky(job: Job[Any]) -> None:
        raise ConnectionError("try again later")

    @workers.register("snoozes")
    def snoozes(job: Job[Any]) -> None:
        if job.attempt == 1 and not job.metadata.get("snoozes"):
            raise JobSnooze(0)
        raise JobCancel("given up")

    @workers.register(Strict, next_retry=later)
    def strict(job: Job[Strict]) -> None:
        raise AssertionError("not reached: args don't decode")

    reporter, broken, exits = Reporter(), AsyncBroken(), Exits()
    client = riverboat.Client(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=4)},
        workers=workers,
        middleware=[reporter, broken, exits],
        skip_unknown_job_check=True,
        retry_policy=InAnHour(),
        fetch_poll_interval=0.1,
    )
    caplog.set_level(logging.ERROR, "riverboat")
    with client:
        ids = {
            kind: client.insert({}, kind=kind).job.id
            for kind in ("bad_value", "flaky", "snoozes", "strict", "no_such_kind")
        }
        client.run_until_idle()
        rows = {kind: client.job_get(job_id) for kind, job_id in ids.items()}

    assert sorted(reporter.seen) == [
        ("bad_value", "ValueError"),
        ("flaky", "ConnectionError"),
        ("no_such_kind", "UnknownJobKindError"),
        ("strict", "TypeError"),
    ]
    assert reporter.on_loop == [False] * 4
    assert broken.calls == 4 and exits.calls == 4
    assert "error handler" in caplog.text and "the reporting service is down" in caplog.text
    cancelled = rows["bad_value"]
    assert cancelled.state is JobState.CANCELLED and cancelled.finalized_at is not None
    assert cancelled.errors[-1].error == "ValueError: never going to work"
    assert rows["no_such_kind"].state is JobState.CANCELLED
    assert rows["flaky"].state is JobState.RETRYABLE
    assert rows["strict"].state is JobState.RETRYABLE
    assert rows["snoozes"].state is JobState.CANCELLED  # by the worker's JobCancel


def test_handle_error_must_be_callable() -> None:
    class NotCallable:
        handle_error = 3

    with pytest.raises(riverboat.InvalidInputError, match="handle_error is not callable"):
        riverboat.Client("sqlite:///:memory:", middleware=[NotCallable()])


class Hangs:
    """An error handler that waits until told (a reporting service that does not
    answer), then cancels the job: the job's body is over, its error decided, while it
    runs. ``plain``: a plain def, which runs on a worker thread."""

    def __init__(self, *, plain: bool = False) -> None:
        self.loop = asyncio.get_running_loop()
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.thread_release = threading.Event()
        self.returned = 0
        if plain:
            self.handle_error = self._plain  # type: ignore[method-assign, assignment]

    async def handle_error(self, job: JobRow, exc: BaseException) -> ErrorHandlerResult:
        self.started.set()
        await self.release.wait()
        self.returned += 1
        return ErrorHandlerResult(set_cancelled=True)

    def _plain(self, job: JobRow, exc: BaseException) -> ErrorHandlerResult:
        self.loop.call_soon_threadsafe(self.started.set)
        self.thread_release.wait(30)
        self.returned += 1
        return ErrorHandlerResult(set_cancelled=True)

    def let_go(self) -> None:
        self.release.set()
        self.thread_release.set()


async def test_error_handlers_outlive_the_job_timeout(
    any_db: Db,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As River's ``HandleError``, called outside the job's timeout context, the error
    handlers are not cut short by the job's timeout: their verdict stands. Before, the
    producer's deadline watch cancelled the job's task while they ran, the
    CancelledError left execute_job without an outcome, the row stayed ``running`` and
    the rescuer ran the job again."""
    db = any_db
    workers = Workers()
    runs: list[int] = []

    @workers.register("fails")
    async def fails(job: Job[Any]) -> None:
        runs.append(job.id)
        raise ValueError("the body failed")

    deadline_checked = asyncio.Event()
    check_deadlines = Producer._check_deadlines

    def noting_check(self: Producer) -> None:
        check_deadlines(self)
        deadline_checked.set()

    monkeypatch.setattr(Producer, "_check_deadlines", noting_check)
    handler = Hangs()
    client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        middleware=[handler],
        job_timeout=0.2,
        fetch_poll_interval=0.1,
    )
    sub = client.subscribe(riverboat.EventKind.JOB_CANCELLED)
    caplog.set_level(logging.WARNING, "riverboat")
    job_id = (
        await client.insert({}, kind="fails", opts=riverboat.InsertOpts(max_attempts=2))
    ).job.id
    await client.start()
    try:
        async with asyncio.timeout(10):
            await handler.started.wait()
            # The producer's deadline watch ran at the job's deadline, the handler still
            # waiting; only then does the handler answer.
            await deadline_checked.wait()
            handler.let_go()
            event = await sub.get()
        assert event.job is not None and event.job.id == job_id
        row = await client.job_get(job_id)
    finally:
        handler.let_go()
        await client.close()
    assert runs == [job_id] and handler.returned == 1
    assert (row.state, row.attempt) == (JobState.CANCELLED, 1)  # the handler's verdict
    assert row.errors[-1].error == "ValueError: the body failed"
    assert "cut short" not in caplog.text


@pytest.mark.parametrize(
    ("cut", "body", "handler_kind"),
    [
        ("remote_cancel", "async", "async"),
        ("remote_cancel", "async", "plain"),
        ("hard_stop", "async", "async"),
        ("hard_stop", "async", "plain"),
        ("hard_stop", "sync", "async"),
        ("hard_stop", "sync", "plain"),
    ],
)
async def test_error_handlers_cut_short_keep_the_outcome(
    any_db: Db,  # noqa: F811
    cut: str,
    body: str,
    handler_kind: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A remote cancel or a hard stop (``soft_stop_timeout=None``: nothing else bounds
    the stop) while the error handlers run cuts them short, and the attempt's outcome
    is still written, without their verdict. The stop does not wait for a handler that
    does not answer (a plain one keeps its thread). Before, the CancelledError ended the
    job's task without an outcome: the row stayed ``running``, nothing was logged, and
    the rescuer ran the job again, though it had failed (or been cancelled) once."""
    db = any_db
    workers = Workers()
    runs: list[int] = []

    if body == "async":

        @workers.register("fails")
        async def fails(job: Job[Any]) -> None:
            runs.append(job.id)
            raise ValueError("the body failed")

    else:

        @workers.register("fails")
        def fails_in_a_thread(job: Job[Any]) -> None:
            runs.append(job.id)
            raise ValueError("the body failed")

    handler = Hangs(plain=handler_kind == "plain")
    client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        middleware=[handler],
        soft_stop_timeout=None,
        fetch_poll_interval=0.1,
    )
    other = riverboat.AsyncClient(db.url, schema=db.schema)
    sub = client.subscribe(riverboat.EventKind.JOB_FAILED, riverboat.EventKind.JOB_CANCELLED)
    caplog.set_level(logging.WARNING, "riverboat")
    opts = riverboat.InsertOpts(max_attempts=1)
    job_id = (await client.insert({}, kind="fails", opts=opts)).job.id
    await client.start()
    try:
        async with asyncio.timeout(10):
            await handler.started.wait()
            if cut == "remote_cancel":
                await other.job_cancel(job_id)
                event = await sub.get()
                assert event.job is not None and event.job.id == job_id
            else:
                await client.stop_and_cancel()
        row = await other.job_get(job_id)
        answered = handler.returned
    finally:
        handler.let_go()
        await client.close()
        await other.close()
    assert runs == [job_id]
    assert answered == 0, "the handler had not answered: its verdict is not in"
    assert row.attempt == 1
    if cut == "remote_cancel":
        # As a remote cancel a moment earlier, while the body ran: cancelled.
        assert row.state is JobState.CANCELLED
        assert row.errors[-1].error == "JobCancelledRemotely: job cancelled remotely"
        assert "its error handlers were cut short (the job was cancelled remotely)" in caplog.text
    else:
        assert row.state is JobState.DISCARDED  # max_attempts 1: the failure stands
        assert row.errors[-1].error == "ValueError: the body failed"
        assert "its error handlers were cut short (the client is stopping)" in caplog.text


async def test_a_hard_stop_skips_handlers_for_an_error_its_cancel_became(
    any_db: Db,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An async job turns the hard stop's cancel into an error of its own (as some HTTP
    clients do: "request aborted"), and its error handler never answers. The cancel is
    spent, so nothing would cut handlers started now: they are skipped, and the stop
    (soft_stop_timeout=None) ends; the error is the attempt's failure. (Before, the stop
    waited for the handler, and a second stop_and_cancel() did too. Found in review.)"""
    running = asyncio.Event()
    handler_called = asyncio.Event()
    workers = Workers()

    @workers.register("wraps_cancel")
    async def wraps(job: Job[Any]) -> None:
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("request aborted") from None

    class Hangs:
        async def handle_error(self, job: JobRow, exc: BaseException) -> ErrorHandlerResult:
            handler_called.set()
            await asyncio.Event().wait()
            return ErrorHandlerResult()

    client = riverboat.AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(max_workers=1)},
        workers=workers,
        middleware=[Hangs()],
        fetch_poll_interval=0.1,
        soft_stop_timeout=None,
        leader_election=False,
    )
    job = (await client.insert({}, kind="wraps_cancel")).job
    await client.start()
    try:
        async with asyncio.timeout(10):
            await running.wait()
        with caplog.at_level(logging.WARNING, "riverboat.executor"):
            async with asyncio.timeout(10):
                await client.stop_and_cancel()
        assert not handler_called.is_set()
        assert "its error handlers were cut short (the client is stopping)" in caplog.text
        # Its own error stands as the attempt's failure (retried), without a verdict.
        row = await client.job_get(job.id)
        assert row.state in (JobState.AVAILABLE, JobState.RETRYABLE)
        assert "request aborted" in row.errors[-1].error
    finally:
        await client.close()
