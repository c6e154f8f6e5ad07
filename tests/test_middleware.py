"""Insert hooks and work middleware: order, sync and async jobs, outcomes (SQLite)."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from riverboat import (
    AsyncClient,
    Client,
    InsertManyParams,
    InsertOpts,
    InvalidInputError,
    Job,
    JobCancel,
    QueueConfig,
    Workers,
)
from riverboat.middleware import InsertingJob, insert_hook, sync_work_middleware

pytestmark = pytest.mark.asyncio

CURRENT: contextvars.ContextVar[str] = contextvars.ContextVar("current", default="")


@dataclass
class Plain:
    kind: ClassVar[str] = "plain"
    n: int


@dataclass
class Tagged:
    kind: ClassVar[str] = "tagged"
    n: int
    insert_middleware: ClassVar[list[Any]] = [
        insert_hook(lambda job: job.metadata.setdefault("order", []).append("args-type"))
    ]


class Recorder:
    """Records every call in ``log``; ``name`` labels it."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    def insert_begin(self, job: InsertingJob) -> None:
        job.metadata.setdefault("order", []).append(self.name)

    async def work(self, job: Job[Any], call_next: Callable[[], Awaitable[None]]) -> None:
        self.log.append(f"{self.name}:before")
        token = CURRENT.set(self.name)
        try:
            await call_next()
        except Exception as exc:
            self.log.append(f"{self.name}:error:{type(exc).__name__}")
            raise
        finally:
            CURRENT.reset(token)
        self.log.append(f"{self.name}:after")


def _client(url: str, workers: Workers, middleware: list[Any]) -> AsyncClient:
    return AsyncClient(
        url,
        queues={"default": QueueConfig(max_workers=4)},
        workers=workers,
        middleware=middleware,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    )


async def test_insert_hooks_add_metadata_in_order(sqlite_url: str) -> None:
    log: list[str] = []
    async with AsyncClient(
        sqlite_url, middleware=[Recorder("a", log), Recorder("b", log)]
    ) as client:
        one = await client.insert(Plain(1), InsertOpts(metadata={"mine": True}))
        assert one.job.metadata == {"mine": True, "order": ["a", "b"]}
        many = await client.insert_many(
            [Tagged(2), InsertManyParams(Plain(3)), InsertManyParams({"x": 1}, kind="raw")]
        )
        assert [r.job.metadata for r in many] == [
            {"order": ["a", "b", "args-type"]},
            {"order": ["a", "b"]},
            {"order": ["a", "b"]},
        ]
    # No client middleware: the args type's own hooks still run; plain jobs stay "{}".
    with Client(sqlite_url) as sync_client:
        assert sync_client.insert(Tagged(4)).job.metadata == {"order": ["args-type"]}
        assert sync_client.insert(Plain(5)).job.metadata == {}


async def test_work_middleware_order_async_and_sync_jobs(sqlite_url: str) -> None:
    log: list[str] = []
    seen: dict[str, Any] = {}
    workers = Workers()

    @workers.register(Plain, middleware=[Recorder("worker", log)])
    async def plain(job: Job[Plain]) -> None:
        log.append("plain")
        seen["async"] = CURRENT.get()

    def thread_layer(job: Job[Any], call_next: Callable[[], Any]) -> Any:
        log.append(f"thread:{threading.current_thread().name.startswith('riverboat-')}")
        return call_next()

    @workers.register(Tagged, middleware=[sync_work_middleware(thread_layer)])
    def tagged(job: Job[Tagged]) -> None:
        log.append("tagged")
        seen["sync"] = CURRENT.get()  # set on the loop by the client's middleware

    client = _client(sqlite_url, workers, [Recorder("client", log)])
    await client.insert(Plain(1))
    await client.run_until_idle()
    assert log == ["client:before", "worker:before", "plain", "worker:after", "client:after"]
    assert seen["async"] == "worker"

    log.clear()
    await client.insert(Tagged(1))
    await client.run_until_idle()
    assert log == ["client:before", "thread:True", "tagged", "client:after"]
    assert seen["sync"] == "client"
    await client.close()


async def test_middleware_sees_errors_and_may_change_the_outcome(sqlite_url: str) -> None:
    log: list[str] = []
    workers = Workers()

    @workers.register(Plain)
    async def plain(job: Job[Plain]) -> None:
        raise ValueError("boom")

    async def cancel_on_value_error(
        job: Job[Any], call_next: Callable[[], Awaitable[None]]
    ) -> None:
        try:
            await call_next()
        except ValueError as exc:
            raise JobCancel(exc) from exc

    client = _client(sqlite_url, workers, [Recorder("outer", log), cancel_on_value_error])
    job = (await client.insert(Plain(1))).job
    await client.run_until_idle()
    stored = await client.job_get(job.id)
    assert stored.state == "cancelled"
    assert log == ["outer:before", "outer:error:JobCancel"]
    assert "boom" in stored.errors[0].error
    await client.close()


async def test_invalid_middleware_is_refused(sqlite_url: str) -> None:
    class SyncWork:
        def work(self, job: Any, call_next: Any) -> None: ...

    with pytest.raises(InvalidInputError, match="work must be async def"):
        AsyncClient(sqlite_url, middleware=[SyncWork()])
    with pytest.raises(InvalidInputError, match="is not a middleware"):
        AsyncClient(sqlite_url, middleware=[object()])
    with pytest.raises(InvalidInputError, match="middleware"):
        Workers().register("noop", middleware=[42])(lambda job: None)


async def test_no_middleware_takes_the_plain_path(sqlite_url: str) -> None:
    client = _client(sqlite_url, Workers(), [])
    await client.start()
    try:
        producer = client.runtime.producers["default"]
        assert producer._exec_config.middleware is None
    finally:
        await client.stop()
        await client.close()


async def test_failed_attempts_are_logged_once(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    workers = Workers()

    @workers.register(Plain)
    async def plain(job: Job[Plain]) -> None:
        raise ValueError(f"boom {job.args.n}")

    client = _client(sqlite_url, workers, [])
    retried = (await client.insert(Plain(1))).job
    discarded = (await client.insert(Plain(2), InsertOpts(max_attempts=1))).job
    with caplog.at_level("DEBUG", logger="riverboat"):
        await client.run_until_idle()
    await client.close()
    # The drain also works the retry due a second later (attempt 2): look at attempt 1.
    records = [
        r
        for r in caplog.records
        if r.name == "riverboat.executor" and " attempt 1/" in r.getMessage()
    ]
    by_job = {r.args[0]: r for r in records}  # type: ignore[index]
    assert len(records) == 2
    assert by_job[retried.id].levelname == "WARNING"
    assert by_job[discarded.id].levelname == "ERROR"
    message = by_job[discarded.id].getMessage()
    assert f"job {discarded.id} (plain) attempt 1/1 failed, discarded" in message
    # The traceback goes with the final failure; a retried attempt's goes to DEBUG only.
    assert by_job[discarded.id].exc_info is not None
    assert by_job[retried.id].exc_info is None
    traces = [
        r
        for r in caplog.records
        if r.levelname == "DEBUG"
        and r.getMessage() == f"job {retried.id} (plain) attempt 1 traceback"
    ]
    assert len(traces) == 1 and traces[0].exc_info is not None
    assert not [r for r in caplog.records if r.levelname == "INFO" and "job" in r.getMessage()]
