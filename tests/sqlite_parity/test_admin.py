"""Job and queue administration on SQLite, with the semantics of the Postgres admin
tests, the outbox rows standing in for NOTIFY, and
SQLite's documented differences (jsonb_patch merges, no metadata filter)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import riverboat
from riverboat import InvalidInputError, JobRunningError, JobState, NotFoundError
from riverboat._job import parse_rfc3339
from riverboat.drivers.sqlite import SqliteDriver
from riverboat.errors import NotSupportedError
from tests.sqlite_parity.helpers import counting, force_state, insert, outbox, query, raw


def ids(jobs: list[riverboat.JobRow]) -> list[int]:
    return [j.id for j in jobs]


# -- cancel ---------------------------------------------------------------------------


def test_cancel_available_job_finalizes_it_and_writes_the_outbox_row(
    client: riverboat.Client, driver: SqliteDriver, sqlite_url: str
) -> None:
    job = insert(client)
    query(sqlite_url, "DELETE FROM river_notification")
    before = datetime.now(UTC)
    with counting(driver) as seen:
        cancelled = client.job_cancel(job.id)
    assert seen == {"job_cancel": 1, "job_cancel_notify": 1}  # one transaction
    assert cancelled.state == JobState.CANCELLED and cancelled.finalized_at is not None
    stamp = cancelled.metadata["cancel_attempted_at"]
    assert before - timedelta(seconds=1) <= parse_rfc3339(stamp) <= datetime.now(UTC)
    assert client.job_get(job.id) == cancelled
    assert outbox(sqlite_url, "river_control") == [
        {"action": "cancel", "job_id": job.id, "queue": "default"}
    ]


def test_cancel_running_job_keeps_it_running_and_tells_its_producer(
    client: riverboat.Client, sqlite_url: str
) -> None:
    job = insert(client, queue="other")
    force_state(sqlite_url, job.id, "running")
    out = client.job_cancel(job.id)
    assert out.state == JobState.RUNNING and out.finalized_at is None
    assert "cancel_attempted_at" in out.metadata
    assert outbox(sqlite_url, "river_control") == [
        {"action": "cancel", "job_id": job.id, "queue": "other"}
    ]


@pytest.mark.parametrize("state", ["completed", "discarded", "cancelled"])
def test_cancel_finalized_job_changes_nothing(
    client: riverboat.Client, sqlite_url: str, state: str
) -> None:
    job = insert(client)
    force_state(sqlite_url, job.id, state)
    stored = client.job_get(job.id)
    assert client.job_cancel(job.id) == stored
    assert client.job_get(job.id) == stored
    assert outbox(sqlite_url, "river_control") == []


@pytest.mark.parametrize("state", ["scheduled", "retryable", "pending"])
def test_cancel_waiting_jobs(client: riverboat.Client, sqlite_url: str, state: str) -> None:
    job = insert(client)
    force_state(sqlite_url, job.id, state)
    assert client.job_cancel(job.id).state == JobState.CANCELLED


def test_cancel_missing_job(client: riverboat.Client, sqlite_url: str) -> None:
    with pytest.raises(NotFoundError):
        client.job_cancel(123456789)
    assert outbox(sqlite_url, "river_control") == []


def test_cancel_tx_rolls_back_with_the_callers_transaction(
    client: riverboat.Client, sqlite_url: str
) -> None:
    job = insert(client)
    conn = raw(sqlite_url)
    try:
        conn.execute("BEGIN IMMEDIATE")
        assert client.job_cancel_tx(conn, job.id).state == JobState.CANCELLED
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    assert client.job_get(job.id).state == JobState.AVAILABLE
    assert outbox(sqlite_url, "river_control") == []  # rolled back with the job


# -- retry ----------------------------------------------------------------------------


def test_retry_discarded_job_that_used_every_attempt_gets_one_more(
    client: riverboat.Client, driver: SqliteDriver, sqlite_url: str
) -> None:
    job = insert(client, max_attempts=2)
    error = '[{"at":"2026-01-01T00:00:00Z","attempt":2,"error":"boom","trace":""}]'
    force_state(sqlite_url, job.id, "discarded", attempt=2, scheduled_at="2020-01-01 00:00:00.000")
    query(sqlite_url, "UPDATE river_job SET errors = jsonb(?) WHERE id = ?", error, job.id)
    before = datetime.now(UTC) - timedelta(milliseconds=5)
    with counting(driver) as seen:
        out = client.job_retry(job.id)
    assert seen == {"job_retry": 1}
    assert (out.state, out.max_attempts, out.attempt) == (JobState.AVAILABLE, 3, 2)
    assert out.finalized_at is None and [e.error for e in out.errors] == ["boom"]
    assert out.scheduled_at >= before
    assert client.job_get(job.id) == out


def test_retry_rules(client: riverboat.Client, sqlite_url: str) -> None:
    kept = insert(client, max_attempts=5)
    force_state(sqlite_url, kept.id, "completed", attempt=1)
    out = client.job_retry(kept.id)
    assert (out.state, out.max_attempts, out.attempt) == (JobState.AVAILABLE, 5, 1)

    later = datetime.now(UTC) + timedelta(hours=1)
    scheduled = insert(client, scheduled_at=later)
    assert client.job_retry(scheduled.id).scheduled_at < later - timedelta(minutes=30)

    running = insert(client)
    force_state(sqlite_url, running.id, "running")
    stored = client.job_get(running.id)
    assert client.job_retry(running.id) == stored

    past = datetime.now(UTC) - timedelta(hours=1)
    due = insert(client, scheduled_at=past)
    force_state(sqlite_url, due.id, "available")
    stored = client.job_get(due.id)
    assert client.job_retry(due.id) == stored
    with pytest.raises(NotFoundError):
        client.job_retry(987654321)


# -- delete ---------------------------------------------------------------------------


def test_delete(client: riverboat.Client, driver: SqliteDriver, sqlite_url: str) -> None:
    job = insert(client)
    with counting(driver) as seen:
        assert client.job_delete(job.id) == job
    assert seen == {"job_delete": 1, "job_delete_apply": 1}
    with pytest.raises(NotFoundError):
        client.job_get(job.id)
    with pytest.raises(NotFoundError):
        client.job_delete(job.id)

    running = insert(client)
    force_state(sqlite_url, running.id, "running")
    with pytest.raises(JobRunningError):
        client.job_delete(running.id)
    assert client.job_get(running.id).state == JobState.RUNNING


def test_delete_tx_rolls_back(client: riverboat.Client, sqlite_url: str) -> None:
    job = insert(client)
    conn = raw(sqlite_url)
    try:
        conn.execute("BEGIN IMMEDIATE")
        assert client.job_delete_tx(conn, job.id).id == job.id
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    assert client.job_get(job.id).id == job.id


def test_delete_many_skips_running_respects_filters_and_returns_id_order(
    client: riverboat.Client, driver: SqliteDriver, sqlite_url: str
) -> None:
    with pytest.raises(InvalidInputError):
        client.job_delete_many()
    a = insert(client, kind="kind_a")
    b = insert(client, kind="kind_b")
    a_running = insert(client, kind="kind_a")
    force_state(sqlite_url, a_running.id, "running")
    a_done = insert(client, kind="kind_a")
    force_state(sqlite_url, a_done.id, "completed")
    with counting(driver) as seen:
        deleted = client.job_delete_many(kinds=["kind_a"])
    assert seen == {"job_delete_many": 1}
    assert ids(deleted) == [a.id, a_done.id]
    assert deleted[1].state == JobState.COMPLETED
    assert ids(client.job_delete_many(all=True)) == [b.id]
    assert ids(client.job_list().jobs) == [a_running.id]

    many = [insert(client) for _ in range(30)]
    first = client.job_delete_many(states=["available"], limit=12)
    assert ids(first) == [j.id for j in many[:12]]
    assert ids(client.job_delete_many(states=[JobState.AVAILABLE])) == [j.id for j in many[12:]]


# -- update ---------------------------------------------------------------------------


def test_update_merges_with_jsonb_patch(
    client: riverboat.Client, driver: SqliteDriver, sqlite_url: str
) -> None:
    job = insert(client, metadata={"keep": 1, "nested": {"a": 1}, "gone": True})
    force_state(sqlite_url, job.id, "completed")
    with counting(driver) as seen:
        out = client.job_update(
            job.id, output={"result": [1, 2]}, metadata={"nested": {"b": 2}, "gone": None}
        )
    assert seen == {"job_update": 1}
    # Recursive merge, and null removes a key (RFC 7396), as River's SQLite driver does;
    # Postgres's || would give {"nested": {"b": 2}, "gone": None}.
    assert out.metadata == {"keep": 1, "nested": {"a": 1, "b": 2}, "output": {"result": [1, 2]}}
    assert out.state == JobState.COMPLETED
    assert client.job_get(job.id) == out
    with counting(driver) as seen:
        assert client.job_update(job.id) == out
    assert seen == {"job_get_by_id": 1}
    with pytest.raises(NotFoundError):
        client.job_update(424242, output=1)


# -- list -----------------------------------------------------------------------------


def test_list_filters(client: riverboat.Client, driver: SqliteDriver, sqlite_url: str) -> None:
    a = insert(client, kind="kind_a", queue="q1", priority=1, tags=["red", "big"])
    b = insert(client, kind="kind_b", queue="q2", priority=2, tags=["red"])
    c = insert(client, kind="kind_b", queue="q1", priority=3)
    force_state(sqlite_url, c.id, "completed")
    with counting(driver) as seen:
        assert ids(client.job_list(ids=[c.id, a.id]).jobs) == [a.id, c.id]
    assert seen == {"job_list": 1}
    assert ids(client.job_list(kinds=["kind_b"]).jobs) == [b.id, c.id]
    assert ids(client.job_list(queues=["q1"]).jobs) == [a.id, c.id]
    assert ids(client.job_list(states=["completed"]).jobs) == [c.id]
    assert ids(client.job_list(priorities=[2, 3]).jobs) == [b.id, c.id]
    assert ids(client.job_list(tags_all=["red", "big"]).jobs) == [a.id]
    assert ids(client.job_list(tags_any=["big", "nope"]).jobs) == [a.id]
    assert ids(client.job_list(tags_any=["red"]).jobs) == [a.id, b.id]
    assert ids(client.job_list(kinds=["kind_b"], queues=["q1"]).jobs) == [c.id]
    with counting(driver) as seen:
        for call in (
            lambda: client.job_list(metadata={"x": 1}),
            lambda: client.job_delete_many(metadata={"x": 1}),
        ):
            with pytest.raises(NotSupportedError, match="metadata"):
                call()
    assert seen == {}


def _paginate(client: riverboat.Client, size: int, **kwargs: Any) -> list[int]:
    seen: list[int] = []
    cursor = None
    while True:
        page = client.job_list(limit=size, cursor=cursor, **kwargs)
        seen.extend(ids(page.jobs))
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


def test_pagination_with_ties_and_nulls(client: riverboat.Client, sqlite_url: str) -> None:
    base = datetime(2030, 1, 1, tzinfo=UTC)
    jobs = [insert(client, scheduled_at=base + timedelta(minutes=m)) for m in (5, 1, 5, 3, 1)]
    expected = [j.id for j in sorted(jobs, key=lambda j: (j.scheduled_at, j.id))]
    for size in (1, 2, 100):
        assert _paginate(client, size, order_by="scheduled_at") == expected
        assert _paginate(client, size, order_by="scheduled_at", descending=True) == expected[::-1]
    assert _paginate(client, 2, descending=True) == [j.id for j in reversed(jobs)]

    # finalized_at: NULLs last ascending, first descending (Postgres's order). One row is
    # written the way Go writes timestamps, without trailing zeros ("...:00.5"): it ties
    # with "...:00.500" and the tie is broken by id.
    for job, stamp in zip(
        jobs[:4],
        (
            "2025-06-01 00:03:00.500",
            "2025-06-01 00:01:00.000",
            "2025-06-01 00:03:00.5",
            "2025-06-01 00:02:00",
        ),
        strict=True,
    ):
        force_state(sqlite_url, job.id, "completed")
        query(sqlite_url, "UPDATE river_job SET finalized_at = ? WHERE id = ?", stamp, job.id)
    asc = [jobs[1].id, jobs[3].id, jobs[0].id, jobs[2].id, jobs[4].id]
    for size in (1, 2, 100):
        assert _paginate(client, size, order_by="finalized_at") == asc
        assert _paginate(client, size, order_by="finalized_at", descending=True) == asc[::-1]
    page = client.job_list(order_by="time", states=["completed"], limit=2)
    assert page.next_cursor is not None and page.next_cursor.column == "finalized_at"


# -- queues ---------------------------------------------------------------------------


def make_queue(driver: SqliteDriver, name: str) -> None:
    driver.fetch(driver.dialect.queue_create_or_set_updated_at(name))


def test_queue_get_list(client: riverboat.Client, driver: SqliteDriver) -> None:
    for name in ("zeta", "alpha", "mid"):
        make_queue(driver, name)
    with counting(driver) as seen:
        alpha = client.queue_get("alpha")
    assert seen == {"queue_get": 1}
    assert alpha.name == "alpha" and alpha.metadata == {} and not alpha.paused
    assert [q.name for q in client.queue_list()] == ["alpha", "mid", "zeta"]
    assert [q.name for q in client.queue_list(limit=2)] == ["alpha", "mid"]
    with pytest.raises(NotFoundError):
        client.queue_get("nope")


def test_pause_resume_and_their_outbox_rows(
    client: riverboat.Client, driver: SqliteDriver, sqlite_url: str
) -> None:
    # With no queue rows "*" matches nothing, yet producers are still told (as River does).
    assert client.queue_pause("*") == []
    assert outbox(sqlite_url, "river_control") == [{"action": "pause", "queue": "*"}]
    query(sqlite_url, "DELETE FROM river_notification")
    with pytest.raises(NotFoundError):
        client.queue_pause("ghost")
    with pytest.raises(NotFoundError):
        client.queue_resume("ghost")
    assert outbox(sqlite_url) == []

    make_queue(driver, "work")
    make_queue(driver, "other")
    created = client.queue_get("work")
    time.sleep(0.005)  # timestamps have millisecond precision
    with counting(driver) as seen:
        (paused,) = client.queue_pause("work")
    assert seen == {"queue_pause": 1, "queue_control_notify": 1}
    assert paused.paused_at is not None and paused.updated_at > created.updated_at
    assert client.queue_get("other").paused_at is None
    (again,) = client.queue_pause("work")  # keeps paused_at and updated_at, still tells
    assert (again.paused_at, again.updated_at) == (paused.paused_at, paused.updated_at)
    time.sleep(0.005)
    everything = client.queue_pause("*")
    assert [q.name for q in everything] == ["other", "work"]  # by name, as on Postgres
    assert everything[1].paused_at == paused.paused_at
    resumed = client.queue_resume("*")
    assert [q.paused_at for q in resumed] == [None, None]
    assert outbox(sqlite_url, "river_control") == [
        {"action": "pause", "queue": "work"},
        {"action": "pause", "queue": "work"},
        {"action": "pause", "queue": "*"},
        {"action": "resume", "queue": "*"},
    ]


def test_pause_tx_rolls_back_with_its_outbox_row(
    client: riverboat.Client, driver: SqliteDriver, sqlite_url: str
) -> None:
    make_queue(driver, "txq")
    conn = raw(sqlite_url)
    try:
        conn.execute("BEGIN IMMEDIATE")
        client.queue_pause_tx(conn, "txq")
        conn.execute("ROLLBACK")
        conn.execute("BEGIN IMMEDIATE")
        client.queue_pause_tx(conn, "txq")
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert client.queue_get("txq").paused
    assert outbox(sqlite_url, "river_control") == [{"action": "pause", "queue": "txq"}]


def test_queue_update_replaces_metadata_and_notifies(
    client: riverboat.Client, driver: SqliteDriver, sqlite_url: str
) -> None:
    make_queue(driver, "meta")
    query(sqlite_url, """UPDATE river_queue SET metadata = jsonb('{"old": 1}')""")
    out = client.queue_update("meta", metadata={"new": {"deep": True}})
    assert out.metadata == {"new": {"deep": True}}
    assert client.queue_get("meta") == out
    time.sleep(0.005)
    with counting(driver) as seen:
        touched = client.queue_update("meta")
    assert seen == {"queue_update": 1}  # nothing to tell
    assert touched.metadata == out.metadata and touched.updated_at > out.updated_at
    with pytest.raises(NotFoundError):
        client.queue_update("ghost", metadata={})
    assert outbox(sqlite_url, "river_control") == [
        {"action": "metadata_changed", "metadata": {"new": {"deep": True}}, "queue": "meta"}
    ]


async def test_async_client_admin(sqlite_url: str) -> None:
    async with riverboat.AsyncClient(sqlite_url) as client:
        job = (await client.insert({"n": 1}, kind="thing")).job
        assert (await client.job_cancel(job.id)).state == JobState.CANCELLED
        assert (await client.job_retry(job.id)).state == JobState.AVAILABLE
        assert (await client.job_update(job.id, output="ok")).metadata["output"] == "ok"
        assert ids((await client.job_list(ids=[job.id])).jobs) == [job.id]
        assert (await client.job_delete(job.id)).id == job.id
        await client.driver.fetch(client.driver.dialect.queue_create_or_set_updated_at("aq"))
        assert (await client.queue_pause("aq"))[0].paused
        assert not (await client.queue_resume("*"))[0].paused
        assert (await client.queue_update("aq", metadata={"k": 1})).metadata == {"k": 1}
