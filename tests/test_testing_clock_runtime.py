"""``use_test_config(clock=)`` reaches what the SQL computes with the database's
``now()`` (River passes its stubbed time to its queries): ``created_at``, claims and
the scheduler; sync and async, on Postgres and SQLite."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import riverboat
from riverboat import (
    Event,
    EventKind,
    InsertManyParams,
    InsertOpts,
    Job,
    JobState,
    MaintenanceConfig,
    QueueConfig,
    Workers,
)
from riverboat.testing import TestClock, use_test_config, work_job
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.test_insert_middleware import SyncBatches

# Far from the database's clock either way, so only the test clock can explain a result.
FUTURE = datetime.now(UTC).replace(microsecond=0) + timedelta(days=10)
PAST = datetime(2021, 3, 4, 5, 6, 7, tzinfo=UTC)


def test_created_at_follows_the_clock_on_every_insert_form(any_db: Db) -> None:  # noqa: F811
    clock = TestClock(PAST)
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        use_test_config(client, clock=clock)
        one = client.insert({}, kind="stamp").job
        assert (one.created_at, one.scheduled_at) == (PAST, PAST)
        clock.advance(60)
        many = client.insert_many([InsertManyParams({"n": i}, kind="stamp") for i in range(2)])
        assert {r.job.created_at for r in many} == {PAST + timedelta(minutes=1)}
        clock.advance(60)
        # insert_many_fast takes the statement rather than COPY while a clock is set.
        assert client.insert_many_fast([InsertManyParams({}, kind="fast")]) == 1
        with any_db.connect() as conn:
            in_tx = client.insert_tx(conn, {}, kind="stamp_tx").job
            conn.commit()
        assert in_tx.created_at == PAST + timedelta(minutes=2)
        fast = client.job_list(kinds=["fast"]).jobs[0]
        assert (fast.created_at, fast.scheduled_at) == (PAST + timedelta(minutes=2),) * 2

        use_test_config(client)  # back to the database's clock
        real = client.insert({}, kind="stamp").job
        assert abs(real.created_at - datetime.now(UTC)) < timedelta(minutes=5)


def job_id(event: Event) -> int:
    assert event.job is not None
    return event.job.id


def _workers(done: list[int]) -> Workers:
    workers = Workers()

    @workers.register("tick")
    async def tick(job: Job[Any]) -> None:
        done.append(job.args["n"])

    return workers


def _runtime_options() -> dict[str, Any]:
    return {
        "queues": {"default": QueueConfig(max_workers=10)},
        "fetch_cooldown": 0.01,
        "fetch_poll_interval": 0.05,
        "maintenance": MaintenanceConfig(scheduler_interval=0.05, start_jitter=0.0),
    }


async def test_claims_and_scheduler_follow_the_clock(any_db: Db) -> None:  # noqa: F811
    done: list[int] = []
    clock = TestClock(FUTURE)
    client = riverboat.AsyncClient(
        any_db.url, schema=any_db.schema, workers=_workers(done), **_runtime_options()
    )
    use_test_config(client, clock=clock)
    async with client:
        # Due now by the clock, ten days ahead of the database: only a claim that takes
        # the clock's time can run it.
        now_job = (await client.insert({"n": 1}, kind="tick")).job
        # Available, but an hour past the clock: the same fetch must leave it.
        clock.advance(timedelta(hours=1))
        later_job = (await client.insert({"n": 2}, kind="tick")).job
        clock.set(FUTURE)
        # Scheduled an hour past the clock: the scheduler must leave it.
        scheduled = (
            await client.insert(
                {"n": 3}, InsertOpts(scheduled_at=FUTURE + timedelta(hours=1)), kind="tick"
            )
        ).job
        assert (later_job.state, scheduled.state) == (JobState.AVAILABLE, JobState.SCHEDULED)

        events = client.subscribe(EventKind.JOB_COMPLETED)
        await client.start()
        first = await asyncio.wait_for(events.get(), 20)
        assert job_id(first) == now_job.id and done == [1]
        # That fetch saw all three rows and took only the one due by the clock.
        assert (await client.job_get(later_job.id)).attempt == 0
        assert (await client.job_get(scheduled.id)).state is JobState.SCHEDULED

        clock.advance(timedelta(hours=2))  # both due now: producers see it at their next poll
        rest = {job_id(await asyncio.wait_for(events.get(), 20)) for _ in range(2)}
        assert rest == {later_job.id, scheduled.id}
        assert sorted(done) == [1, 2, 3]
        await client.stop()


def test_sync_client_claims_by_the_clock(any_db: Db) -> None:  # noqa: F811
    done: list[int] = []
    clock = TestClock(FUTURE)
    with riverboat.Client(
        any_db.url, schema=any_db.schema, workers=_workers(done), **_runtime_options()
    ) as client:
        use_test_config(client, clock=clock)
        events = client.subscribe(EventKind.JOB_COMPLETED)
        job = client.insert({"n": 7}, kind="tick").job
        assert job.scheduled_at == FUTURE
        client.start()
        assert job_id(events.get(timeout=20)) == job.id
        # A new clock set while running reaches the embedded runtime's producers too: a
        # day past the first one, only it can make this job due.
        use_test_config(client, clock=TestClock(FUTURE + timedelta(days=1)))
        second = client.insert({"n": 8}, kind="tick").job
        assert second.scheduled_at == FUTURE + timedelta(days=1)
        assert job_id(events.get(timeout=20)) == second.id
        client.stop()
    assert done == [7, 8]


def test_work_job_inserts_with_the_clock_and_batch_middleware(any_db: Db) -> None:  # noqa: F811
    batches = SyncBatches([])
    workers = Workers()

    @workers.register("tick")
    def tick(job: Job[Any]) -> None:
        assert job.metadata["batch_size"] == 1

    with riverboat.Client(any_db.url, schema=any_db.schema, middleware=[batches]) as client:
        use_test_config(client, clock=TestClock(PAST))
        result = work_job(client, workers, {"n": 1}, kind="tick")
    assert result.outcome == "job_completed"
    assert (result.job.created_at, result.job.priority) == (PAST, 3)
    assert batches.batches == [(["tick"], [(result.job.id, False)])]
