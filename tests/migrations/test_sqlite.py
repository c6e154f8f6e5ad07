"""The Migrator on SQLite: bookkeeping, targets, refusal, concurrency and the CLI.

The SQLite schema itself is compared with River's in tests/sqlite/test_migrations.py.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from riverboat import Client, MigrationError, QueueConfig, Workers
from riverboat.drivers._sqlite_module import sqlite_module
from riverboat.drivers.sqlite import SqliteDriver
from riverboat.migrations import LATEST_VERSION, Migrator, require_current
from tests.migrations import RIVERBOAT_LATEST

ALL = list(range(1, LATEST_VERSION + 1))
ROOT = Path(__file__).resolve().parents[2]


def migration_rows(path: Path) -> list[tuple[Any, ...]]:
    # The driver's own SQLite library, never a second copy: POSIX locks belong to the
    # process, so when one library closes the file it drops the other's locks, and the
    # two then disagree about the WAL (seen as stale reads in the full suite).
    conn = sqlite_module().connect(path)
    with closing(conn):
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "river_migration" not in tables:
            return []
        cols = [r[1] for r in conn.execute("PRAGMA table_info(river_migration)")]
        select = "line, version" if "line" in cols else "version"
        rows: list[tuple[Any, ...]] = conn.execute(
            f"SELECT {select} FROM river_migration ORDER BY version"
        ).fetchall()
        return rows


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "m.sqlite3"


def test_up_down_and_bookkeeping(db: Path) -> None:
    with SqliteDriver(f"sqlite:///{db}") as driver:
        migrator = Migrator(driver)
        assert migrator.current_version() == 0
        assert migrator.up(4) == [1, 2, 3, 4]
        assert migration_rows(db) == [(1,), (2,), (3,), (4,)]  # no line column before 005
        assert migrator.up() == [5, 6, 7, 8]
        assert migration_rows(db) == [("main", v) for v in ALL]
        assert [i.applied for i in migrator.list()] == [True] * 8
        assert all(i.applied_at is not None and i.applied_at.tzinfo for i in migrator.list())
        assert migrator.down() == [8]
        assert migrator.down(4) == [7, 6, 5]
        assert migration_rows(db) == [(1,), (2,), (3,), (4,)]
        with pytest.raises(MigrationError, match="not applied"):
            migrator.down(6)
        assert migrator.down(0) == [4, 3, 2, 1]
        assert migration_rows(db) == []
        assert migrator.up() == ALL
        assert require_current(driver) == 8


def test_workflow_indexes_lost_to_rivers_rebuild_come_back_by_down_and_up(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """River's 008 rebuilds river_job, dropping riverboat's line-6 indexes with it when
    that line was applied first; docs/operations.md says a down and up of that version
    puts them back (the down must not fail on indexes that are gone). `migrate validate`
    and a client's start say so."""

    def start_warns() -> list[str]:
        caplog.clear()
        queues = {"default": QueueConfig(max_workers=1)}
        with Client(f"sqlite:///{db}", queues=queues, workers=Workers()) as client:
            client.start()
            client.stop()
        return [r.getMessage() for r in caplog.records if "indexes missing" in r.getMessage()]

    def ours() -> list[str]:
        with closing(sqlite_module().connect(db)) as conn:
            rows = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'riverboat_job%'"
            )
            return sorted(r[0] for r in rows)

    from tests.cli_in_process import cli_in_process

    indexes = ["riverboat_job_workflow_id_idx", "riverboat_job_workflow_task_idx"]
    with SqliteDriver(f"sqlite:///{db}") as driver:
        main, riverboat = Migrator(driver), Migrator(driver, line="riverboat")
        main.up(7)
        riverboat.up()
        assert ours() == indexes and riverboat.lost_indexes() == []
        assert main.up() == [8]
        assert ours() == []
        assert riverboat.lost_indexes() == [(6, name) for name in indexes]
        assert start_warns() == [
            f"riverboat's riverboat line 006: indexes missing ({', '.join(indexes)}), "
            "dropped when River's migration rebuilt river_job; workflow lookups read the "
            "whole table until they are back: run `riverboat migrate down --line riverboat "
            "--target-version 5`, then `riverboat migrate up`"
        ]
        # `migrate validate` says so, and what to run (exit 1).
        told = cli_in_process("migrate", "validate", "--database-url", f"sqlite:///{db}")
        assert told.returncode == 1, told
        assert told.stdout.strip() == (
            f"riverboat line 006: indexes missing ({', '.join(indexes)}), dropped when "
            "River's migration rebuilt river_job; run `riverboat migrate down --line "
            "riverboat --target-version 5`, then `riverboat migrate up`"
        )
        from_6 = list(range(RIVERBOAT_LATEST, 5, -1))  # the version with them, and later
        assert riverboat.down(5) == from_6
        assert riverboat.up() == from_6[::-1]
        assert ours() == indexes and riverboat.lost_indexes() == []
        assert start_warns() == []
        assert (
            cli_in_process("migrate", "validate", "--database-url", f"sqlite:///{db}").returncode
            == 0
        )


def test_legacy_table_upgrade(db: Path) -> None:
    with SqliteDriver(f"sqlite:///{db}") as driver:
        Migrator(driver).up(4)
    with closing(sqlite_module().connect(db)) as conn, conn:
        conn.execute("UPDATE river_migration SET created_at = '2024-01-02 03:04:05'")
    with SqliteDriver(f"sqlite:///{db}") as driver:
        migrator = Migrator(driver)
        assert migrator.current_version() == 4
        assert migrator.up() == [5, 6, 7, 8]
        first = migrator.list()[0]
        assert first.applied_at is not None
        assert first.applied_at.isoformat() == "2024-01-02T03:04:05+00:00"


def test_newer_version_refused(db: Path) -> None:
    with SqliteDriver(f"sqlite:///{db}") as driver:
        migrator = Migrator(driver)
        migrator.up()
        with closing(sqlite_module().connect(db)) as conn, conn:
            conn.execute("INSERT INTO river_migration (line, version) VALUES ('main', 99)")
        assert migrator.current_version() == 99
        for call in (migrator.up, migrator.down, migrator.list, lambda: require_current(driver)):
            with pytest.raises(MigrationError, match="newer"):
                call()


def test_require_current_below_6(db: Path) -> None:
    with SqliteDriver(f"sqlite:///{db}") as driver:
        Migrator(driver).up(5)
        with pytest.raises(MigrationError, match="riverboat migrate up"):
            require_current(driver)


def test_attached_schema_is_read_in_its_own_database(tmp_path: Path) -> None:
    main = tmp_path / "main.sqlite3"
    jobs = tmp_path / "jobs.sqlite3"
    # The main database at the latest version must not make the attached one look migrated.
    with SqliteDriver(f"sqlite:///{main}") as driver:
        Migrator(driver).up()
    with SqliteDriver(f"sqlite:///{main}", schema="jobs", attach={"jobs": str(jobs)}) as driver:
        migrator = Migrator(driver)
        assert migrator.current_version() == 0
        assert migrator.up(3) == [1, 2, 3]
        assert migrator.current_version() == 3
    assert migration_rows(jobs) == [(1,), (2,), (3,)]
    assert migration_rows(main) == [("main", v) for v in ALL]


def _up_in_process(url: str, barrier: Any, results: Any) -> None:
    try:
        with SqliteDriver(url) as driver:
            barrier.wait(timeout=30)
            results.put(("ok", Migrator(driver).up()))
    except Exception as exc:  # reported to the parent, which fails the test
        results.put(("error", repr(exc)))


def test_concurrent_up_from_processes(db: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    workers = 4
    barrier = ctx.Barrier(workers)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_up_in_process, args=(f"sqlite:///{db}", barrier, results))
        for _ in range(workers)
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    assert [kind for kind, _ in outcomes] == ["ok"] * workers, outcomes
    assert sorted(v for _, versions in outcomes for v in versions) == ALL
    assert migration_rows(db) == [("main", v) for v in ALL]


def test_cli(db: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["DATABASE_URL"] = f"sqlite:///{db}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "riverboat.cli", "migrate", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )

    up = run("up")
    assert up.returncode == 0, up.stderr
    assert up.stdout.splitlines()[-1] == f"current version: 8 (latest {LATEST_VERSION})"
    listing = run("list")
    assert listing.returncode == 0  # River's 8 versions and riverboat's line, all applied
    assert listing.stdout.count("* 0") == 8 + RIVERBOAT_LATEST
    sql = run("get-sql", "--version", "7")
    assert sql.returncode == 0 and "river_notification" in sql.stdout
    assert "jsonb" in sql.stdout  # the SQLite files, picked from the URL
    down = run("down", "--target-version", "0")
    assert down.returncode == 0, down.stderr
    assert migration_rows(db) == []
