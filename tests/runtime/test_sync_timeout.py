"""A sync job past its timeout (issue #13.1): River keeps the row ``running`` and the
slot held until ``Work`` returns, so the job is never run twice at once and what the
body did is its outcome. Postgres and SQLite."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

import riverboat
from riverboat import EventKind, Job, JobState, QueueConfig, Workers
from riverboat.runtime.maintenance.rescuer import JobRescuer
from tests.runtime.helpers import wait_for
from tests.waiting import wait_until

pytestmark = pytest.mark.asyncio


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    return request.getfixturevalue("sqlite_url"), None


def _client(db: tuple[str, str | None], workers: Workers, **kwargs: Any) -> riverboat.AsyncClient:
    url, schema = db
    return riverboat.AsyncClient(
        url,
        schema=schema,
        queues={"default": QueueConfig(max_workers=kwargs.pop("max_workers", 10))},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        **kwargs,
    )


class Overrunner:
    """A sync body that outlives its timeout: it waits (at most ``patience`` s) until
    the runtime flags it past its timeout, reports that, then waits to be released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts = 0
        self.running = 0
        self.most_at_once = 0
        self.past_timeout = threading.Event()
        self.release = threading.Event()

    def __call__(self, job: Job[Any]) -> None:
        with self.lock:
            self.starts += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            # The runtime only flags an overrunning sync body; bodies poll the flag.
            wait_until(lambda: job.cancel_requested, timeout=5, what="cancel_requested")
            self.past_timeout.set()
            self.release.wait(10)
        finally:
            with self.lock:
                self.running -= 1


async def test_overrunning_sync_job_stays_running_and_its_success_is_kept(
    db: tuple[str, str | None], caplog: pytest.LogCaptureFixture
) -> None:
    body = Overrunner()
    quick_runs: list[int] = []
    workers = Workers()
    workers.register("overrun", timeout=0.3)(body)
    workers.register("quick")(lambda job: quick_runs.append(job.id))
    client = _client(db, workers, max_workers=1)
    slow = (await client.insert({}, kind="overrun")).job
    sub = client.subscribe(EventKind.JOB_COMPLETED, EventKind.JOB_FAILED)
    caplog.set_level(logging.INFO, "riverboat")
    await client.start()
    try:
        assert await asyncio.to_thread(body.past_timeout.wait, 10)
        quick = (await client.insert({}, kind="quick")).job
        # Past its timeout the row is still this attempt's, running, with no error; the
        # old code had written a timeout failure and made it available for a rerun.
        row = await client.job_get(slow.id)
        assert (row.state, row.attempt, row.errors) == (JobState.RUNNING, 1, [])
        # The slot is still held: the one-worker queue starts nothing else meanwhile.
        assert quick_runs == []
        body.release.set()
        event = await wait_for([EventKind.JOB_COMPLETED, EventKind.JOB_FAILED], sub, slow.id)
        assert event.kind is EventKind.JOB_COMPLETED
        await wait_for([EventKind.JOB_COMPLETED], sub, quick.id)
    finally:
        body.release.set()
        await client.stop()
        await client.close()
    done = await _job_after(db, slow.id)
    assert (done.state, done.attempt, done.errors) == (JobState.COMPLETED, 1, [])
    assert (body.starts, body.most_at_once) == (1, 1)
    stuck = [r for r in caplog.records if "appears to be stuck" in r.getMessage()]
    assert len(stuck) == 1 and f"job {slow.id} " in stuck[0].getMessage()
    assert any("became unstuck" in r.getMessage() for r in caplog.records)


async def test_overrunning_sync_jobs_own_exception_is_its_outcome(
    db: tuple[str, str | None], caplog: pytest.LogCaptureFixture
) -> None:
    workers = Workers()

    @workers.register("overrun_then_fail", timeout=0.2)
    def overrun_then_fail(job: Job[Any]) -> None:
        wait_until(lambda: job.cancel_requested, timeout=5, what="cancel_requested")
        raise ValueError("the body's own error")

    client = _client(db, workers)
    inserted = (await client.insert({}, kind="overrun_then_fail")).job
    sub = client.subscribe(EventKind.JOB_FAILED)
    caplog.set_level(logging.INFO, "riverboat")
    await client.start()
    try:
        event = await wait_for([EventKind.JOB_FAILED], sub, inserted.id)
    finally:
        await client.stop()
        await client.close()
    assert event.job is not None
    assert [e.error for e in event.job.errors] == ["ValueError: the body's own error"]
    assert event.job.attempt == 1
    failed = [r for r in caplog.records if "attempt 1/25 failed" in r.getMessage()]
    assert len(failed) == 1 and f"job {inserted.id} " in failed[0].getMessage()
    assert "ValueError" in failed[0].getMessage()


async def _job_after(db: tuple[str, str | None], job_id: int) -> Any:
    url, schema = db
    async with riverboat.AsyncClient(url, schema=schema) as reader:
        return await reader.job_get(job_id)


async def test_overrunning_sync_job_is_never_rescued_while_its_client_lives(
    db: tuple[str, str | None],
) -> None:
    """Issue #25.6: with ``rescue_stuck_jobs_after`` shorter than the body's real run time,
    River's rule would hand the row to a second run while the thread still runs it. The
    registry's heartbeat proves the claiming client alive, so the rescuer leaves it."""
    from riverboat import MaintenanceConfig

    body = Overrunner()
    workers = Workers()
    workers.register("overrun", timeout=0.2)(body)
    maintenance = MaintenanceConfig(
        start_jitter=0.0, rescuer_interval=0.1, rescue_stuck_jobs_after=0.3
    )
    client = _client(
        db,
        workers,
        job_timeout=0.2,
        maintenance=maintenance,
        heartbeat_interval=0.1,
        # Alive beyond doubt: with 1 s, one heartbeat held up past a second on the loaded
        # CI machine let the rescuer take the client for dead and rescue the job (its
        # completion then reported the stored retryable row: JOB_FAILED). The rescuer's
        # rule still finds the job stuck after 0.3 s; only the registry's answer counts.
        dead_after=5.0,
    )
    slow = (await client.insert({}, kind="overrun")).job
    sub = client.subscribe(EventKind.JOB_COMPLETED, EventKind.JOB_FAILED)
    await client.start()
    try:
        assert await asyncio.to_thread(body.past_timeout.wait, 10)
        assert client.runtime.maintainer is not None
        rescuer = client.runtime.maintainer.services["rescuer"]
        assert isinstance(rescuer, JobRescuer)
        # The leader's rescuer looked at the job, stuck by River's rule, and left it.
        await asyncio.to_thread(
            wait_until, lambda: rescuer.skipped_live >= 3, timeout=20, what="rescuer runs"
        )
        row = await client.job_get(slow.id)
        assert (row.state, row.attempt, row.errors) == (JobState.RUNNING, 1, [])
        body.release.set()
        event = await wait_for([EventKind.JOB_COMPLETED, EventKind.JOB_FAILED], sub, slow.id)
        assert event.kind is EventKind.JOB_COMPLETED
    finally:
        body.release.set()
        await client.stop()
        await client.close()
    done = await _job_after(db, slow.id)
    assert (done.state, done.attempt, done.errors) == (JobState.COMPLETED, 1, [])
    assert (body.starts, body.most_at_once) == (1, 1)
