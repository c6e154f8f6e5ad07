"""The bundled SQLite migrations produce River's SQLite schema, up and down."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from riverboat.drivers.sqlite import SqliteDriver
from riverboat.migrations import Migrator
from riverboat.migrations._files import load_bundles
from tests.sqlite.helpers import query, raw

# River's SQLite schema at version 8 (riverdriver/riversqlite), written out by hand:
# (name, declared type, NOT NULL, default, primary-key position) per column.
EXPECTED_COLUMNS: dict[str, list[tuple[str, str, int, str | None, int]]] = {
    "river_job": [
        ("id", "integer", 0, None, 1),
        ("args", "blob", 1, "jsonb('{}')", 0),
        ("attempt", "integer", 1, "0", 0),
        ("attempted_at", "timestamp", 0, None, 0),
        ("attempted_by", "blob", 0, None, 0),
        ("created_at", "timestamp", 1, "CURRENT_TIMESTAMP", 0),
        ("errors", "blob", 0, None, 0),
        ("finalized_at", "timestamp", 0, None, 0),
        ("kind", "text", 1, None, 0),
        ("max_attempts", "integer", 1, "25", 0),
        ("metadata", "blob", 1, "jsonb('{}')", 0),
        ("priority", "integer", 1, "1", 0),
        ("queue", "text", 1, "'default'", 0),
        ("state", "text", 1, "'available'", 0),
        ("scheduled_at", "timestamp", 1, "CURRENT_TIMESTAMP", 0),
        ("tags", "blob", 1, "jsonb('[]')", 0),
        ("unique_key", "blob", 0, None, 0),
        ("unique_states", "integer", 0, None, 0),
    ],
    "river_leader": [
        ("elected_at", "timestamp", 1, None, 0),
        ("expires_at", "timestamp", 1, None, 0),
        ("leader_id", "text", 1, None, 0),
        ("name", "text", 1, "'default'", 1),
    ],
    "river_migration": [
        ("line", "text", 1, None, 1),
        ("version", "integer", 1, None, 2),
        ("created_at", "timestamp", 1, "CURRENT_TIMESTAMP", 0),
    ],
    "river_notification": [
        ("id", "integer", 0, None, 1),
        ("created_at", "timestamp", 1, "datetime('now', 'subsec')", 0),
        ("payload", "text", 1, None, 0),
        ("topic", "text", 1, None, 0),
    ],
    "river_queue": [
        ("name", "text", 1, None, 1),
        ("created_at", "timestamp", 1, "CURRENT_TIMESTAMP", 0),
        ("metadata", "blob", 1, "jsonb('{}')", 0),
        ("paused_at", "timestamp", 0, None, 0),
        ("updated_at", "timestamp", 1, "CURRENT_TIMESTAMP", 0),
    ],
}

# Version 7 as River's 007 leaves it: max_attempts re-added last with its new default.
# (River's 008 down rebuilds the table with max_attempts next to kind again.)
_V7_JOB = [c for c in EXPECTED_COLUMNS["river_job"] if c[0] != "max_attempts"]
EXPECTED_COLUMNS_V7_UP = {
    **EXPECTED_COLUMNS,
    "river_job": [*_V7_JOB, ("max_attempts", "integer", 1, "25", 0)],
}

# Tables whose rowid is AUTOINCREMENT (never reused): River's 007 outbox, and river_job
# from 008 on.
EXPECTED_AUTOINCREMENT = ["river_job", "river_notification"]

# (table, unique, partial, columns) per named index.
EXPECTED_INDEXES = {
    "river_job_kind": ("river_job", 0, 0, ["kind"]),
    "river_job_state_and_finalized_at_index": ("river_job", 0, 1, ["state", "finalized_at"]),
    "river_job_prioritized_fetching_index": (
        "river_job",
        0,
        0,
        ["state", "queue", "priority", "scheduled_at", "id"],
    ),
    "river_job_unique_idx": ("river_job", 1, 1, ["unique_key"]),
    "river_notification_created_at_idx": ("river_notification", 0, 0, ["created_at"]),
    "river_notification_topic_id_idx": ("river_notification", 0, 0, ["topic", "id"]),
}

EXPECTED_CHECKS = {
    "river_job": [
        "finalized_or_finalized_at_null",
        "kind_length",
        "priority_in_range",
        "queue_length",
        "state_valid",
    ],
    "river_leader": ["leader_id_length", "name_length"],
    "river_migration": ["line_length", "version_gte_1"],
    "river_notification": ["topic_length"],
    "river_queue": [],
}


def _norm(sql: str | None) -> str:
    return re.sub(r"[\s\"]+", "", re.sub(r"--[^\n]*", "", sql or "")).lower()


def schema_shape(url: str, db: str = "main") -> dict[str, Any]:
    """Tables, columns, named indexes and CHECK names of a database, comparable."""
    conn = raw(url)
    try:
        shape: dict[str, Any] = {"tables": {}, "indexes": {}, "checks": {}, "autoincrement": []}
        rows = conn.execute(
            f'SELECT type, name, tbl_name, sql FROM "{db}".sqlite_master '
            "WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall()
        for kind, name, table, sql in rows:
            if kind == "table":
                cols = conn.execute(f'PRAGMA "{db}".table_info("{name}")').fetchall()
                shape["tables"][name] = [(c[1], c[2].lower(), c[3], c[4], c[5]) for c in cols]
                shape["checks"][name] = sorted(re.findall(r"constraint(\w+)check", _norm(sql)))
                if "autoincrement" in _norm(sql):
                    shape["autoincrement"].append(name)
            elif kind == "index":
                listed = {
                    r[1]: r for r in conn.execute(f'PRAGMA "{db}".index_list("{table}")').fetchall()
                }
                cols = [
                    r[2] for r in conn.execute(f'PRAGMA "{db}".index_info("{name}")').fetchall()
                ]
                shape["indexes"][name] = (table, listed[name][2], listed[name][4], cols)
        shape["autoincrement"].sort()
        return shape
    finally:
        conn.close()


def test_latest_schema_is_rivers(sqlite_url: str) -> None:
    # The fixture applied both lines: River's part is River's, riverboat's is apart.
    shape = schema_shape(sqlite_url)
    own = sorted(name for name in shape["tables"] if name.startswith("riverboat_"))
    assert own == ["riverboat_client", "riverboat_periodic_job"]
    shape = {
        key: part
        if isinstance(part, list)
        else {k: v for k, v in part.items() if not k.startswith("riverboat_")}
        for key, part in shape.items()
    }
    assert shape["tables"] == EXPECTED_COLUMNS
    assert shape["indexes"] == EXPECTED_INDEXES
    assert shape["checks"] == EXPECTED_CHECKS
    assert shape["autoincrement"] == EXPECTED_AUTOINCREMENT
    versions = query(sqlite_url, "SELECT line, version FROM river_migration ORDER BY line, version")
    assert versions == [("main", v) for v in range(1, 9)] + [
        ("riverboat", v) for v in sorted(load_bundles("sqlite", "riverboat"))
    ]


def test_unique_index_predicate_follows_unique_states(sqlite_url: str) -> None:
    conn = raw(sqlite_url)
    try:
        insert = (
            "INSERT INTO river_job (kind, state, finalized_at, unique_key, unique_states) "
            "VALUES ('k', ?, ?, x'01', ?)"
        )
        # 245 = every state but cancelled and discarded.
        conn.execute(insert, ("completed", "2026-01-01 00:00:00.000", 245))
        with pytest.raises(Exception, match="UNIQUE"):
            conn.execute(insert, ("available", None, 245))
        # A cancelled row is outside the index, so it never conflicts.
        conn.execute(insert, ("cancelled", "2026-01-01 00:00:00.000", 245))
        conn.execute("DELETE FROM river_job")
        conn.execute(insert, ("available", None, 1))
        conn.execute(insert, ("running", None, 1))  # running (64) is not in mask 1
        with pytest.raises(Exception, match="CHECK"):
            conn.execute(insert, ("bogus", None, None))
    finally:
        conn.close()


def test_down_to_zero_and_up_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cycle.sqlite3'}"
    with SqliteDriver(url) as driver:
        migrator = Migrator(driver)
        migrator.up()
        migrator.down(target_version=0)
        assert schema_shape(url)["tables"] == {}
        migrator.up()
    assert schema_shape(url)["tables"] == EXPECTED_COLUMNS


def test_006_rows_are_converted_to_jsonb(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'v6.sqlite3'}"
    with SqliteDriver(url) as driver:
        migrator = Migrator(driver)
        migrator.up(target_version=6)
        conn = raw(url)
        try:
            conn.execute(
                "INSERT INTO river_job (args, kind, max_attempts, metadata, tags, attempted_by) "
                "VALUES ('{\"n\":1}', 'k', 3, '{\"m\":true}', '[\"t1\"]', '[\"c1\"]')"
            )
            conn.execute(
                "INSERT INTO river_queue (name, metadata, updated_at) "
                "VALUES ('q', '{\"a\":1}', '2026-01-01 00:00:00')"
            )
        finally:
            conn.close()
        migrator.up()
    row = query(
        url,
        "SELECT typeof(args), json(args), json(metadata), json(tags), json(attempted_by), "
        "errors, max_attempts FROM river_job",
    )
    assert row == [("blob", '{"n":1}', '{"m":true}', '["t1"]', '["c1"]', None, 3)]
    assert query(url, "SELECT json(metadata), typeof(metadata) FROM river_queue") == [
        ('{"a":1}', "blob")
    ]


def test_007_down_restores_json_text(sqlite_url: str) -> None:
    conn = raw(sqlite_url)
    try:
        conn.execute("INSERT INTO river_job (kind, args) VALUES ('k', jsonb('{\"x\":2}'))")
    finally:
        conn.close()
    with SqliteDriver(sqlite_url) as driver:
        Migrator(driver).down(target_version=6)
    assert query(sqlite_url, "SELECT typeof(args), args, max_attempts FROM river_job") == [
        ("text", '{"x":2}', 25)
    ]


def test_attached_schema(tmp_path: Path) -> None:
    main = tmp_path / "main.sqlite3"
    other = tmp_path / "jobs.sqlite3"
    url = f"sqlite:///{main}"
    with SqliteDriver(url, schema="jobs", attach={"jobs": str(other)}) as driver:
        Migrator(driver).up()
    assert schema_shape(f"sqlite:///{other}")["tables"] == EXPECTED_COLUMNS
    assert schema_shape(url)["tables"] == {}


_JOB_COLUMNS = (
    "id, json(args), attempt, attempted_at, json(attempted_by), created_at, json(errors), "
    "finalized_at, kind, max_attempts, json(metadata), priority, queue, state, scheduled_at, "
    "json(tags), unique_key, unique_states"
)


def _seed_jobs(url: str) -> list[Any]:
    conn = raw(url)
    try:
        conn.execute(
            "INSERT INTO river_job (id, args, attempt, attempted_at, attempted_by, errors, kind, "
            "max_attempts, metadata, priority, queue, state, tags, unique_key, unique_states) "
            "VALUES (5, jsonb('{\"n\":1}'), 2, '2026-01-01 00:00:01.000', jsonb('[\"c1\"]'), "
            'jsonb(\'[{"attempt":1,"error":"boom"}]\'), \'k\', 3, jsonb(\'{"m":true}\'), 2, '
            "'q', 'retryable', jsonb('[\"t\"]'), x'0102', 245)"
        )
        conn.execute(
            "INSERT INTO river_job (id, kind, state, finalized_at) "
            "VALUES (6, 'k2', 'completed', '2026-01-01 00:00:02.000')"
        )
    finally:
        conn.close()
    return query(url, f"SELECT {_JOB_COLUMNS} FROM river_job ORDER BY id")


def _next_id_after_deleting_the_newest(url: str) -> tuple[int, int]:
    conn = raw(url)
    try:
        newest = conn.execute("SELECT max(id) FROM river_job").fetchone()[0]
        conn.execute("DELETE FROM river_job WHERE id = ?", (newest,))
        conn.execute("INSERT INTO river_job (kind) VALUES ('k3')")
        return int(newest), int(conn.execute("SELECT max(id) FROM river_job").fetchone()[0])
    finally:
        conn.close()


def test_008_up_keeps_every_row_and_ids_are_never_reused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'v7.sqlite3'}"
    with SqliteDriver(url) as driver:
        migrator = Migrator(driver)
        migrator.up(target_version=7)
        assert schema_shape(url)["tables"] == EXPECTED_COLUMNS_V7_UP
        before = _seed_jobs(url)
        # Version 7: SQLite's default rowid allocator gives the deleted id out again.
        deleted, reused = _next_id_after_deleting_the_newest(url)
        assert reused == deleted
        assert migrator.up() == [8]
    assert query(url, f"SELECT {_JOB_COLUMNS} FROM river_job WHERE id < {deleted} ORDER BY id") == [
        row for row in before if row[0] < deleted
    ]
    shape = schema_shape(url)
    assert shape["tables"] == EXPECTED_COLUMNS
    assert shape["indexes"] == EXPECTED_INDEXES
    assert shape["checks"] == EXPECTED_CHECKS
    assert shape["autoincrement"] == EXPECTED_AUTOINCREMENT
    # Version 8: the high-water mark survives the delete, as with a Postgres sequence.
    deleted, fresh = _next_id_after_deleting_the_newest(url)
    assert fresh == deleted + 1
    assert query(url, "SELECT seq FROM sqlite_sequence WHERE name = 'river_job'") == [(fresh,)]


def test_008_down_keeps_every_row_and_drops_autoincrement(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'v8.sqlite3'}"
    with SqliteDriver(url) as driver:
        migrator = Migrator(driver)
        migrator.up()
        before = _seed_jobs(url)
        assert migrator.down() == [8]
        assert migrator.current_version() == 7
    after = query(url, f"SELECT {_JOB_COLUMNS} FROM river_job ORDER BY id")
    assert after == before
    shape = schema_shape(url)
    # River's down rebuilds the table with max_attempts next to kind, as 008 has it.
    assert shape["tables"] == EXPECTED_COLUMNS
    assert shape["indexes"] == EXPECTED_INDEXES
    assert shape["autoincrement"] == ["river_notification"]
    assert query(url, "SELECT name FROM sqlite_sequence WHERE name = 'river_job'") == []
    deleted, reused = _next_id_after_deleting_the_newest(url)
    assert reused == deleted
    with SqliteDriver(url) as driver:
        assert Migrator(driver).up() == [8]
    assert schema_shape(url)["autoincrement"] == EXPECTED_AUTOINCREMENT


def master_sql(url: str) -> dict[str, str]:
    """Every object's SQL in sqlite_master, comments, spacing and quoting aside."""
    rows = query(url, "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")
    return {name: _norm(sql) for name, sql in rows}


def _river_sqlite_migrations() -> Path:
    """River's SQLite migration files: a checkout in /tmp/river, else River 0.51.2's
    riversqlite module in the Go module cache (`go mod download
    github.com/riverqueue/river/riverdriver/riversqlite@v0.51.2`)."""
    checkout = Path("/tmp/river/riverdriver/riversqlite/migration/main")
    if checkout.is_dir():
        return checkout
    cache = os.environ.get("GOMODCACHE") or str(Path.home() / "go" / "pkg" / "mod")
    module = "github.com/riverqueue/river/riverdriver/riversqlite@v0.51.2"
    return Path(cache) / module / "migration" / "main"


RIVER_SQLITE = _river_sqlite_migrations()


@pytest.mark.skipif(not RIVER_SQLITE.is_dir(), reason="River's source is not checked out")
def test_matches_rivers_own_files_at_every_version(tmp_path: Path) -> None:
    """Apply River's SQL and riverboat's side by side; the schemas agree at each version."""
    ours_url = f"sqlite:///{tmp_path / 'ours.sqlite3'}"
    theirs_url = f"sqlite:///{tmp_path / 'theirs.sqlite3'}"
    theirs = raw(theirs_url)
    try:
        with SqliteDriver(ours_url) as driver:
            migrator = Migrator(driver)
            for version, path in enumerate(sorted(RIVER_SQLITE.glob("*.up.sql")), start=1):
                migrator.up(target_version=version)
                theirs.executescript(path.read_text().replace("/* TEMPLATE: schema */", ""))
                assert schema_shape(ours_url) == schema_shape(theirs_url), path.name
                assert master_sql(ours_url) == master_sql(theirs_url), path.name
            # And back down, newest first, as far as River's own down files go.
            downs = sorted(RIVER_SQLITE.glob("*.down.sql"), reverse=True)
            for path in downs[:-1]:  # 001's down drops river_migration: nothing to compare
                migrator.down()
                theirs.executescript(path.read_text().replace("/* TEMPLATE: schema */", ""))
                assert schema_shape(ours_url) == schema_shape(theirs_url), path.name
                assert master_sql(ours_url) == master_sql(theirs_url), path.name
    finally:
        theirs.close()
