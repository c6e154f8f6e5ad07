"""A job that has finished hands its outcome to the completer; past the completer's
high-water mark (BACKPRESSURE_HIGH outcomes not yet written: the database is slow or
away) that hand-over waits for room, the job's slot held. Nothing may cut the wait
short and drop the outcome: the row would stay ``running`` and the rescuer would run
the job a second time, though it had completed once.

The job's timeout did: the producer's deadline watch cancelled the wait. Seen as "100
jobs ran twice: a completion was lost" in the reliability suite's terminate-backends
test, a whole claim batch of finished jobs waiting for room past job_timeout. A hard
stop did too: it cancelled the wait as if the job still ran, and its outcome was lost
instead of handed back or written."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from riverboat import InsertManyParams, Job, JobRow, QueueConfig, Workers
from riverboat.runtime import completer as completer_module
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.runtime.helpers import make_client

JOBS = 10
HIGH = 4  # outcomes buffered before the hand-over waits: the other JOBS - HIGH wait


async def _finish_past_the_mark(
    db: Db, monkeypatch: pytest.MonkeyPatch, *, job_timeout: float, hard_stop: bool
) -> tuple[dict[int, JobRow], Counter[int], int]:
    """Run JOBS quick jobs while the completer writes nothing, so that all but HIGH of
    them wait to hand over their outcomes; with a ``job_timeout``, past it. Then let the
    completer write (``hard_stop``: stop with the running jobs cancelled, else flush and
    stop). Returns the rows, the runs per job, and how many jobs held their slots while
    they waited."""
    # A small high-water mark stands for 10,000 outcomes the database has not taken yet.
    monkeypatch.setattr(completer_module, "BACKPRESSURE_HIGH", HIGH)
    monkeypatch.setattr(completer_module, "BACKPRESSURE_LOW", HIGH // 2)
    loop = asyncio.get_running_loop()
    ran: Counter[int] = Counter()
    all_ran = asyncio.Event()
    last_ran = 0.0
    workers = Workers()

    @workers.register("quick")
    async def quick(job: Job[Any]) -> None:
        nonlocal last_ran
        ran[job.id] += 1
        last_ran = loop.time()
        if len(ran) == JOBS:
            all_ran.set()

    client = make_client(
        db.url,
        workers,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=JOBS)},
        job_timeout=job_timeout,
    )
    # Nothing is written until the test lets the completer write: the backlog stays past
    # the mark, so every job after the first HIGH waits in the hand-over.
    client.runtime.config.completer_flush_delay = 120.0
    client.runtime.config.completer_batch_threshold = 1000
    ids = [r.job.id for r in await client.insert_many([InsertManyParams({}, kind="quick")] * JOBS)]
    await client.start()
    try:
        async with asyncio.timeout(10):
            await all_ran.wait()
        if not hard_stop:
            # The deadline is a point in time: the producer's watch (a loop timer due
            # job_timeout after each job started, so before this one) must have fired
            # on the waiting jobs before the completer may write.
            await asyncio.sleep(last_ran + 2 * job_timeout - loop.time())
        waiting = client.runtime.producers["default"].active
        if hard_stop:
            await client.stop_and_cancel()
        else:
            # Room at last: the waiting outcomes go in as the completer writes the others.
            completer = client.runtime.completer
            assert completer is not None
            completer.flush_now()
    finally:
        await client.stop()
    try:
        rows = {job_id: await client.job_get(job_id) for job_id in ids}
    finally:
        await client.close()
    return rows, ran, waiting


def _check(rows: dict[int, JobRow], ran: Counter[int], waiting: int) -> None:
    assert {job_id: row.state.value for job_id, row in rows.items()} == dict.fromkeys(
        rows, "completed"
    ), "every outcome was written, none dropped"
    assert all(not row.errors for row in rows.values()), "no job failed after it finished"
    assert ran == Counter(list(rows)), "each job ran once"
    # They held their slots until the hand-over: a freed slot would claim more jobs
    # into a completer that has no room for their outcomes.
    assert waiting == JOBS - HIGH


async def test_a_finished_job_waiting_for_room_outlives_its_timeout(
    any_db: Db,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _check(*await _finish_past_the_mark(any_db, monkeypatch, job_timeout=0.2, hard_stop=False))


async def test_a_hard_stop_writes_a_finished_job_waiting_for_room(
    any_db: Db,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _check(*await _finish_past_the_mark(any_db, monkeypatch, job_timeout=60, hard_stop=True))
