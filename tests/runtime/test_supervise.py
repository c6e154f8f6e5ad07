"""A runtime loop that meets an error it does not expect (a bug, or a library error no
driver translated) logs it and runs again; before, its task ended without a word and the
client stalled: a producer no longer claimed, a completer no longer wrote outcomes."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import riverboat
from riverboat import Job, JobState, QueueConfig, Workers
from tests.runtime.dbs import Db, any_db  # noqa: F401

pytestmark = pytest.mark.asyncio


def _client(db: Db) -> riverboat.AsyncClient:
    workers = Workers()

    @workers.register("noop")
    async def noop(job: Job[Any]) -> None:
        return None

    return riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.1,
    )


class _FailOnce:
    """A hook that raises the first time it is called."""

    def __init__(self) -> None:
        self.calls = 0

    def check(self) -> None:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a bug in the loop")


async def test_a_producer_runs_again_after_an_unexpected_error(
    any_db: Db,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = _client(any_db)
    caplog.set_level(logging.ERROR, "riverboat.runtime")
    fail = _FailOnce()

    def may_claim() -> bool:
        fail.check()
        return True

    await client.start()
    try:
        producer = client.runtime.producers["default"]
        # Asked before every claim, inside the fetch loop.
        producer.may_claim = may_claim

        # An exporter's claim listener that fails is logged, and the claimed jobs run.
        def broken_listener(queue: str, count: int) -> None:
            raise ZeroDivisionError("an exporter's bug")

        producer.claim_listeners.append(broken_listener)
        first = (await client.insert({}, kind="noop")).job
        assert (await client.job_wait(first.id, timeout=30)).state is JobState.COMPLETED
        second = (await client.insert({}, kind="noop")).job
        assert (await client.job_wait(second.id, timeout=30)).state is JobState.COMPLETED
    finally:
        await client.stop()
        await client.close()
    assert fail.calls >= 2
    messages = [r.getMessage() for r in caplog.records if r.exc_info]
    assert any("producer default: unexpected error" in m for m in messages)
    assert any("producer default: claim listener" in m for m in messages)


async def test_a_completer_keeps_the_outcomes_it_could_not_write(
    any_db: Db,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = _client(any_db)
    caplog.set_level(logging.ERROR, "riverboat.runtime")
    fail = _FailOnce()

    async def may_write() -> bool:
        fail.check()
        return True

    await client.start()
    try:
        completer = client.runtime.completer
        assert completer is not None
        completer.may_write = may_write  # asked before each write
        job = (await client.insert({}, kind="noop")).job
        done = await client.job_wait(job.id, timeout=30)
        assert done.state is JobState.COMPLETED and done.attempt == 1
    finally:
        await client.stop()
        await client.close()
    assert fail.calls >= 2
    assert any("completer: unexpected error" in r.getMessage() for r in caplog.records)
