"""Errors a newcomer meets first, the same from every driver: a database that River's
migrations never ran on, and a URL the server refuses."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverboat import DriverError, MigrationError, NotMigratedError
from tests.drivers.conftest import DriverCase
from tests.drivers.harness import Env
from tests.runtime.dbs import Db, any_db  # noqa: F401


@pytest.fixture
def bare_env(case: DriverCase, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    """Where the case's database is, with no migration applied."""
    if case.dialect == "sqlite":
        yield Env(f"sqlite:///{tmp_path / 'bare.sqlite3'}", None)
        return
    import psycopg

    pg_url: str = request.getfixturevalue("pg_url")
    schema = "bare_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield Env(pg_url, schema)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def test_unmigrated_database_says_run_migrate_up(case: DriverCase, bare_env: Env) -> None:
    harness = case.harness(bare_env)
    harness.driver = await harness.open()
    try:
        client = harness.client()
        for call in (client.job_list, lambda: client.insert({"n": 1}, kind="not_migrated")):
            with pytest.raises(NotMigratedError) as info:
                await harness.call(call)
            message = str(info.value)
            assert "river_job" in message and "run `riverboat migrate up`" in message
            # One error type answers both questions a caller may ask.
            assert isinstance(info.value, DriverError) and isinstance(info.value, MigrationError)
            assert info.value.__cause__ is not None  # the database's own error, kept
    finally:
        await harness.close()


async def test_a_sqlite_file_that_cannot_be_opened_is_named(tmp_path: Path) -> None:
    """SQLite's own message, "unable to open database file", named neither the file nor
    why; a directory that doesn't exist (a typo, or %20 in a URL, which is not decoded)
    is the usual reason."""
    import riverboat

    missing = tmp_path / "no such dir" / "app.sqlite3"
    expected = f"cannot open the SQLite file {missing}; its directory {missing.parent} does not"
    with pytest.raises(DriverError, match=re.escape(expected)) as info:
        with riverboat.Client(f"sqlite:///{missing}") as client:
            client.insert({}, kind="probe")
    assert info.value.__cause__ is not None  # sqlite3's error, kept
    with pytest.raises(DriverError, match=re.escape(expected)):
        async with riverboat.AsyncClient(f"sqlite:///{missing}") as async_client:
            await async_client.insert({}, kind="probe")
    assert not missing.parent.exists()  # nothing was created on the way


def test_a_missing_riverboat_table_says_to_apply_riverboats_line(any_db: Db) -> None:  # noqa: F811
    """A table of riverboat's own migration line missing (a database River migrated)
    is a NotMigratedError too, naming that line: it was the database's raw error,
    which the dashboard's pages told from a database that was down by its text."""
    import riverboat

    any_db.execute("DROP TABLE riverboat_client")
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        with pytest.raises(NotMigratedError) as info:
            client.workers_list()
    message = str(info.value)
    assert "riverboat_client" in message and "riverboat's migration line" in message
    assert "run `riverboat migrate up`" in message
