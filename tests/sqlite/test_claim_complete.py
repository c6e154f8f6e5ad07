"""Claiming (JobGetAvailable) and completing (JobSetStateIfRunning) on SQLite."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from riverboat import AttemptError, Client, InsertManyParams, InsertOpts, JobRow, JobState
from riverboat._sql import Query, Statement
from riverboat.dialect.base import JobStateUpdate
from riverboat.dialect.sqlite import format_timestamp, parse_timestamp
from riverboat.drivers.sqlite import SqliteDriver
from tests.sqlite.helpers import query, raw


@pytest.fixture
def driver(sqlite_url: str) -> Iterator[SqliteDriver]:
    with SqliteDriver(sqlite_url) as d:
        yield d


def claim(driver: SqliteDriver, queue: str = "default", n: int = 10, **kw: object) -> list[JobRow]:
    stmt = driver.dialect.job_get_available(
        queue=queue,
        max_to_lock=n,
        client_id=str(kw.get("client_id", "worker-1")),
        now=kw.get("now"),  # type: ignore[arg-type]
    )
    return driver.dialect.decode_jobs(driver.fetch(stmt))


def complete(driver: SqliteDriver, *updates: JobStateUpdate) -> dict[int, JobRow]:
    rows = driver.fetch(driver.dialect.job_set_state_if_running_many(updates))
    return {job.id: job for job in driver.dialect.decode_jobs(rows)}


def test_claim_returns_full_running_rows_in_fetch_order(
    sqlite_url: str, driver: SqliteDriver
) -> None:
    past = datetime.now(UTC) - timedelta(minutes=1)
    client = Client(driver)
    ids = [
        r.job.id
        for r in client.insert_many(
            [
                InsertManyParams({"i": 0}, InsertOpts(priority=3), kind="claim"),
                InsertManyParams({"i": 1}, InsertOpts(priority=1), kind="claim"),
                InsertManyParams({"i": 2}, InsertOpts(priority=1, scheduled_at=past), kind="claim"),
                InsertManyParams({"i": 3}, InsertOpts(queue="other"), kind="claim"),
                InsertManyParams(
                    {"i": 4},
                    InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(hours=1)),
                    kind="claim",
                ),
            ]
        )
    ]
    conn = raw(sqlite_url)
    try:  # scheduled jobs become available as the scheduler would make them
        conn.execute("UPDATE river_job SET state = 'available' WHERE state = 'scheduled'")
    finally:
        conn.close()

    first = claim(driver, n=2)
    assert sorted(j.args["i"] for j in first) == [1, 2]  # priority 1 first; 2 is older
    for job in first:
        assert job.state is JobState.RUNNING
        assert job.attempt == 1
        assert job.attempted_by == ["worker-1"]
        assert job.attempted_at is not None
        assert abs(job.attempted_at - datetime.now(UTC)) < timedelta(seconds=5)
        assert job.kind == "claim" and job.max_attempts == 25 and job.metadata == {}
        assert job == client.job_get(job.id)
    rest = claim(driver, n=10)
    assert [j.args["i"] for j in rest] == [0]  # job 4 is in the future, job 3 elsewhere
    assert claim(driver, n=10) == []
    assert [j.id for j in claim(driver, "other")] == [ids[3]]


def test_claim_with_explicit_now(driver: SqliteDriver) -> None:
    later = datetime.now(UTC) + timedelta(hours=2)
    Client(driver).insert(
        {}, InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(hours=1)), kind="later"
    )
    driver.execute(_sql(driver, "UPDATE river_job SET state = 'available'"))
    assert claim(driver) == []
    (job,) = claim(driver, now=later)
    assert job.attempted_at == parse_timestamp(format_timestamp(later))


def _sql(driver: SqliteDriver, text: str, **params: object) -> Statement:

    return Statement(Query("test", text), params)


def test_attempted_by_keeps_the_last_hundred(sqlite_url: str, driver: SqliteDriver) -> None:
    job = Client(driver).insert({}, kind="busy").job
    history = [f"c{i}" for i in range(150)]
    conn = raw(sqlite_url)
    try:
        conn.execute(
            "UPDATE river_job SET attempted_by = jsonb(?) WHERE id = ?",
            (json.dumps(history), job.id),
        )
    finally:
        conn.close()
    (claimed,) = claim(driver, client_id="newest")
    assert len(claimed.attempted_by) == 100
    assert claimed.attempted_by == [*history[-99:], "newest"]

    driver.execute(
        _sql(
            driver,
            "UPDATE river_job SET state = 'available', attempted_by = jsonb('[\"a\",\"b\"]')",
        )
    )
    (again,) = claim(driver, client_id="c")
    assert again.attempted_by == ["a", "b", "c"]
    assert again.attempt == 2


def test_complete_sets_state_and_merges_metadata(driver: SqliteDriver) -> None:
    client = Client(driver)
    client.insert({}, InsertOpts(metadata={"keep": 1, "nested": {"a": 1, "b": 2}}), kind="ok")
    (job,) = claim(driver)
    result = complete(
        driver,
        JobStateUpdate(
            id=job.id,
            state=JobState.COMPLETED,
            finalized=True,
            metadata_updates='{"output":{"v":1},"nested":{"b":null,"c":3}}',
        ),
    )[job.id]
    assert result.state is JobState.COMPLETED
    assert result.finalized_at is not None
    # Top-level keys are replaced whole and nulls kept (River 0.50's SQLite merge, as
    # Postgres's ||), not merged recursively as jsonb_patch would.
    assert result.metadata == {"keep": 1, "nested": {"b": None, "c": 3}, "output": {"v": 1}}
    assert result.attempt == 1 and result.errors == []
    assert client.job_get(job.id) == result


def test_error_retry_and_snooze(driver: SqliteDriver) -> None:
    client = Client(driver)
    for i in range(3):
        client.insert({"i": i}, kind="fail")
    a, b, c = sorted(claim(driver), key=lambda j: j.args["i"])
    at = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    retry_at = datetime.now(UTC) + timedelta(minutes=5)
    error = AttemptError(at=at, attempt=1, error="boom", trace="tb").to_json()
    out = complete(
        driver,
        JobStateUpdate(id=a.id, state=JobState.RETRYABLE, error=error, scheduled_at=retry_at),
        JobStateUpdate(id=b.id, state=JobState.DISCARDED, error=error, finalized=True),
        JobStateUpdate(
            id=c.id,
            state=JobState.SCHEDULED,
            attempt=0,
            scheduled_at=retry_at,
            metadata_updates='{"snoozes":1}',
        ),
    )
    assert out[a.id].state is JobState.RETRYABLE
    assert out[a.id].errors == [AttemptError(at=at, attempt=1, error="boom", trace="tb")]
    assert out[a.id].scheduled_at == parse_timestamp(format_timestamp(retry_at))
    assert abs(out[a.id].scheduled_at - retry_at) <= timedelta(microseconds=500)
    assert out[a.id].finalized_at is None
    assert out[b.id].state is JobState.DISCARDED and out[b.id].finalized_at is not None
    assert out[c.id].state is JobState.SCHEDULED
    assert out[c.id].attempt == 0 and out[c.id].metadata == {"snoozes": 1}
    assert out[c.id].errors == []

    # A second error appends to the list.
    driver.execute(_sql(driver, "UPDATE river_job SET state = 'running' WHERE id = :id", id=a.id))
    second = AttemptError(at=at, attempt=2, error="again").to_json()
    out = complete(
        driver,
        JobStateUpdate(id=a.id, state=JobState.RETRYABLE, error=second, scheduled_at=retry_at),
    )
    assert [e.error for e in out[a.id].errors] == ["boom", "again"]


def test_only_running_jobs_change(driver: SqliteDriver) -> None:
    client = Client(driver)
    job = client.insert({}, kind="guard").job
    out = complete(
        driver,
        JobStateUpdate(id=job.id, state=JobState.COMPLETED, finalized=True),
    )
    assert out == {}  # not running, no metadata: untouched and not returned
    out = complete(
        driver,
        JobStateUpdate(
            id=job.id,
            state=JobState.COMPLETED,
            finalized=True,
            metadata_updates='{"o":1}',
            error=AttemptError(at=datetime.now(UTC), attempt=1, error="x").to_json(),
        ),
        JobStateUpdate(id=987654, state=JobState.COMPLETED, finalized=True),
    )
    assert list(out) == [job.id]
    untouched = out[job.id]
    assert untouched.state is JobState.AVAILABLE
    assert untouched.finalized_at is None and untouched.errors == []
    assert untouched.metadata == {"o": 1}


def test_cancel_attempted_at_overrides_retry_and_snooze(driver: SqliteDriver) -> None:
    client = Client(driver)
    marked = {"cancel_attempted_at": "2026-01-01T00:00:00Z"}
    for i in range(3):
        client.insert({"i": i}, InsertOpts(metadata=marked), kind="cancel")
    a, b, c = sorted(claim(driver), key=lambda j: j.args["i"])
    later = datetime.now(UTC) + timedelta(hours=1)
    error = AttemptError(at=datetime.now(UTC), attempt=1, error="e").to_json()
    out = complete(
        driver,
        JobStateUpdate(id=a.id, state=JobState.RETRYABLE, error=error, scheduled_at=later),
        JobStateUpdate(id=b.id, state=JobState.SCHEDULED, attempt=0, scheduled_at=later),
        JobStateUpdate(id=c.id, state=JobState.COMPLETED, finalized=True),
    )
    assert out[a.id].state is JobState.CANCELLED
    assert out[a.id].finalized_at is not None
    assert out[a.id].scheduled_at == a.scheduled_at  # kept
    assert len(out[a.id].errors) == 1  # the error is still recorded
    assert out[b.id].state is JobState.CANCELLED
    assert out[b.id].attempt == 1  # the snooze's attempt rollback is skipped
    assert out[c.id].state is JobState.COMPLETED  # completion is applied as normal


def test_batch_completion_is_one_statement(sqlite_url: str, driver: SqliteDriver) -> None:
    client = Client(driver)
    client.insert_many([InsertManyParams({"i": i}, kind="bulk") for i in range(200)])
    jobs = claim(driver, n=200)
    before = driver.stats.by_query.get("job_set_state_if_running_many_no_return", 0)
    count = driver.execute(
        driver.dialect.job_set_state_if_running_many(
            [JobStateUpdate(id=j.id, state=JobState.COMPLETED, finalized=True) for j in jobs],
            returning=False,
        )
    )
    assert count == 200
    assert driver.stats.by_query["job_set_state_if_running_many_no_return"] == before + 1
    assert query(sqlite_url, "SELECT state, count(*) FROM river_job GROUP BY state") == [
        ("completed", 200)
    ]


def test_queue_upsert_keeps_paused_at(sqlite_url: str, driver: SqliteDriver) -> None:
    (row,) = driver.fetch(driver.dialect.queue_create_or_set_updated_at("q1"))
    queue = driver.dialect.decode_queue(row)
    assert (queue.name, queue.metadata, queue.paused_at) == ("q1", {}, None)
    assert isinstance(queue.created_at, datetime) and isinstance(queue.updated_at, datetime)
    conn = raw(sqlite_url)
    try:
        conn.execute("UPDATE river_queue SET paused_at = '2026-01-01 00:00:00.000'")
    finally:
        conn.close()
    (row,) = driver.fetch(driver.dialect.queue_create_or_set_updated_at("q1"))
    assert row[3] == "2026-01-01 00:00:00.000"


@pytest.mark.parametrize(
    ("stored", "first"),
    [
        ('\'{"at":"x"}\'', {"at": "x"}),  # JSON, but not an array
        ("'not json'", "not json"),  # not JSON at all: kept as a string
        ("jsonb('7')", 7),
    ],
)
def test_an_error_is_appended_after_errors_that_are_not_an_array(
    driver: SqliteDriver, stored: str, first: object
) -> None:
    # River 0.48 (PRs #1380, #1386): what another client left in errors is kept as the
    # first element of a new array, rather than dropped.
    client = Client(driver)
    client.insert({}, kind="fail")
    (job,) = claim(driver)
    query(driver.url, f"UPDATE river_job SET errors = {stored} WHERE id = ?", job.id)
    at = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)
    error = AttemptError(at=at, attempt=1, error="boom", trace="").to_json()
    complete(
        driver, JobStateUpdate(id=job.id, state=JobState.DISCARDED, error=error, finalized=True)
    )
    ((errors,),) = query(driver.url, "SELECT json(errors) FROM river_job WHERE id = ?", job.id)
    kept, appended = json.loads(errors)
    assert kept == first and appended["error"] == "boom"
