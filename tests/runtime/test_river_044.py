"""River 0.44 behaviour on shared rows and events (issue #12.2), Postgres and SQLite:

* a job interrupted because its client is stopping goes back to ``available`` with the
  attempt it had before the run and its errors unchanged, with a ``job_interrupted``
  event (0.44.0), sync jobs included;
* completion events report the persisted outcome, not the requested one (0.44.0);
* SQLite timestamps are written with exactly three fraction digits, and a job without
  errors reads back ``[]`` (0.44.1).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

import riverboat
from riverboat import EventKind, InsertOpts, Job, JobSnooze, JobState, QueueConfig, Workers
from riverboat.runtime.outcomes import persisted_event_kind
from tests.runtime.helpers import next_events, wait_for

EARLIER_ERROR = {"at": "2026-01-02T03:04:05.678Z", "attempt": 1, "error": "earlier", "trace": ""}


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    return request.getfixturevalue("sqlite_url"), None


def _sql(db: tuple[str, str | None], pg: str, lite: str, *params: Any) -> list[Any]:
    """One statement on a fresh connection, in the dialect's own SQL."""
    url, schema = db
    if url.startswith("sqlite:"):
        from riverboat.drivers._sqlite_module import sqlite_module

        conn = sqlite_module().connect(url.removeprefix("sqlite:///"), timeout=10)
        try:
            rows: list[Any] = conn.execute(lite, params).fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        cur = conn.execute(pg, params or None)
        return cur.fetchall() if cur.description is not None else []


def _client(db: tuple[str, str | None], workers: Workers) -> riverboat.AsyncClient:
    url, schema = db
    return riverboat.AsyncClient(
        url,
        schema=schema,
        queues={"default": QueueConfig(max_workers=10)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    )


@pytest.mark.asyncio
async def test_hard_stop_hands_back_sync_and_async_jobs(db: tuple[str, str | None]) -> None:
    release = threading.Event()
    sync_started = threading.Event()
    async_started = asyncio.Event()
    workers = Workers()

    @workers.register("hung_sync")
    def hung_sync(job: Job[Any]) -> None:
        sync_started.set()
        release.wait(30)

    @workers.register("hung_async")
    async def hung_async(job: Job[Any]) -> None:
        async_started.set()
        await asyncio.sleep(3600)

    client = _client(db, workers)
    ids = [(await client.insert({}, kind=k)).job.id for k in ("hung_sync", "hung_async")]
    error = json.dumps(EARLIER_ERROR)
    _sql(
        db,
        "UPDATE river_job SET attempt = 1, errors = ARRAY[%s::jsonb]",
        "UPDATE river_job SET attempt = 1, errors = jsonb(json_array(json(?)))",
        error,
    )
    sub = client.subscribe(EventKind.JOB_INTERRUPTED, EventKind.JOB_FAILED)
    await client.start()
    try:
        assert await asyncio.to_thread(sync_started.wait, 10)
        await asyncio.wait_for(async_started.wait(), 10)
        # The old hard stop waited for the sync thread: this would never return.
        await asyncio.wait_for(client.stop_and_cancel(), 10)
        events = await next_events(sub, 2)
    finally:
        release.set()
        await client.close()
    assert sorted(e.job.id for e in events if e.job is not None) == ids
    for event in events:
        assert event.kind is EventKind.JOB_INTERRUPTED
        assert event.job is not None
        assert (event.job.state, event.job.attempt) == (JobState.AVAILABLE, 1)
        assert [e.error for e in event.job.errors] == ["earlier"]
    url, schema = db
    async with riverboat.AsyncClient(url, schema=schema) as reader:
        for job_id in ids:
            row = await reader.job_get(job_id)
            assert (row.state, row.attempt, [e.error for e in row.errors]) == (
                JobState.AVAILABLE,
                1,
                ["earlier"],
            )


@pytest.mark.asyncio
async def test_completion_event_reports_what_was_stored(db: tuple[str, str | None]) -> None:
    running = asyncio.Event()
    release = asyncio.Event()
    workers = Workers()

    @workers.register("fails_after_completed_elsewhere")
    async def fails(job: Job[Any]) -> None:
        running.set()
        await release.wait()
        raise RuntimeError("the worker asks for a retry")

    client = _client(db, workers)
    job_id = (await client.insert({}, kind="fails_after_completed_elsewhere")).job.id
    sub = client.subscribe()
    await client.start()
    try:
        await asyncio.wait_for(running.wait(), 10)
        # Completed by other means while the worker ran (as River's JobCompleteTx does).
        _sql(
            db,
            "UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = %s",
            "UPDATE river_job SET state = 'completed',"
            " finalized_at = datetime('now', 'subsec') WHERE id = ?",
            job_id,
        )
        release.set()
        event = await wait_for(list(EventKind), sub, job_id)
    finally:
        await client.stop()
        await client.close()
    assert event.kind is EventKind.JOB_COMPLETED
    assert event.job is not None and event.job.state is JobState.COMPLETED


def test_persisted_event_kind_follows_rivers_table() -> None:
    failed, snoozed = EventKind.JOB_FAILED, EventKind.JOB_SNOOZED
    interrupted, completed = EventKind.JOB_INTERRUPTED, EventKind.JOB_COMPLETED
    cancelled = EventKind.JOB_CANCELLED
    # available is ambiguous: the requested kind stands unless it can't be right
    assert persisted_event_kind(JobState.AVAILABLE, failed) is failed
    assert persisted_event_kind(JobState.AVAILABLE, snoozed) is snoozed
    assert persisted_event_kind(JobState.AVAILABLE, interrupted) is interrupted
    assert persisted_event_kind(JobState.AVAILABLE, completed) is failed
    assert persisted_event_kind(JobState.AVAILABLE, cancelled) is failed
    # every other finished state names its event, whatever was asked
    assert persisted_event_kind(JobState.CANCELLED, snoozed) is cancelled
    assert persisted_event_kind(JobState.COMPLETED, failed) is completed
    assert persisted_event_kind(JobState.DISCARDED, completed) is failed
    assert persisted_event_kind(JobState.RETRYABLE, completed) is failed
    assert persisted_event_kind(JobState.SCHEDULED, failed) is snoozed
    # not finished by this attempt: no event
    assert persisted_event_kind(JobState.RUNNING, completed) is None
    assert persisted_event_kind(JobState.PENDING, completed) is None


THREE_DIGITS = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$")


@pytest.mark.asyncio
async def test_sqlite_timestamps_have_three_fraction_digits_and_errors_read_empty(
    sqlite_url: str,
) -> None:
    workers = Workers()

    @workers.register("done")
    def done(job: Job[Any]) -> None:
        pass

    @workers.register("snooze_once")
    def snooze_once(job: Job[Any]) -> None:
        if not job.metadata.get("snoozes"):
            raise JobSnooze(0)

    client = _client((sqlite_url, None), workers)
    on_the_second = datetime(2026, 1, 1, tzinfo=UTC)  # .000: the digits Go used to drop
    ids = [
        (await client.insert({}, InsertOpts(scheduled_at=on_the_second), kind="done")).job.id,
        (await client.insert({}, kind="snooze_once")).job.id,
    ]
    sub = client.subscribe(EventKind.JOB_COMPLETED)
    await client.start()
    try:
        completed = await next_events(sub, 2)
    finally:
        await client.stop()
    rows = _sql(
        (sqlite_url, None),
        "",
        "SELECT id, created_at, scheduled_at, attempted_at, finalized_at, errors FROM river_job",
    )
    for job_id, *stamps, errors in rows:
        assert errors is None
        for stamp in stamps:
            assert THREE_DIGITS.match(stamp), (job_id, stamp)
    assert sorted(e.job.id for e in completed if e.job is not None) == ids
    assert rows[0][2] == "2026-01-01 00:00:00.000"
    for job_id in ids:
        assert (await client.job_get(job_id)).errors == []
    await client.close()
