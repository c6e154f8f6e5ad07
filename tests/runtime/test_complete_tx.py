"""``job_complete_tx``: a job completed in the caller's transaction, with its side
effects, on Postgres and SQLite (River's ``JobCompleteTx``)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

import riverboat
from riverboat import InvalidInputError, Job, JobState, NotFoundError, QueueConfig, Workers
from tests.runtime.dbs import Db, any_db  # noqa: F401


def _client(db: Db, workers: Workers) -> riverboat.Client:
    return riverboat.Client(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_poll_interval=0.1,
    )


def test_completion_commits_with_side_effects(
    any_db: Db,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="riverboat.executor")
    db = any_db
    db.execute("CREATE TABLE side_effects (job_id bigint, note text)")
    workers = Workers()
    client_box: list[riverboat.Client] = []
    returned: dict[str, Any] = {}

    # A retry an hour away, so the drain doesn't run the rolled-back job again.
    @workers.register("charge", next_retry=lambda job: job.row.created_at + timedelta(hours=1))
    def charge(job: Job[Any]) -> None:
        job.set_metadata("charged_by", "worker")
        with db.connect() as conn:
            conn.execute(
                "INSERT INTO side_effects VALUES (%s, %s)"
                if db.dialect == "postgres"
                else "INSERT INTO side_effects VALUES (?, ?)",
                (job.id, job.args["mode"]),
            )
            row = client_box[0].job_complete_tx(conn, job)
            returned[job.args["mode"]] = row
            if job.args["mode"] == "rollback":
                conn.rollback()
                raise RuntimeError("payment failed after all")
            conn.commit()
        if job.args["mode"] == "raise_after":
            raise RuntimeError("an error after the commit changes nothing")

    with _client(db, workers) as client:
        client_box.append(client)
        ok = client.insert({"mode": "ok"}, kind="charge").job.id
        after = client.insert({"mode": "raise_after"}, kind="charge").job.id
        rolled = client.insert({"mode": "rollback"}, kind="charge").job.id
        client.run_until_idle()
        rows = {job_id: client.job_get(job_id) for job_id in (ok, after, rolled)}

    # Inside the transaction the statement already returned the completed row.
    assert returned["ok"].state is JobState.COMPLETED
    assert returned["ok"].finalized_at is not None
    assert returned["ok"].metadata["charged_by"] == "worker"
    for job_id in (ok, after):
        assert rows[job_id].state is JobState.COMPLETED
        assert rows[job_id].errors == []
        assert rows[job_id].metadata["charged_by"] == "worker"
    # Rolled back: no side effect, and the executor recorded the worker's error.
    assert rows[rolled].state is JobState.RETRYABLE
    assert [e.error for e in rows[rolled].errors] == ["RuntimeError: payment failed after all"]
    effects = sorted(tuple(r) for r in db.execute("SELECT job_id, note FROM side_effects"))
    assert effects == sorted([(ok, "ok"), (after, "raise_after")])
    # The error after the commit is logged as what it may be, not as a job discarded or
    # to be retried (alerts fired for jobs that succeeded).
    about = [r.getMessage() for r in caplog.records if f"job {after} " in r.getMessage()]
    assert len(about) == 1 and "raised after job_complete_tx" in about[0], about
    assert "stays completed if that transaction committed" in about[0]


def test_refuses_a_job_that_is_not_running(any_db: Db) -> None:  # noqa: F811
    db = any_db
    with riverboat.Client(db.url, schema=db.schema) as client:
        inserted = client.insert({}, kind="idle").job
        with db.connect() as conn:
            with pytest.raises(InvalidInputError, match="must be running"):
                client.job_complete_tx(conn, inserted)
            with pytest.raises(InvalidInputError, match="Job"):
                client.job_complete_tx(conn, "nope")  # type: ignore[arg-type]
        # A row that says running but is gone (deleted) is not found.
        client.job_delete(inserted.id)
        from dataclasses import replace

        ghost = replace(inserted, state=JobState.RUNNING)
        with db.connect() as conn:
            with pytest.raises(NotFoundError):
                client.job_complete_tx(conn, ghost)


@pytest.mark.asyncio
async def test_async_client_completes_in_transaction(any_db: Db) -> None:  # noqa: F811
    """The async spelling, on the async client, with an async work function: the
    transaction is the caller's connection, driven from the loop."""
    db = any_db
    workers = Workers()
    box: list[riverboat.AsyncClient] = []
    done: list[JobState] = []

    @workers.register("async_charge")
    async def charge(job: Job[Any]) -> None:
        with db.connect() as conn:
            if db.dialect == "postgres":
                # The async Postgres driver needs an async connection.
                import psycopg

                async with await psycopg.AsyncConnection.connect(db.url) as aconn:
                    row = await box[0].job_complete_tx(aconn, job)
                    await aconn.commit()
            else:
                row = await box[0].job_complete_tx(conn, job)
                conn.commit()
        done.append(row.state)

    client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_poll_interval=0.1,
    )
    box.append(client)
    async with client:
        job_id = (await client.insert({}, kind="async_charge")).job.id
        await client.run_until_idle()
        stored = await client.job_get(job_id)
    assert done == [JobState.COMPLETED]
    assert stored.state is JobState.COMPLETED
