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
