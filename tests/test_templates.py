"""The suite's databases are clones of a template migrated once per session
(tests/conftest.py): a clone must be what running every migration makes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest

from riverboat.drivers._sqlite_module import sqlite_module
from tests.migrations.catalog import snapshot
from tests.templates import SchemaCloner, create_migrated_schema, drop_schema, migrate_sqlite_file


@pytest.fixture
def migrated_schema(pg_url: str) -> Iterator[str]:
    schema = create_migrated_schema(pg_url)
    yield schema
    drop_schema(pg_url, schema)


def _state(conn: psycopg.Connection[Any], schema: str) -> dict[str, Any]:
    return {
        "catalog": snapshot(conn, schema),
        "migrations": conn.execute(
            f'SELECT line, version FROM "{schema}".river_migration ORDER BY line, version'
        ).fetchall(),
        "sequences": [
            conn.execute(f'SELECT last_value, is_called FROM "{schema}".{name}').fetchone()
            for name in ("river_job_id_seq", "river_notification_id_seq")
        ],
        "rows": [
            conn.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()
            for table in ("river_job", "river_leader", "river_queue", "river_notification")
        ],
    }


def test_pg_schema_is_a_migrated_schema(
    pg_url: str, pg_schema: str, migrated_schema: str, pg_schema_cloner: SchemaCloner
) -> None:
    # Our own cluster's pg_dump always works; an external server may be newer than the
    # local pg_dump, and then every schema is migrated (still compared below).
    if os.environ.get("RIVERBOAT_TEST_DATABASE_URL") is None:
        assert pg_schema_cloner.why_not is None, pg_schema_cloner.why_not
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert _state(conn, pg_schema) == _state(conn, migrated_schema)


def _planner_view(conn: psycopg.Connection[Any], schema: str) -> dict[str, Any]:
    """What the planner and autovacuum know of the schema's tables. (Not the changes
    counted on river_migration: the clone's inserts are counted whenever the cloner's
    backend reports them, at most once a second, and they are far below what would
    make autovacuum analyze the table.)"""
    return {
        "tables": conn.execute(
            """SELECT c.relname, c.relpages, c.reltuples, c.relallvisible,
                      pg_relation_size(c.oid) > 0,
                      CASE WHEN c.relname <> 'river_migration'
                           THEN coalesce(s.n_mod_since_analyze, 0) END
               FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
               WHERE c.relnamespace = %s::regnamespace AND c.relkind = 'r'
               ORDER BY c.relname""",
            [schema],
        ).fetchall(),
        "statistics": conn.execute(
            """SELECT count(*) FROM pg_statistic s JOIN pg_class c ON c.oid = s.starelid
               WHERE c.relnamespace = %s::regnamespace""",
            [schema],
        ).fetchone(),
    }


def test_a_schema_given_back_is_reused_as_a_fresh_clone(
    pg_url: str, migrated_schema: str, pg_schema_cloner: SchemaCloner
) -> None:
    """A test's rows, sequences, statistics and counted activity are gone when the next
    test gets the schema it gave back (tests/templates.py SchemaCloner.give_back)."""
    if not pg_schema_cloner.reuse or pg_schema_cloner.why_not is not None:
        pytest.skip("schemas are not reused on this server")
    schema = pg_schema_cloner.take()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        fresh = _planner_view(conn, schema)
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute(
            "INSERT INTO river_job (args, kind, state, finalized_at)"
            " SELECT '{}', 'k', 'completed', now() FROM generate_series(1, 500)"
        )
        conn.execute("INSERT INTO river_queue (name, updated_at) VALUES ('q', now())")
        conn.execute("SELECT nextval('river_notification_id_seq')")
        conn.execute("ANALYZE river_job")
        conn.execute("ANALYZE river_leader")  # an empty table, analyzed: reltuples 0
        conn.execute("DELETE FROM river_job WHERE id <= 10")
        conn.execute("SELECT pg_stat_force_next_flush()")
    pg_schema_cloner.give_back(schema)
    again = pg_schema_cloner.take()
    try:
        assert again == schema
        with psycopg.connect(pg_url, autocommit=True) as conn:
            assert _state(conn, again) == _state(conn, migrated_schema)
            assert _planner_view(conn, again) == fresh
    finally:
        pg_schema_cloner.give_back(again)


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE river_job ADD COLUMN extra int",
        "ALTER TABLE river_job SET (autovacuum_enabled = false)",
        "CREATE INDEX extra ON river_job (kind, queue)",
        "DROP INDEX river_job_kind",
        "CREATE TABLE side (id int)",
        "ALTER TYPE river_job_state ADD VALUE 'extra'",
        "CREATE FUNCTION extra() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "DELETE FROM river_migration WHERE version = (SELECT max(version) FROM river_migration)",
        "ALTER SEQUENCE river_job_id_seq INCREMENT BY 2",
    ],
)
def test_a_schema_whose_catalog_changed_is_dropped(
    pg_url: str, pg_schema_cloner: SchemaCloner, change: str
) -> None:
    if pg_schema_cloner.why_not is not None:
        pytest.skip(pg_schema_cloner.why_not)
    schema = pg_schema_cloner.take()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute(change)
    pg_schema_cloner.give_back(schema)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        gone = conn.execute("SELECT to_regnamespace(%s) IS NULL", [schema]).fetchone()
    assert gone == (True,), change


def test_a_schema_a_client_still_uses_is_dropped(
    pg_url: str, pg_schema_cloner: SchemaCloner
) -> None:
    """A connection opened during the test and still open when it ends (a pool left
    open, a process still running) could go on working in the schema."""
    if pg_schema_cloner.why_not is not None:
        pytest.skip(pg_schema_cloner.why_not)
    schema = pg_schema_cloner.take()
    with psycopg.connect(pg_url, autocommit=True) as left_open:
        left_open.execute(f'SET search_path TO "{schema}"')
        pg_schema_cloner.give_back(schema)
        gone = left_open.execute("SELECT to_regnamespace(%s) IS NULL", [schema]).fetchone()
    assert gone == (True,)


def _sqlite_shape(path: Path) -> list[tuple[Any, ...]]:
    with closing(sqlite_module().connect(path)) as conn:
        return sorted(
            conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
            + conn.execute(
                "SELECT 'migration', line, version, NULL FROM river_migration"
            ).fetchall()
            + [("journal_mode", *conn.execute("PRAGMA journal_mode").fetchone(), None, None)]
        )


def test_sqlite_url_is_a_migrated_file(sqlite_url: str, tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.sqlite3"
    migrate_sqlite_file(migrated)
    assert _sqlite_shape(Path(sqlite_url.removeprefix("sqlite:///"))) == _sqlite_shape(migrated)
