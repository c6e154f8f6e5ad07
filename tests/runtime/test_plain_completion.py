"""Plain completions (success, nothing else to write) take the dialect's cheaper
statement, and their events still carry the stored row: counts of statements, rows and
follow-up reads, checked against what the table holds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from riverboat import EventKind, InsertManyParams, InsertOpts, Job, JobState, Workers
from riverboat.drivers.asyncpg import AsyncpgDriver
from riverboat.drivers.psycopg import AsyncPsycopgDriver
from tests.runtime.helpers import make_client, work_outcomes
from tests.waiting import wait_until_async

pytestmark = pytest.mark.asyncio

DRIVERS: dict[str, Any] = {"psycopg": AsyncPsycopgDriver, "asyncpg": AsyncpgDriver}


@pytest.fixture(params=sorted(DRIVERS))
async def driver(request: pytest.FixtureRequest, pg_url: str, pg_schema: str) -> Any:
    made = DRIVERS[request.param](pg_url, schema=pg_schema)
    yield made
    await made.close()


async def test_plain_completions_patch_the_claimed_rows(driver: Any) -> None:
    workers = Workers()

    @workers.register("noop")
    async def noop(job: Job[Any]) -> None:
        return None

    client = make_client(driver, workers)
    inserted = await client.insert_many(
        [
            InsertManyParams(
                {"n": n}, kind="noop", opts=InsertOpts(metadata={"m": n}, tags=["tag"])
            )
            for n in range(20)
        ]
    )
    events = await work_outcomes(client, 20)
    assert {e.job.id for e in events if e.job} == {r.job.id for r in inserted}
    for event in events:
        assert event.kind is EventKind.JOB_COMPLETED and event.job is not None
        assert event.job.state is JobState.COMPLETED
        assert event.job.finalized_at is not None
        assert event.job == await client.job_get(event.job.id)
    stats = driver.stats.by_query
    assert stats.get("job_complete_many", 0) >= 1
    assert "job_set_state_if_running_many" not in stats
    assert "job_get_by_id_many" not in stats  # no follow-up reads


async def test_a_mixed_batch_writes_both_kinds_once(driver: Any) -> None:
    workers = Workers()

    @workers.register("maybe")
    async def maybe(job: Job[Any]) -> None:
        if job.args["fail"]:
            raise ValueError("no")

    client = make_client(driver, workers)
    inserted = await client.insert_many(
        [
            InsertManyParams({"fail": n % 2 == 1}, kind="maybe", opts=InsertOpts(max_attempts=1))
            for n in range(10)
        ]
    )
    events = await work_outcomes(client, 10)
    by_id = {e.job.id: e for e in events if e.job}
    assert len(by_id) == 10
    for result in inserted:
        event = by_id[result.job.id]
        stored = await client.job_get(result.job.id)
        assert event.job == stored
        if result.job.args["fail"]:
            assert event.kind is EventKind.JOB_FAILED
            assert stored.state is JobState.DISCARDED
            assert [e.error for e in stored.errors] == ["ValueError: no"]
        else:
            assert event.kind is EventKind.JOB_COMPLETED
            assert stored.state is JobState.COMPLETED
            assert stored.errors == []


async def test_a_job_claimed_again_meanwhile_keeps_the_later_attempt(
    driver: Any, pg_url: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An outcome is written only at the attempt that produced it: a job rescued and
    claimed again meanwhile (attempt 2, running elsewhere) is left to that attempt, its
    row read once to tell it from a row that was only locked, and a WARNING says so."""
    import psycopg

    running = asyncio.Event()
    release = asyncio.Event()
    workers = Workers()

    @workers.register("slow")
    async def slow(job: Job[Any]) -> None:
        running.set()
        await release.wait()

    client = make_client(driver, workers)
    inserted = await client.insert({}, kind="slow")
    sub = client.subscribe(EventKind.JOB_COMPLETED)
    await client.start()
    try:
        await asyncio.wait_for(running.wait(), 10)
        # What a rescue and another client's claim would leave: still running, the
        # attempt moved on.
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            await conn.execute(
                f'UPDATE "{pg_schema}".river_job SET attempt = attempt + 1 WHERE id = %s',
                (inserted.job.id,),
            )
        release.set()
        await wait_until_async(
            lambda: driver.stats.by_query.get("job_get_by_id_many") == 1,
            what="the completer's read after its write changed nothing",
        )
    finally:
        await client.stop()
    stored = await client.job_get(inserted.job.id)
    assert (stored.state, stored.attempt, stored.finalized_at) == (JobState.RUNNING, 2, None)
    with pytest.raises(asyncio.QueueEmpty):  # no completion to report: nothing completed
        sub.get_nowait()
    assert f"job {inserted.job.id}'s attempt 1 outcome (completed) not written" in caplog.text


async def test_event_statistics_measure_the_wait_from_scheduled_at(
    driver: Any, pg_url: str, pg_schema: str
) -> None:
    """queue_wait is worked out when the event is made (not for every job): from the
    row's scheduled_at to the job's start, whatever the outcome."""
    import psycopg

    workers = Workers()

    @workers.register("noop")
    async def noop(job: Job[Any]) -> None:
        return None

    @workers.register("fails")
    async def fails(job: Job[Any]) -> None:
        raise RuntimeError("no")

    client = make_client(driver, workers)
    inserted = await client.insert_many(
        [InsertManyParams({}, kind="noop"), InsertManyParams({}, kind="fails")]
    )
    ids = [r.job.id for r in inserted]
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await conn.execute(
            f"UPDATE \"{pg_schema}\".river_job SET scheduled_at = now() - interval '90 seconds'"
            " WHERE id = ANY(%s)",
            [ids],
        )
    events = await work_outcomes(client, 2)
    assert {e.kind for e in events} == {EventKind.JOB_COMPLETED, EventKind.JOB_FAILED}
    for event in events:
        assert event.stats is not None
        assert 90 <= event.stats.queue_wait < 150, event
        assert 0 <= event.stats.run_duration < 60
        assert event.stats.complete_duration >= 0
