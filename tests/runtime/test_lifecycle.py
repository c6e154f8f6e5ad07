"""Soft stop, hard stop, the embedded sync runtime, and connection discipline."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import riverboat
from riverboat import EventKind, Job, JobState, QueueConfig, Workers
from tests.runtime.helpers import fetch_row, make_client, next_events


async def test_soft_stop_waits_for_running_jobs_and_writes_them(apg_driver: Any) -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    workers = Workers()

    @workers.register("slowish")
    async def slowish(job: Job[Any]) -> None:
        started.set()
        await release.wait()

    client = make_client(apg_driver, workers)
    inserted = (await client.insert({}, kind="slowish")).job
    await client.start()
    await asyncio.wait_for(started.wait(), 10)
    stopping = asyncio.ensure_future(client.stop())
    await asyncio.sleep(0)  # let stop() begin; the job is still running
    assert not stopping.done()
    release.set()
    await asyncio.wait_for(stopping, 10)
    job = await client.job_get(inserted.id)
    assert job.state == JobState.COMPLETED and job.attempt == 1


async def test_hard_stop_interrupts_async_jobs(apg_driver: Any) -> None:
    started = asyncio.Event()
    workers = Workers()

    @workers.register("forever")
    async def forever(job: Job[Any]) -> None:
        started.set()
        await asyncio.Event().wait()

    client = make_client(apg_driver, workers)
    inserted = (await client.insert({}, kind="forever")).job
    sub = client.subscribe(EventKind.JOB_INTERRUPTED)
    await client.start()
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.wait_for(client.stop_and_cancel(), 10)
    (event,) = await next_events(sub, 1)
    assert event.job is not None and event.job.id == inserted.id
    job = await client.job_get(inserted.id)
    # River #1290: interrupted jobs are available at once, attempt rolled back, no error.
    assert job.state == JobState.AVAILABLE
    assert job.attempt == 0
    assert job.errors == []
    assert job.finalized_at is None


async def test_a_stop_whose_caller_gave_up_still_finishes(apg_driver: Any) -> None:
    """``wait_for(client.stop(), ...)`` timing out cancels the caller, not the stop: a
    later hard stop hands the job back and the client ends whole. Cancelling the caller
    used to leave the completer, registry and notifier running and the row running for
    good, and the later stop returned at once without doing anything."""
    started = asyncio.Event()
    workers = Workers()

    @workers.register("long_job")
    async def long_job(job: Job[Any]) -> None:
        started.set()
        await asyncio.sleep(30)

    client = make_client(apg_driver, workers)
    inserted = (await client.insert({}, kind="long_job")).job
    await client.start()
    await asyncio.wait_for(started.wait(), 10)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(client.stop(), 0.2)
    await asyncio.wait_for(client.stop_and_cancel(), 10)
    await asyncio.wait_for(client.runtime.wait_stopped(), 1)
    job = await client.job_get(inserted.id)
    assert job.state == JobState.AVAILABLE and job.attempt == 0  # handed back
    assert client.runtime.completer is not None and client.runtime.completer.idle


async def test_a_job_that_stops_its_own_client(apg_driver: Any) -> None:
    """A job awaiting its client's stop is handed back by that stop at the soft stop
    timeout (the stop waits for it): the stop goes on to the end, and the client can be
    started again to work the job."""
    runs: list[int] = []
    workers = Workers()
    client: riverboat.AsyncClient

    @workers.register("stopper")
    async def stopper(job: Job[Any]) -> None:
        runs.append(job.attempt)
        if len(runs) == 1:
            await client.stop()

    client = make_client(apg_driver, workers, soft_stop_timeout=0.3)
    inserted = (await client.insert({}, kind="stopper")).job
    completed = client.subscribe(EventKind.JOB_COMPLETED)
    await client.start()
    await asyncio.wait_for(client.runtime.wait_stopped(), 10)
    job = await client.job_get(inserted.id)
    assert job.state == JobState.AVAILABLE and runs == [1]
    await client.start()
    (event,) = await next_events(completed, 1)
    assert event.job is not None and event.job.id == inserted.id and runs == [1, 1]
    await client.stop()


async def test_nothing_left_running_after_a_clean_stop(
    apg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    workers = Workers()

    @workers.register("quick")
    async def quick(job: Job[Any]) -> None:
        await asyncio.sleep(0)

    client = make_client(apg_driver, workers, queues={"default": QueueConfig(max_workers=50)})
    await client.insert_many(
        [riverboat.InsertManyParams({"i": i}, kind="quick") for i in range(300)]
    )
    sub = client.subscribe(EventKind.JOB_COMPLETED)
    await client.start()
    await next_events(sub, 100)
    await client.stop()
    row = fetch_row(pg_url, pg_schema, "SELECT count(*) FROM river_job WHERE state = 'running'")
    assert row == (0,)


def test_embedded_sync_client_works_jobs_on_a_background_thread(
    pg_url: str, pg_schema: str
) -> None:
    done = threading.Event()
    seen: list[int] = []
    workers = Workers()

    @workers.register("embedded")
    def embedded(job: Job[dict[str, int]]) -> None:
        seen.append(job.args["n"])
        if len(seen) == 3:
            done.set()

    client = riverboat.Client(
        pg_url,
        schema=pg_schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_poll_interval=5.0,
    )
    client.start()
    try:
        # Poll interval is 5 s: only the local wake-up after insert makes this quick.
        client.insert_many(
            [riverboat.InsertManyParams({"n": n}, kind="embedded") for n in range(3)]
        )
        assert done.wait(4)
    finally:
        client.stop()
        client.close()
    assert sorted(seen) == [0, 1, 2]


async def test_connections_are_leased_per_statement(apg_driver: Any) -> None:
    workers = Workers()

    @workers.register("noop")
    async def noop(job: Job[Any]) -> None:
        return None

    client = make_client(apg_driver, workers, queues={"default": QueueConfig(max_workers=100)})
    await client.insert_many([riverboat.InsertManyParams({}, kind="noop") for _ in range(500)])
    sub = client.subscribe(EventKind.JOB_COMPLETED)
    await client.start()
    await next_events(sub, 500)
    await client.stop()
    stats = apg_driver.stats
    assert stats.resets == 0
    assert stats.by_query.get("job_get_by_id", 0) == 0  # no follow-up reads of jobs
    # Claims of up to 100 and completions in batches: far fewer statements than jobs.
    # (No-op jobs: every outcome is a plain completion, job_complete_many's.)
    worked = stats.by_query["job_get_available"] + stats.by_query["job_complete_many"]
    assert "job_set_state_if_running_many" not in stats.by_query
    assert worked < 100
    # A statement holds a connection only while it runs: the LISTEN connection, plus the
    # producer's claim, the completer's write, the elector and a maintenance service or
    # two at once. Held per running job (100 of them), all 10 the pool allows would open.
    assert stats.connections_opened <= 6


@pytest.mark.parametrize("events", [True, False])
async def test_completer_works_with_and_without_subscribers(apg_driver: Any, events: bool) -> None:
    workers = Workers()
    finished = asyncio.Event()
    count = 0

    @workers.register("counted")
    async def counted(job: Job[Any]) -> None:
        nonlocal count
        count += 1
        if count == 20:
            finished.set()

    client = make_client(apg_driver, workers)
    sub = client.subscribe(EventKind.JOB_COMPLETED) if events else None
    ids = [
        r.job.id
        for r in await client.insert_many(
            [riverboat.InsertManyParams({}, kind="counted") for _ in range(20)]
        )
    ]
    await client.start()
    await asyncio.wait_for(finished.wait(), 10)
    await client.stop()
    for job_id in ids:
        assert (await client.job_get(job_id)).state == JobState.COMPLETED
    if sub is not None:
        assert len(await next_events(sub, 20)) == 20
    name = "job_complete_many" if events else "job_complete_many_no_return"
    assert apg_driver.stats.by_query.get(name, 0) >= 1


async def test_a_failed_start_hands_back_the_jobs_it_claimed(
    apg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    """A start that fails after its producers began (a hook, leadership's services) left
    the jobs they claimed running and its tasks pending; they ran again only when the
    rescuer found them, an attempt later. Now what began is stopped, the jobs handed back."""
    workers = Workers()
    running = asyncio.Event()

    @workers.register("slow")
    async def slow(job: Job[Any]) -> None:
        running.set()
        await asyncio.sleep(3600)

    client = make_client(apg_driver, workers)
    job = (await client.insert({}, kind="slow")).job

    async def failing_hook(runtime: object) -> None:
        await running.wait()
        raise RuntimeError("a start hook failed")

    client.runtime.on_start.append(failing_hook)
    with pytest.raises(RuntimeError, match="a start hook failed"):
        await client.start()
    row = fetch_row(pg_url, pg_schema, f"SELECT state, attempt FROM river_job WHERE id = {job.id}")
    assert row == ("available", 0)
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not [t for t in tasks if "riverboat" in repr(t.get_coro())], tasks
