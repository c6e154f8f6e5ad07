"""Dialect statements run straight through the driver: claim, completion with and
without RETURNING, job reads, transactions, scripts and error translation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from riverboat import AttemptError, DriverError, InsertOpts, JobState, NotFoundError
from riverboat._insert import InsertDefaults, resolve_insert
from riverboat._sql import Query, Statement
from riverboat.dialect.base import JobStateUpdate
from tests.drivers.harness import Harness


def insert_stmt(h: Harness, kind: str, n: int = 1, **opts: Any) -> Statement:
    jobs = [resolve_insert({"i": i}, InsertOpts(**opts), kind, InsertDefaults()) for i in range(n)]
    stmt: Statement = h.driver.dialect.job_insert_many(jobs, [])
    return stmt


async def insert_jobs(h: Harness, kind: str, n: int, **opts: Any) -> list[Any]:
    rows = await h.fetch(h.driver, insert_stmt(h, kind, n, **opts))
    return [r.job for r in h.driver.dialect.decode_insert(rows)]


async def test_claim_returns_full_rows(h: Harness) -> None:
    dialect = h.driver.dialect
    inserted = await insert_jobs(h, "conf_claim", 3, queue="claimq", tags=["claimed"])
    rows = await h.fetch(
        h.driver, dialect.job_get_available(queue="claimq", max_to_lock=2, client_id="conf-1")
    )
    claimed = dialect.decode_jobs(rows)
    assert [j.id for j in claimed] == [j.id for j in inserted[:2]]
    for job, before in zip(claimed, inserted, strict=False):
        assert job.state is JobState.RUNNING
        assert job.attempt == 1
        assert job.attempted_by == ["conf-1"]
        assert job.attempted_at is not None
        assert (job.args, job.kind, job.queue, job.tags) == (
            before.args,
            before.kind,
            before.queue,
            before.tags,
        )
        assert (job.created_at, job.scheduled_at) == (before.created_at, before.scheduled_at)
        # The claim's rows are the rows: a read afterwards finds nothing new.
        assert (
            dialect.decode_job((await h.fetch(h.driver, dialect.job_get_by_id(job.id)))[0]) == job
        )
    rest = await h.fetch(
        h.driver, dialect.job_get_available(queue="claimq", max_to_lock=10, client_id="conf-2")
    )
    assert [dialect.decode_job(r).id for r in rest] == [inserted[2].id]
    none = await h.fetch(
        h.driver, dialect.job_get_available(queue="claimq", max_to_lock=10, client_id="conf-2")
    )
    assert none == []


async def claim(h: Harness, queue: str, n: int) -> list[Any]:
    dialect = h.driver.dialect
    rows = await h.fetch(
        h.driver, dialect.job_get_available(queue=queue, max_to_lock=n, client_id="conf")
    )
    return list(dialect.decode_jobs(rows))


async def test_completion_with_returning(h: Harness) -> None:
    dialect = h.driver.dialect
    await insert_jobs(h, "conf_complete", 3, queue="cq")
    done, retry, snooze = await claim(h, "cq", 3)
    later = datetime.now(UTC) + timedelta(minutes=5)
    error = AttemptError(at=datetime.now(UTC), attempt=1, error="boom", trace="tb")
    updates = [
        JobStateUpdate(done.id, JobState.COMPLETED, finalized=True),
        JobStateUpdate(retry.id, JobState.RETRYABLE, error=error.to_json(), scheduled_at=later),
        JobStateUpdate(
            snooze.id,
            JobState.SCHEDULED,
            attempt=0,
            scheduled_at=later,
            metadata_updates='{"snoozes": 1}',
        ),
    ]
    rows = await h.fetch(h.driver, dialect.job_set_state_if_running_many(updates))
    by_id = {j.id: j for j in dialect.decode_jobs(rows)}
    assert set(by_id) == {done.id, retry.id, snooze.id}
    assert by_id[done.id].state is JobState.COMPLETED
    assert by_id[done.id].finalized_at is not None
    assert by_id[retry.id].state is JobState.RETRYABLE
    assert [e.error for e in by_id[retry.id].errors] == ["boom"]
    assert abs(by_id[retry.id].scheduled_at - later) < timedelta(milliseconds=1)
    assert by_id[snooze.id].state is JobState.SCHEDULED
    assert by_id[snooze.id].attempt == 0
    assert by_id[snooze.id].metadata == {"snoozes": 1}
    # No longer running: a second completion changes nothing.
    again = await h.fetch(
        h.driver,
        dialect.job_set_state_if_running_many([JobStateUpdate(done.id, JobState.DISCARDED)]),
    )
    assert again == [] or dialect.decode_job(again[0]).state is JobState.COMPLETED
    got = dialect.decode_job((await h.fetch(h.driver, dialect.job_get_by_id(done.id)))[0])
    assert got.state is JobState.COMPLETED


async def test_a_cancel_asked_for_overrides_a_retry_a_snooze_and_a_hand_back(h: Harness) -> None:
    """A job whose cancellation was asked for (``cancel_attempted_at``, its notification
    perhaps lost) is cancelled by an outcome that would run it again: a retry, a snooze,
    and one that makes it available at once (a hand-back, a retry or snooze due now), as
    River 0.51's JobSetStateIfRunningMany does on both databases. (Available was left
    out: the job ran again.) Its attempt stays as claimed; a completion is written."""
    dialect = h.driver.dialect
    marked = {"cancel_attempted_at": "2026-01-01T00:00:00Z"}
    await insert_jobs(h, "conf_cancel_asked", 4, queue="cancelq", metadata=marked)
    retry, snooze, again, done = await claim(h, "cancelq", 4)
    later = datetime.now(UTC) + timedelta(hours=1)
    error = AttemptError(at=datetime.now(UTC), attempt=1, error="e").to_json()
    updates = [
        JobStateUpdate(retry.id, JobState.RETRYABLE, error=error, scheduled_at=later),
        JobStateUpdate(snooze.id, JobState.SCHEDULED, attempt=0, scheduled_at=later),
        JobStateUpdate(again.id, JobState.AVAILABLE, attempt=0, scheduled_at=datetime.now(UTC)),
        JobStateUpdate(done.id, JobState.COMPLETED, finalized=True),
    ]
    rows = await h.fetch(h.driver, dialect.job_set_state_if_running_many(updates))
    by_id = {j.id: j for j in dialect.decode_jobs(rows)}
    for job in (retry, snooze, again):
        assert by_id[job.id].state is JobState.CANCELLED, job
        assert by_id[job.id].finalized_at is not None
        assert by_id[job.id].attempt == 1  # as claimed: the give-back is skipped
    assert by_id[done.id].state is JobState.COMPLETED


async def test_completion_without_returning(h: Harness) -> None:
    dialect = h.driver.dialect
    await insert_jobs(h, "conf_complete_nr", 2, queue="nrq")
    jobs = await claim(h, "nrq", 2)
    stmt = dialect.job_set_state_if_running_many(
        [JobStateUpdate(j.id, JobState.COMPLETED, finalized=True) for j in jobs],
        returning=False,
    )
    count = await h.execute(h.driver, stmt)
    assert count == 2
    for job in jobs:
        rows = await h.fetch(h.driver, dialect.job_get_by_id(job.id))
        assert dialect.decode_job(rows[0]).state is JobState.COMPLETED


async def test_job_get_missing(h: Harness) -> None:
    client = h.client()
    with pytest.raises(NotFoundError):
        await h.call(client.job_get, 2**62)


async def test_transaction_commits_or_rolls_back(h: Harness) -> None:
    with pytest.raises(RuntimeError, match="undo"):
        async with h.transaction() as tx:
            await h.fetch(tx, insert_stmt(h, "conf_tx_undo", 2))
            assert await h.count_jobs("conf_tx_undo") == 0  # not yet visible elsewhere
            raise RuntimeError("undo")
    assert await h.count_jobs("conf_tx_undo") == 0
    async with h.transaction() as tx:
        await h.fetch(tx, insert_stmt(h, "conf_tx_keep", 2))
        await h.fetch(tx, insert_stmt(h, "conf_tx_keep", 1))
    assert await h.count_jobs("conf_tx_keep") == 3
    # The driver is usable afterwards (the connection went back clean).
    await h.fetch(h.driver, h.driver.dialect.stmt("ping"))
    assert h.driver.stats.resets == 0


def _table(h: Harness) -> str:
    return f'"{h.env.schema}".conf_script' if h.env.schema else "conf_script"


async def test_execute_script(h: Harness) -> None:
    table = _table(h)
    await h.call(
        h.driver.execute_script,
        f"CREATE TABLE {table} (v text);\n"
        f"INSERT INTO {table} (v) VALUES ('50%; a semicolon');\n"
        f"INSERT INTO {table} (v) VALUES ('two');\n",
    )
    rows = await h.fetch(h.driver, Statement(Query("conf_read", f"SELECT v FROM {table}"), {}))
    assert sorted(r[0] for r in rows) == ["50%; a semicolon", "two"]


async def test_errors_are_translated(h: Harness) -> None:
    bad = Statement(Query("conf_bad", "SELECT * FROM conf_no_such_table"), {})
    with pytest.raises(DriverError) as info:
        await h.fetch(h.driver, bad)
    assert info.value.__cause__ is not None
    # The failure left nothing behind: the next statement works.
    assert await h.fetch(h.driver, h.driver.dialect.stmt("ping")) == [(1,)]
