"""Resumable steps (River 0.37): finished steps are skipped on later attempts, cursors
resume a step part-way, duplicate names are refused; on Postgres and SQLite."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest

import riverboat
from riverboat import Job, JobRow, JobState, QueueConfig, Workers
from riverboat.resumable import CURSOR_KEY, STEP_KEY
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


# What Go River 0.51 leaves in a job's metadata, written here byte for byte as Go writes
# it, for riverboat to resume. ResumableSetStepCursorTx(ctx, tx, job, 2) inside
# ResumableStepCursor "process" merges {"river:resumable_step":"process",
# "river:resumable_cursor":{"process":2}}: the running step's name, with its cursor.
GO_STEP_CURSOR_TX = {STEP_KEY: "process", CURSOR_KEY: {"process": 2}}
# An attempt that set a cursor with ResumableSetCursor in the first step and failed
# before finishing any step: a cursor-only checkpoint, no resume point.
GO_CURSOR_ONLY = {CURSOR_KEY: {"process": 1}}


def _pipeline(workers: Workers, kind: str, ran: list[str], *, with_process: bool = True) -> None:
    @workers.register(kind)
    def pipeline(job: Job[Any]) -> None:
        def process(cursor: int | None) -> None:
            for item in range(0 if cursor is None else cursor + 1, 5):
                ran.append(f"{kind}:item{item}")
                job.set_cursor(item)

        job.step("fetch", lambda: ran.append(f"{kind}:fetch"))
        if with_process:
            job.step_cursor("process", process)
        job.step("publish", lambda: ran.append(f"{kind}:publish"))


def test_a_step_checkpointed_by_go_runs_again_from_its_cursor(any_db: Db) -> None:  # noqa: F811
    db = any_db
    ran: list[str] = []
    workers = Workers()
    _pipeline(workers, "go_tx", ran)
    _pipeline(workers, "go_cursor", ran)
    with _client(db, workers) as client:
        tx = client.insert({}, riverboat.InsertOpts(metadata=GO_STEP_CURSOR_TX), kind="go_tx")
        only = client.insert({}, riverboat.InsertOpts(metadata=GO_CURSOR_ONLY), kind="go_cursor")
        client.run_until_idle()
        rows = [client.job_get(tx.job.id), client.job_get(only.job.id)]

    assert [row.state for row in rows] == [JobState.COMPLETED, JobState.COMPLETED]
    # The resume step had a cursor: steps before it are skipped, it resumes after item 2.
    assert [r for r in ran if r.startswith("go_tx:")] == [
        "go_tx:item3",
        "go_tx:item4",
        "go_tx:publish",
    ]
    # No resume point: every step runs, the cursor step from its cursor.
    assert [r for r in ran if r.startswith("go_cursor:")] == [
        "go_cursor:fetch",
        "go_cursor:item2",
        "go_cursor:item3",
        "go_cursor:item4",
        "go_cursor:publish",
    ]


def test_a_cursor_checkpoint_the_worker_never_reaches_fails_and_is_kept(
    any_db: Db,  # noqa: F811
) -> None:
    db = any_db
    ran: list[str] = []
    workers = Workers()
    _pipeline(workers, "no_process", ran, with_process=False)

    @workers.register("plain_process")
    def plain_process(job: Job[Any]) -> None:
        job.step("process", lambda: ran.append("plain"))

    once = riverboat.InsertOpts(max_attempts=1, metadata=GO_CURSOR_ONLY)
    with _client(db, workers) as client:
        missing = client.insert({}, once, kind="no_process").job.id
        plain = client.insert({}, once, kind="plain_process").job.id
        client.run_until_idle()
        rows = {job_id: client.job_get(job_id) for job_id in (missing, plain)}

    assert rows[missing].state is JobState.DISCARDED
    assert "resumable cursor step 'process' not found" in rows[missing].errors[-1].error
    assert rows[plain].state is JobState.DISCARDED
    assert "'process' requires a cursor step" in rows[plain].errors[-1].error
    assert "plain" not in ran
    # The checkpoint stays for a worker that has the step; no resume point was added
    # past it, though "fetch" and "publish" finished.
    for row in rows.values():
        assert row.metadata[CURSOR_KEY] == {"process": 1}
        assert STEP_KEY not in row.metadata


def test_nested_steps_fail_the_attempt(any_db: Db) -> None:  # noqa: F811
    db = any_db
    workers = Workers()
    ran: list[str] = []

    @workers.register("nested")
    def nested(job: Job[Any]) -> None:
        def outer() -> None:
            try:
                job.step("inner", lambda: ran.append("inner"))
            except Exception:
                pass  # swallowed: River still fails the attempt

        job.step("outer", outer)
        job.step("after", lambda: ran.append("after"))

    with _client(db, workers) as client:
        job_id = client.insert({}, riverboat.InsertOpts(max_attempts=1), kind="nested").job.id
        client.run_until_idle()
        row = client.job_get(job_id)

    assert ran == []
    assert row.state is JobState.DISCARDED
    assert "resumable steps cannot be nested" in row.errors[-1].error
    assert STEP_KEY not in row.metadata  # the outer step did not finish


def test_a_checkpoint_in_the_callers_transaction_is_what_go_writes(any_db: Db) -> None:  # noqa: F811
    """resumable_set_step_cursor_tx writes Go's metadata at once; a crash afterwards
    resumes the step from that cursor, and a rolled-back checkpoint is not saved."""
    db = any_db
    ran: list[str] = []
    seen: list[dict[str, Any]] = []
    client_box: list[riverboat.Client] = []
    workers = Workers()

    @workers.register("checkpointed")
    def checkpointed(job: Job[Any]) -> None:
        def process(cursor: int | None) -> None:
            for item in range(0 if cursor is None else cursor + 1, 5):
                ran.append(f"item{item}@{job.attempt}")
                with db.connect() as conn:
                    row = client_box[0].resumable_set_step_cursor_tx(conn, job, item)
                    seen.append({k: v for k, v in row.metadata.items() if k.startswith("river:")})
                    if item == 3:
                        conn.rollback()  # this checkpoint never commits
                    else:
                        conn.commit()
                if job.attempt == 1 and item == 3:
                    raise RuntimeError("crashed after item 3")

        job.step("fetch", lambda: ran.append(f"fetch@{job.attempt}"))
        job.step_cursor("process", process)

    with _client(db, workers) as client:
        client_box.append(client)
        job_id = client.insert({}, kind="checkpointed").job.id
        client.run_until_idle()
        row = client.job_get(job_id)

    assert row.state is JobState.COMPLETED and row.attempt == 2
    assert seen[0] == {STEP_KEY: "process", CURSOR_KEY: {"process": 0}}
    assert seen[2] == {STEP_KEY: "process", CURSOR_KEY: {"process": 2}}
    # Attempt 2 resumes after item 2, the last committed checkpoint: the rolled-back one
    # for item 3 is not staged again with the failure.
    assert ran == [
        "fetch@1",
        "item0@1",
        "item1@1",
        "item2@1",
        "item3@1",
        "item3@2",
        "item4@2",
    ]


def test_checkpoints_outside_a_step_are_refused(any_db: Db) -> None:  # noqa: F811
    db = any_db
    client_box: list[riverboat.Client] = []
    workers = Workers()

    @workers.register("outside")
    def outside(job: Job[Any]) -> None:
        with db.connect() as conn:
            client_box[0].resumable_set_step_tx(conn, job)

    with _client(db, workers) as client:
        client_box.append(client)
        job_id = client.insert({}, riverboat.InsertOpts(max_attempts=1), kind="outside").job.id
        client.run_until_idle()
        row = client.job_get(job_id)
    assert row.state is JobState.DISCARDED
    assert "can only be written inside job.step" in row.errors[-1].error
