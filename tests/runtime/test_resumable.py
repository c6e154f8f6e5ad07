"""Resumable steps (River 0.37): finished steps are skipped on later attempts, cursors
resume a step part-way, duplicate names are refused; on Postgres and SQLite."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest

import riverboat
from riverboat import Job, JobState, Workers
from riverboat._job import JobRow
from riverboat.resumable import CURSOR_KEY, STEP_KEY
from riverboat.runtime.producer import QueueConfig
from tests.runtime.dbs import Db, any_db  # noqa: F401


class Soon(riverboat.RetryPolicy):
    def next_retry(self, job: JobRow, now: datetime) -> datetime:
        return now + timedelta(milliseconds=50)


def _client(db: Db, workers: Workers) -> riverboat.Client:
    return riverboat.Client(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=4)},
        workers=workers,
        retry_policy=Soon(),
        fetch_poll_interval=0.1,
    )


def test_steps_and_cursors_resume_where_the_last_attempt_stopped(any_db: Db) -> None:  # noqa: F811
    db = any_db
    ran: list[tuple[int, str]] = []
    workers = Workers()
    stored: list[dict[str, Any]] = []

    @workers.register("pipeline")
    def pipeline(job: Job[Any]) -> None:
        stored.append({k: v for k, v in job.metadata.items() if k.startswith("river:res")})

        def fetch() -> str:
            ran.append((job.attempt, "fetch"))
            return "data"

        def process(cursor: int | None) -> None:
            for item in range(0 if cursor is None else cursor + 1, 6):
                if job.attempt == 1 and item == 3:
                    raise RuntimeError("crashed on item 3")
                ran.append((job.attempt, f"item{item}"))
                job.set_cursor(item)

        def publish() -> None:
            ran.append((job.attempt, "publish"))

        assert job.step("fetch", fetch) == ("data" if job.attempt == 1 else None)
        job.step_cursor("process", process)
        job.step("publish", publish)

    with _client(db, workers) as client:
        job_id = client.insert({}, kind="pipeline").job.id
        client.run_until_idle()
        row = client.job_get(job_id)

    assert row.state is JobState.COMPLETED and row.attempt == 2
    assert ran == [
        (1, "fetch"),
        (1, "item0"),
        (1, "item1"),
        (1, "item2"),
        (2, "item3"),
        (2, "item4"),
        (2, "item5"),
        (2, "publish"),
    ]
    # What the second attempt read: River's keys and values.
    assert stored[1] == {STEP_KEY: "fetch", CURSOR_KEY: {"process": 2}}
    assert row.metadata[STEP_KEY] == "fetch"  # success writes nothing more, as in River


def test_async_steps_duplicates_and_a_vanished_step(any_db: Db) -> None:  # noqa: F811
    db = any_db
    workers = Workers()
    ran: list[str] = []

    @workers.register("async_steps")
    async def async_steps(job: Job[Any]) -> None:
        async def one() -> int:
            ran.append(f"one@{job.attempt}")
            return 1

        async def two() -> None:
            ran.append(f"two@{job.attempt}")
            if job.attempt == 1:
                raise RuntimeError("two failed")

        await job.step("one", one)
        await job.step("two", two)

    @workers.register("duplicate")
    def duplicate(job: Job[Any]) -> None:
        job.step("same", lambda: None)
        job.step("same", lambda: None)

    @workers.register("renamed")
    def renamed(job: Job[Any]) -> None:
        job.step("new_name", lambda: None)

    with _client(db, workers) as client:
        ok = client.insert({}, kind="async_steps").job.id
        dup = client.insert({}, kind="duplicate", opts=riverboat.InsertOpts(max_attempts=1)).job.id
        gone = client.insert(
            {},
            riverboat.InsertOpts(max_attempts=1, metadata={STEP_KEY: "old_name"}),
            kind="renamed",
        ).job.id
        client.run_until_idle()
        rows = {job_id: client.job_get(job_id) for job_id in (ok, dup, gone)}

    assert ran == ["one@1", "two@1", "two@2"]
    assert rows[ok].state is JobState.COMPLETED
    assert rows[dup].state is JobState.DISCARDED
    assert "duplicate resumable step name 'same'" in rows[dup].errors[-1].error
    assert rows[gone].state is JobState.DISCARDED
    assert "resumable step 'old_name' not found" in rows[gone].errors[-1].error


@pytest.mark.asyncio
async def test_a_hard_stop_keeps_the_finished_steps(any_db: Db) -> None:  # noqa: F811
    """A deploy: the client stops hard in the middle of step two; the job goes back to
    available with step one recorded, and the next client skips it."""
    db = any_db
    in_two = asyncio.Event()
    ran: list[str] = []
    workers = Workers()

    @workers.register("deploy")
    async def deploy(job: Job[Any]) -> None:
        async def one() -> None:
            ran.append("one")

        async def two() -> None:
            ran.append("two")
            if len(ran) == 2:
                in_two.set()
                await asyncio.sleep(3600)  # interrupted by the stop

        await job.step("one", one)
        await job.step("two", two)

    def client() -> riverboat.AsyncClient:
        return riverboat.AsyncClient(
            db.url,
            schema=db.schema,
            queues={"default": QueueConfig(max_workers=2)},
            workers=workers,
            fetch_poll_interval=0.1,
        )

    first = client()
    await first.start()
    job_id = (await first.insert({}, kind="deploy")).job.id
    await asyncio.wait_for(in_two.wait(), 10)
    await first.stop_and_cancel()
    interrupted = await first.job_get(job_id)
    await first.close()
    assert interrupted.state is JobState.AVAILABLE
    assert interrupted.metadata[STEP_KEY] == "one"

    async with client() as second:
        await second.run_until_idle()
        assert (await second.job_get(job_id)).state is JobState.COMPLETED
    assert ran == ["one", "two", "two"]
