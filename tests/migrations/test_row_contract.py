"""The row contracts (riverboat.dialect._rows) against the migrated schema: every column of
``river_job`` and ``river_queue`` is in the spec with its type and nullability on each
database, the statements' column lists read them in the spec's order (and, on
Postgres, with the types the flow claim's row type declares), and the insert statements'
column lists (derived from the spec) name only migrated columns."""

from __future__ import annotations

from typing import Any

import pytest

from riverboat._sql import render_schema
from riverboat.dialect._pg_common import JOB_READER as PG_JOB_READER
from riverboat.dialect._pg_common import QUEUE_SELECT as PG_QUEUE_SELECT
from riverboat.dialect._rows import (
    JOB_COLUMNS,
    JOB_COPY_COLUMNS,
    JOB_INSERT_COLUMNS,
    QUEUE_COLUMNS,
    Column,
    insert_into_jobs,
)
from riverboat.dialect._sqlite_common import JOB_READER as SQLITE_JOB_READER
from riverboat.dialect._sqlite_common import QUEUE_SELECT as SQLITE_QUEUE_SELECT
from riverboat.dialect.postgres import COPY_COLUMNS, PostgresDialect
from riverboat.dialect.sqlite import SqliteDialect
from tests.sqlite.helpers import raw

TABLES = {"river_job": JOB_COLUMNS, "river_queue": QUEUE_COLUMNS}


def _pg_columns(conn: Any, schema: str, table: str) -> dict[str, tuple[str, bool]]:
    rows = conn.execute(
        """SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull
           FROM pg_attribute a
           WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped""",
        [f'"{schema}".{table}'],
    ).fetchall()
    return {name: (typ.replace(f"{schema}.", "S."), nullable) for name, typ, nullable in rows}


def _sqlite_columns(url: str, table: str) -> dict[str, tuple[str, bool]]:
    conn = raw(url)
    try:
        rows = conn.execute(f"PRAGMA table_info({table})").fetchall()
    finally:
        conn.close()
    # A primary key is NOT NULL whatever PRAGMA says (an integer one is the rowid).
    return {r[1]: (r[2].lower(), not (r[3] or r[5])) for r in rows}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_spec_is_the_migrated_postgres_table(conn: Any, pg_schema: str, table: str) -> None:
    expected = {c.name: (c.postgres, c.nullable) for c in TABLES[table]}
    assert _pg_columns(conn, pg_schema, table) == expected


@pytest.mark.parametrize("table", sorted(TABLES))
def test_spec_is_the_migrated_sqlite_table(sqlite_url: str, table: str) -> None:
    expected = {c.name: (c.sqlite, c.nullable) for c in TABLES[table]}
    assert _sqlite_columns(sqlite_url, table) == expected


INSERT_LISTS = {"insert": JOB_INSERT_COLUMNS, "copy": JOB_COPY_COLUMNS}


@pytest.mark.parametrize("name", sorted(INSERT_LISTS))
def test_insert_lists_name_migrated_postgres_columns(conn: Any, pg_schema: str, name: str) -> None:
    columns = INSERT_LISTS[name]
    assert len(set(columns)) == len(columns)
    assert set(columns) <= set(_pg_columns(conn, pg_schema, "river_job"))


@pytest.mark.parametrize("name", sorted(INSERT_LISTS))
def test_insert_lists_name_migrated_sqlite_columns(sqlite_url: str, name: str) -> None:
    columns = INSERT_LISTS[name]
    assert len(set(columns)) == len(columns)
    assert set(columns) <= set(_sqlite_columns(sqlite_url, "river_job"))


def test_insert_statements_write_the_spec_insert_list() -> None:
    head = render_schema(insert_into_jobs(), None)
    with_ids = render_schema(insert_into_jobs(("id", *JOB_INSERT_COLUMNS)), None)
    for dialect, name, expected in (
        (PostgresDialect(), "job_insert_many", head),
        (PostgresDialect(), "job_insert_one", head),
        (PostgresDialect(), "job_insert_many_ids", with_ids),
        (SqliteDialect(), "job_insert_many", head),
    ):
        assert expected in dialect.q[name].text, (dialect.name, name)
    assert COPY_COLUMNS == JOB_COPY_COLUMNS
    assert with_ids.startswith("INSERT INTO river_job (id, args, ")
    with pytest.raises(ValueError, match="not river_job columns"):
        insert_into_jobs(("args", "no_such_column"))


def _names(columns: tuple[Column, ...]) -> list[str]:
    return [c.name for c in columns]


def test_postgres_lists_read_in_spec_order_with_the_declared_types(
    conn: Any, pg_schema: str
) -> None:
    for table, select in (
        ("river_job", PG_JOB_READER.columns()),
        ("river_queue", PG_QUEUE_SELECT),
    ):
        view = f'"{pg_schema}".contract_{table}'
        conn.execute(f'CREATE VIEW {view} AS SELECT {select} FROM "{pg_schema}".{table}')
        read = conn.execute(
            """SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
               WHERE a.attrelid = %s::regclass AND a.attnum > 0 ORDER BY a.attnum""",
            [view],
        ).fetchall()
        assert [name for name, _ in read] == _names(TABLES[table])
        if table == "river_job":
            # The flow claim's function declares this row type; it must be what's read.
            assert ", ".join(f"{n} {t}" for n, t in read) == PG_JOB_READER.row_type()


def test_sqlite_lists_read_in_spec_order(sqlite_url: str) -> None:
    conn = raw(sqlite_url)
    try:
        for table, select in (
            ("river_job", SQLITE_JOB_READER.columns("river_job")),
            ("river_queue", SQLITE_QUEUE_SELECT),
        ):
            cursor = conn.execute(render_schema(f"SELECT {select} FROM <schema>{table}", None))
            assert [d[0] for d in cursor.description] == _names(TABLES[table])
    finally:
        conn.close()


_PG_JOB = """INSERT INTO "{schema}".river_job
    (args, attempt, attempted_at, attempted_by, errors, kind, max_attempts, metadata,
     queue, state, tags, unique_key, unique_states)
VALUES ('{{"n": 1}}', 1, now(), '{{c1}}', ARRAY['{{"attempt": 1, "error": "boom"}}'::jsonb],
        'k', 3, '{{"m": true}}', 'q', 'running', '{{t}}', '\\x0102', B'11110101')"""


def test_postgres_decode_job_fast_path_is_the_strict_one(conn: Any, pg_schema: str) -> None:
    conn.execute(_PG_JOB.format(schema=pg_schema))
    row = conn.execute(f'SELECT {PG_JOB_READER.columns()} FROM "{pg_schema}".river_job').fetchone()
    job = PG_JOB_READER.decode_job(None, row)
    assert (job.args, job.attempted_by, job.tags, job.unique_key) == (
        {"n": 1},
        ["c1"],
        ["t"],
        b"\x01\x02",
    )
    assert job.errors[0].error == "boom"
    assert job.decode_errors == ()
    assert PG_JOB_READER.salvage(row) == job


def test_sqlite_decode_job_fast_path_is_the_strict_one(sqlite_url: str) -> None:
    conn = raw(sqlite_url)
    try:
        conn.execute(
            "INSERT INTO river_job (args, attempt, attempted_at, attempted_by, errors, kind, "
            "max_attempts, metadata, queue, state, tags, unique_key, unique_states) "
            "VALUES (jsonb('{\"n\":1}'), 1, '2026-01-01 00:00:01.000', jsonb('[\"c1\"]'), "
            'jsonb(\'[{"attempt":1,"error":"boom"}]\'), \'k\', 3, jsonb(\'{"m":true}\'), '
            "'q', 'running', jsonb('[\"t\"]'), x'0102', 245)"
        )
        row = conn.execute(f"SELECT {SQLITE_JOB_READER.columns()} FROM river_job").fetchone()
    finally:
        conn.close()
    job = SQLITE_JOB_READER.decode_job(None, row)
    assert (job.args, job.attempted_by, job.tags, job.unique_key) == (
        {"n": 1},
        ["c1"],
        ["t"],
        b"\x01\x02",
    )
    assert job.errors[0].error == "boom"
    assert job.decode_errors == ()
    assert SQLITE_JOB_READER.salvage(row) == job
