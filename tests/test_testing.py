"""riverboat.testing: assertions on inserted jobs, work_job, and the plugin's fixtures."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, ClassVar

import psycopg
import pytest

from riverboat import Client, EventKind, InsertOpts, Job, JobCancel, Workers
from riverboat.drivers.sqlite import SqliteDriver
from riverboat.testing import (
    ExpectedJob,
    create_migrated_postgres_schema,
    drop_postgres_schema,
    migrated_postgres_schema,
    require_inserted,
    require_many_inserted,
    require_not_inserted,
    work_job,
)


@dataclass
class SendEmail:
    kind: ClassVar[str] = "send_email"
    to: str
    subject: str = "hi"


workers = Workers()


@workers.register(SendEmail)
def send_email(job: Job[SendEmail]) -> None:
    if job.args.to.endswith(".invalid"):
        raise JobCancel("undeliverable")
    if job.args.to.startswith("flaky"):
        raise RuntimeError("smtp down")


@pytest.fixture
def riverboat_database_url(pg_url: str) -> str:
    """The suite's own server for the plugin's riverboat_schema fixture."""
    return pg_url


def test_require_inserted_on_sqlite_client(riverboat_sqlite: str) -> None:
    with Client(SqliteDriver(riverboat_sqlite)) as client:
        client.insert(SendEmail("ada@example.com"), InsertOpts(queue="mail", tags=["welcome"]))
        client.insert(SendEmail("bob@example.com"))
        job = require_inserted(client, SendEmail, {"to": "ada@example.com"}, queue="mail")
        assert job.tags == ["welcome"]
        require_inserted(client, "send_email", SendEmail("bob@example.com"), state="available")
        require_not_inserted(client, SendEmail, {"to": "eve@example.com"})
        with pytest.raises(AssertionError, match="found no"):
            require_inserted(client, SendEmail, {"to": "ada@example.com"}, queue="default")
        with pytest.raises(AssertionError, match="found 2"):
            require_inserted(client, SendEmail)
        with pytest.raises(AssertionError, match="expected no"):
            require_not_inserted(client, SendEmail, {"to": "bob@example.com"})
        rows = require_many_inserted(
            client,
            [ExpectedJob(SendEmail, {"to": "ada@example.com"}), ExpectedJob("send_email")],
        )
        assert [r.args["to"] for r in rows] == ["ada@example.com", "bob@example.com"]
        with pytest.raises(AssertionError, match="job 0"):
            require_many_inserted(
                client, [ExpectedJob(SendEmail, queue="x"), ExpectedJob("send_email")]
            )


def test_work_job_outcomes(riverboat_sqlite: str) -> None:
    with Client(SqliteDriver(riverboat_sqlite)) as client:
        ok = client.insert(SendEmail("ada@example.com")).job
        flaky = client.insert(SendEmail("flaky@example.com")).job
        bad = client.insert(SendEmail("x@example.invalid")).job
        done = work_job(client, workers, ok)
        assert done.outcome is EventKind.JOB_COMPLETED
        assert done.job.state == "completed" and done.job.attempt == 1
        failed = work_job(client, workers, flaky.id)
        assert failed.outcome is EventKind.JOB_FAILED
        assert failed.job.state in ("available", "retryable")
        assert "smtp down" in failed.job.errors[0].error
        assert work_job(client, workers, bad).job.state == "cancelled"
        with pytest.raises(AssertionError, match="cannot be worked: it is completed"):
            work_job(client, workers, ok)


def test_inside_the_tests_own_sqlite_transaction(riverboat_sqlite: str) -> None:
    path = riverboat_sqlite.removeprefix("sqlite:///")
    with Client(SqliteDriver(riverboat_sqlite)) as client:
        from riverboat.drivers._sqlite_module import sqlite_module

        conn = sqlite_module().connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN")
            client.insert_tx(conn, SendEmail("ada@example.com"))
            job = require_inserted(conn, SendEmail, {"to": "ada@example.com"})
            assert work_job(conn, workers, job).job.state == "completed"
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        require_not_inserted(client, SendEmail)
    assert sqlite3  # the stdlib module works the same when recent enough


def test_postgres_schema_fixture_and_transaction(
    riverboat_database_url: str, riverboat_schema: str
) -> None:
    with Client(riverboat_database_url, schema=riverboat_schema) as client:
        with psycopg.connect(riverboat_database_url) as conn:
            conn.execute(f'SET search_path TO "{riverboat_schema}"')
            with conn.transaction(force_rollback=True):
                client.insert_tx(conn, SendEmail("ada@example.com"))
                job = require_inserted(conn, SendEmail, {"to": "ada@example.com"})
                require_not_inserted(client, SendEmail)  # not committed: other sessions see none
                result = work_job(conn, workers, job)
                assert result.job.state == "completed"
                assert result.job.attempted_by == ["riverboat-test"]
                require_inserted(client, SendEmail, tx=conn, state="completed")
        require_not_inserted(client, SendEmail)  # rolled back


def _schema_exists(url: str, schema: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", [schema]
        ).fetchone()
    return bool(row and row[0])


def test_scratch_schemas_are_created_migrated_and_dropped(riverboat_database_url: str) -> None:
    url = riverboat_database_url
    schema = create_migrated_postgres_schema(url, "scratch_")
    try:
        assert schema.startswith("scratch_") and _schema_exists(url, schema)
        with Client(url, schema=schema) as client:
            assert client.job_list().jobs == []  # River's tables are there
    finally:
        drop_postgres_schema(url, schema)
    assert not _schema_exists(url, schema)
    with migrated_postgres_schema(url) as scoped:
        assert _schema_exists(url, scoped)
    assert not _schema_exists(url, scoped)


def test_plugin_is_registered(pytestconfig: Any) -> None:
    assert pytestconfig.pluginmanager.has_plugin("riverboat")
