"""Job administration against real Postgres: cancel, retry, delete, update (River's
JobCancel, JobRetry, JobDelete), each one statement with no transaction around it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import riverboat
from riverboat import InvalidInputError, JobRunningError, JobState, NotFoundError
from riverboat._job import parse_rfc3339
from tests.admin.helpers import ControlListener, counting, force_state, insert, sql

# -- cancel ---------------------------------------------------------------------------


def test_cancel_available_job_finalizes_it_and_notifies(
    client: riverboat.Client, pg_driver: Any, control: ControlListener
) -> None:
    job = insert(client)
    before = datetime.now(UTC)
    with counting(pg_driver) as seen:
        cancelled = client.job_cancel(job.id)
    assert seen == {"job_cancel": 1}
    assert cancelled.id == job.id
    assert cancelled.state == JobState.CANCELLED
    assert cancelled.finalized_at is not None
    stamp = cancelled.metadata["cancel_attempted_at"]
    assert isinstance(stamp, str) and stamp.endswith("Z")
    assert before - timedelta(seconds=1) <= parse_rfc3339(stamp) <= datetime.now(UTC)
    assert client.job_get(job.id) == cancelled
    assert control.drain() == [{"action": "cancel", "job_id": job.id, "queue": "default"}]


def test_cancel_running_job_keeps_it_running(
    client: riverboat.Client, pg_url: str, pg_schema: str, control: ControlListener
) -> None:
    job = insert(client, queue="other")
    force_state(pg_url, pg_schema, job.id, "running")
    out = client.job_cancel(job.id)
    assert out.state == JobState.RUNNING
    assert out.finalized_at is None
    assert "cancel_attempted_at" in out.metadata
    assert control.drain() == [{"action": "cancel", "job_id": job.id, "queue": "other"}]


@pytest.mark.parametrize("state", ["completed", "discarded", "cancelled"])
def test_cancel_finalized_job_changes_nothing(
    client: riverboat.Client,
    pg_url: str,
    pg_schema: str,
    control: ControlListener,
    state: str,
) -> None:
    job = insert(client)
    force_state(pg_url, pg_schema, job.id, state)
    stored = client.job_get(job.id)
    out = client.job_cancel(job.id)
    assert out == stored
    assert "cancel_attempted_at" not in out.metadata
    assert control.drain() == []


@pytest.mark.parametrize("state", ["scheduled", "retryable", "pending"])
def test_cancel_waiting_jobs(
    client: riverboat.Client, pg_url: str, pg_schema: str, state: str
) -> None:
    job = insert(client)
    force_state(pg_url, pg_schema, job.id, state)
    assert client.job_cancel(job.id).state == JobState.CANCELLED


def test_cancel_missing_job(client: riverboat.Client, control: ControlListener) -> None:
    with pytest.raises(NotFoundError):
        client.job_cancel(123456789)
    assert control.drain() == []


@pytest.mark.parametrize("bad", ["1", 1.0, True, None])
def test_job_ids_are_validated_before_any_sql(
    client: riverboat.Client, pg_driver: Any, bad: Any
) -> None:
    with counting(pg_driver) as seen:
        for op in (client.job_cancel, client.job_retry, client.job_delete, client.job_update):
            with pytest.raises(InvalidInputError):
                op(bad)
    assert seen == {}


def test_cancel_tx_rolls_back_with_the_callers_transaction(
    client: riverboat.Client, pg_url: str, pg_schema: str, control: ControlListener
) -> None:
    job = insert(client)
    with psycopg.connect(pg_url) as conn:
        out = client.job_cancel_tx(conn, job.id)
        assert out.state == JobState.CANCELLED
        conn.rollback()
    assert client.job_get(job.id).state == JobState.AVAILABLE
    assert control.drain() == []  # a rolled-back NOTIFY is never sent


# -- retry ----------------------------------------------------------------------------


def test_retry_discarded_job_that_used_every_attempt_gets_one_more(
    client: riverboat.Client, pg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    job = insert(client, max_attempts=2)
    error = '{"at":"2026-01-01T00:00:00Z","attempt":2,"error":"boom","trace":""}'
    force_state(
        pg_url,
        pg_schema,
        job.id,
        "discarded",
        attempt=2,
        errors=[error],
        scheduled_at=datetime(2020, 1, 1, tzinfo=UTC),
    )
    before = sql(pg_url, pg_schema, "SELECT now()")[0][0]
    with counting(pg_driver) as seen:
        out = client.job_retry(job.id)
    assert seen == {"job_retry": 1}
    assert out.state == JobState.AVAILABLE
    assert out.max_attempts == 3
    assert out.attempt == 2
    assert out.finalized_at is None
    assert [e.error for e in out.errors] == ["boom"]
    assert out.scheduled_at >= before
    assert client.job_get(job.id) == out


def test_retry_keeps_max_attempts_when_attempts_remain(
    client: riverboat.Client, pg_url: str, pg_schema: str
) -> None:
    job = insert(client, max_attempts=5)
    force_state(pg_url, pg_schema, job.id, "completed", attempt=1)
    out = client.job_retry(job.id)
    assert (out.state, out.max_attempts, out.attempt) == (JobState.AVAILABLE, 5, 1)


def test_retry_scheduled_job_makes_it_available_now(
    client: riverboat.Client, pg_url: str, pg_schema: str
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    job = insert(client, scheduled_at=later)
    assert job.state == JobState.SCHEDULED
    out = client.job_retry(job.id)
    assert out.state == JobState.AVAILABLE
    assert out.scheduled_at < later - timedelta(minutes=30)


def test_retry_leaves_running_and_due_available_jobs_alone(
    client: riverboat.Client, pg_url: str, pg_schema: str
) -> None:
    running = insert(client)
    force_state(pg_url, pg_schema, running.id, "running")
    stored = client.job_get(running.id)
    assert client.job_retry(running.id) == stored

    past = datetime.now(UTC) - timedelta(hours=1)
    due = insert(client, scheduled_at=past)
    force_state(pg_url, pg_schema, due.id, "available", scheduled_at=past)
    stored = client.job_get(due.id)
    out = client.job_retry(due.id)
    assert out == stored and out.scheduled_at == past


def test_retry_missing_job(client: riverboat.Client) -> None:
    with pytest.raises(NotFoundError):
        client.job_retry(987654321)


# -- delete ---------------------------------------------------------------------------


def test_delete_returns_the_deleted_job(client: riverboat.Client, pg_driver: Any) -> None:
    job = insert(client)
    with counting(pg_driver) as seen:
        out = client.job_delete(job.id)
    assert seen == {"job_delete": 1}
    assert out == job
    with pytest.raises(NotFoundError):
        client.job_get(job.id)


def test_delete_refuses_running_job(client: riverboat.Client, pg_url: str, pg_schema: str) -> None:
    job = insert(client)
    force_state(pg_url, pg_schema, job.id, "running")
    with pytest.raises(JobRunningError):
        client.job_delete(job.id)
    assert client.job_get(job.id).state == JobState.RUNNING


def test_delete_missing_job(client: riverboat.Client) -> None:
    with pytest.raises(NotFoundError):
        client.job_delete(5555555)


def test_delete_tx(client: riverboat.Client, pg_url: str) -> None:
    job = insert(client)
    with psycopg.connect(pg_url) as conn:
        assert client.job_delete_tx(conn, job.id).id == job.id
        conn.rollback()
    assert client.job_get(job.id).id == job.id


def test_delete_many_needs_a_filter_or_all(client: riverboat.Client, pg_driver: Any) -> None:
    insert(client)
    with counting(pg_driver) as seen, pytest.raises(InvalidInputError):
        client.job_delete_many()
    assert seen == {}
    with pytest.raises(InvalidInputError):
        client.job_delete_many(all="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        client.job_delete_many(kinds=[])


def test_delete_many_skips_running_and_respects_filters(
    client: riverboat.Client, pg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    a = insert(client, kind="kind_a")
    b = insert(client, kind="kind_b")
    a_running = insert(client, kind="kind_a")
    force_state(pg_url, pg_schema, a_running.id, "running")
    a_done = insert(client, kind="kind_a")
    force_state(pg_url, pg_schema, a_done.id, "completed")

    with counting(pg_driver) as seen:
        deleted = client.job_delete_many(kinds=["kind_a"])
    assert seen == {"job_delete_many": 1}
    assert [j.id for j in deleted] == [a.id, a_done.id]
    assert deleted[1].state == JobState.COMPLETED

    rest = client.job_delete_many(all=True)
    assert [j.id for j in rest] == [b.id]
    assert [j.id for j in client.job_list().jobs] == [a_running.id]


def test_delete_many_limit_and_state_filter(
    client: riverboat.Client, pg_url: str, pg_schema: str
) -> None:
    jobs = [insert(client) for _ in range(5)]
    for job in jobs[:4]:
        force_state(pg_url, pg_schema, job.id, "completed")
    first = client.job_delete_many(states=["completed"], limit=3)
    assert [j.id for j in first] == [j.id for j in jobs[:3]]
    second = client.job_delete_many(states=[JobState.COMPLETED])
    assert [j.id for j in second] == [jobs[3].id]
    assert client.job_get(jobs[4].id).state == JobState.AVAILABLE


# -- update ---------------------------------------------------------------------------


def test_update_records_output_and_merges_metadata_shallowly(
    client: riverboat.Client, pg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    job = insert(client, metadata={"keep": 1, "nested": {"a": 1}})
    force_state(pg_url, pg_schema, job.id, "completed")
    with counting(pg_driver) as seen:
        out = client.job_update(job.id, output={"result": [1, 2]}, metadata={"nested": {"b": 2}})
    assert seen == {"job_update": 1}
    assert out.metadata == {"keep": 1, "nested": {"b": 2}, "output": {"result": [1, 2]}}
    assert out.state == JobState.COMPLETED
    assert client.job_get(job.id) == out
    # Output may be any JSON value, including null.
    assert client.job_update(job.id, output=None).metadata["output"] is None


def test_update_with_nothing_reads_the_job(client: riverboat.Client, pg_driver: Any) -> None:
    job = insert(client)
    with counting(pg_driver) as seen:
        assert client.job_update(job.id) == job
    assert seen == {"job_get_by_id": 1}


def test_update_validation_and_missing(client: riverboat.Client) -> None:
    with pytest.raises(NotFoundError):
        client.job_update(424242, output=1)
    with pytest.raises(InvalidInputError):
        client.job_update(1, output=object())
    with pytest.raises(InvalidInputError):
        client.job_update(1, metadata=["not", "a", "dict"])  # type: ignore[arg-type]


def test_update_tx(client: riverboat.Client, pg_url: str) -> None:
    job = insert(client)
    with psycopg.connect(pg_url) as conn:
        assert client.job_update_tx(conn, job.id, output=7).metadata == {"output": 7}
    assert client.job_get(job.id).metadata == {"output": 7}


# -- async client, same operations ----------------------------------------------------


async def test_async_client_job_ops(apg_driver: Any) -> None:
    client = riverboat.AsyncClient(apg_driver)
    job = (await client.insert({"n": 1}, kind="thing")).job
    with counting(apg_driver) as seen:
        cancelled = await client.job_cancel(job.id)
        retried = await client.job_retry(job.id)
        updated = await client.job_update(job.id, output="ok")
        listed = await client.job_list(ids=[job.id])
        deleted = await client.job_delete(job.id)
    assert seen == {
        "job_cancel": 1,
        "job_retry": 1,
        "job_update": 1,
        "job_list": 1,
        "job_delete": 1,
    }
    assert cancelled.state == JobState.CANCELLED
    assert retried.state == JobState.AVAILABLE and retried.finalized_at is None
    assert updated.metadata["output"] == "ok"
    assert [j.id for j in listed.jobs] == [job.id]
    assert deleted.id == job.id
    with pytest.raises(NotFoundError):
        await client.job_delete(job.id)
    assert await client.job_delete_many(all=True) == []
