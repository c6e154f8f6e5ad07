"""Error handlers (River's ``ErrorHandler``): every failed attempt, including unknown
kinds and args that fail to decode, reaches ``handle_error``; it may cancel the job for
good or let the retry go on. On Postgres and SQLite."""

from __future__ import annotations

import asyncio
import logging
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
