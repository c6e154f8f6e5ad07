"""River's migrate flags and exit codes through ``riverboat migrate``, on both dialects.

``validate``, ``--dry-run``, ``--show-sql``, ``--max-steps``, ``--target-version`` and
``--line`` are River's (``river migrate-up``, ``migrate-down``, ``validate``; the
idempotent no-op for a target already reached is River 0.39's). Each test runs the real
command line against a real Postgres schema and a real SQLite file, in this process
(tests/cli_in_process.py: what each command does, not its process, which
tests/migrations/test_cli.py covers).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from riverboat.cli import main
from riverboat.drivers._sqlite_module import sqlite_module
from riverboat.migrations import LATEST_VERSION
from tests.cli_in_process import cli_in_process
from tests.migrations import RIVERBOAT_LATEST, RIVERBOAT_LINE, riverboat_step
from tests.migrations.test_cli import one_line_error

_RIVERBOAT_AT_LATEST = f"(riverboat line: {RIVERBOAT_LATEST})"


class Db:
    """One empty database (a Postgres schema or a SQLite file) and SQL run on it."""

    def __init__(self, dialect: str, args: list[str], pg_url: str, schema: str, path: Path):
        self.dialect = dialect
        self.args = args
        self._pg_url = pg_url
        self._schema = schema
        self._path = path

    def execute(self, sql: str) -> None:
        if self.dialect == "postgres":
            with psycopg.connect(self._pg_url, autocommit=True) as conn:
                conn.execute(f'SET search_path TO "{self._schema}"')
                conn.execute(sql)
        else:
            with closing(sqlite_module().connect(self._path)) as conn, conn:
                conn.execute(sql)

    def migrate(self, *args: str) -> tuple[int, list[str]]:
        result = cli_in_process("migrate", *args, *self.args)
        assert "Traceback" not in result.stderr, result.stderr
        return result.returncode, result.stdout.splitlines()


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    path = tmp_path / "flags.sqlite3"
    if request.param == "sqlite":
        yield Db("sqlite", ["--database-url", f"sqlite:///{path}"], "", "", path)
        return
    pg_url: str = request.getfixturevalue("pg_url")
    schema = "f_" + uuid.uuid4().hex[:16]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield Db("postgres", ["--database-url", pg_url, "--schema", schema], pg_url, schema, path)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _applied(lines: list[str], verb: str = "applied") -> list[int]:
    # Only River's main line: other lines are named ("applied riverboat 001 ...").
    words = [line.split() for line in lines if line.startswith(f"{verb} ")]
    return [int(w[1]) for w in words if w[1].isdigit()]


def _version(db: Db) -> int:
    code, lines = db.migrate("list")
    assert code == 0
    return int(lines[-1].split()[2])


def test_validate_exit_codes(db: Db) -> None:
    code, lines = db.migrate("validate")
    assert code == 1
    assert lines == [
        "unapplied migrations: 001, 002, 003, 004, 005, 006, 007, 008, "
        + ", ".join(f"riverboat {v:03d}" for v in RIVERBOAT_LINE)
        + "; run `riverboat migrate up`"
    ]
    assert db.migrate("up", "--target-version", "3")[0] == 0
    assert db.migrate("validate", "--target-version", "3") == (
        0,
        ["no unapplied migrations; at version 3"],
    )
    code, lines = db.migrate("validate")
    assert code == 1 and "004, 005, 006, 007, 008" in lines[0]
    assert db.migrate("up")[0] == 0
    assert db.migrate("validate") == (
        0,
        [f"no unapplied migrations; at version {LATEST_VERSION} {_RIVERBOAT_AT_LATEST}"],
    )


def test_dry_run_with_show_sql_changes_nothing(db: Db) -> None:
    code, lines = db.migrate("up", "--dry-run", "--show-sql")
    assert code == 0
    planned = [line for line in lines if line.startswith("would apply")]
    assert planned[0] == "would apply 001 create river migration [up] [dry run]"
    assert len(planned) == LATEST_VERSION + RIVERBOAT_LATEST
    assert planned[-1] == f"would apply {riverboat_step(RIVERBOAT_LATEST)} [up] [dry run]"
    assert "-" * 80 in lines
    assert "-- River main migration 008 job id autoincrement [up]" in lines
    if db.dialect == "sqlite":
        assert any("AUTOINCREMENT" in line for line in lines)
    assert _version(db) == 0

    assert db.migrate("up")[0] == 0
    code, lines = db.migrate("down", "--dry-run", "--max-steps", str(RIVERBOAT_LATEST))
    assert code == 0
    assert lines[:RIVERBOAT_LATEST] == [
        f"would apply {riverboat_step(v)} [down] [dry run]" for v in reversed(RIVERBOAT_LINE)
    ]
    code, lines = db.migrate("down", "--line", "main", "--dry-run", "--max-steps", "2")
    assert code == 0
    assert lines[:2] == [
        "would apply 008 job id autoincrement [down] [dry run]",
        "would apply 007 notification outbox sqlite jsonb and sql cleanup [down] [dry run]",
    ]
    assert _version(db) == LATEST_VERSION


def test_max_steps_and_target_version(db: Db) -> None:
    # River's flags on River's line alone; the stack of lines is tested below.
    code, lines = db.migrate("up", "--line", "main", "--max-steps", "2")
    assert code == 0 and _applied(lines) == [1, 2]
    # A target already reached is a no-op, not an error (River 0.39).
    code, lines = db.migrate("up", "--line", "main", "--target-version", "2")
    assert code == 0 and lines[0] == "nothing to apply; at version 2"
    # River cuts to --max-steps first: a target beyond the cut is refused, nothing applied.
    result = cli_in_process(
        "migrate", "up", "--line", "main", *db.args, "--target-version", "5", "--max-steps", "1"
    )
    assert "version 5 is not in the target list" in one_line_error(result)
    assert _version(db) == 2
    code, lines = db.migrate("up", "--line", "main", "--target-version", "4", "--max-steps", "5")
    assert code == 0 and _applied(lines) == [3, 4]
    code, lines = db.migrate("up", "--line", "main", "--max-steps", "10")
    assert code == 0 and _applied(lines) == [5, 6, 7, 8]
    assert "no more migrations to apply" in lines
    assert (
        db.migrate("up", "--line", "main", "--max-steps", "-1")[1][0]
        == "nothing to apply; at version 8"
    )

    code, lines = db.migrate("down", "--line", "main", "--max-steps", "2")
    assert code == 0 and _applied(lines, "reverted") == [8, 7]
    code, lines = db.migrate("down", "--line", "main", "--target-version", "6")
    assert code == 0 and lines[0] == "nothing to revert"
    not_applied = cli_in_process(
        "migrate", "down", "--line", "main", *db.args, "--target-version", "8"
    )
    assert "not applied" in one_line_error(not_applied)
    code, lines = db.migrate("down", "--line", "main", "--target-version", "4")
    assert code == 0 and _applied(lines, "reverted") == [6, 5]
    code, lines = db.migrate("down", "--line", "main", "--target-version", "-1")
    assert code == 0 and _applied(lines, "reverted") == [4, 3, 2, 1]
    assert _version(db) == 0


def test_lines_form_a_stack(db: Db) -> None:
    # Without --line, up applies main then riverboat; down unwinds from the top.
    code, lines = db.migrate("up", "--target-version", "7")
    assert code == 0 and _applied(lines) == list(range(1, 8))
    assert f"riverboat line current version: 0 (latest {RIVERBOAT_LATEST})" in lines
    code, lines = db.migrate("up", "--line", "main")
    assert code == 0 and _applied(lines) == [8]
    code, lines = db.migrate("up")
    assert code == 0 and lines[0] == "applied riverboat 001 client registry"
    assert lines[-2:] == [
        f"riverboat line current version: {RIVERBOAT_LATEST} (latest {RIVERBOAT_LATEST})",
        f"current version: {LATEST_VERSION} (latest {LATEST_VERSION})",
    ]
    code, lines = db.migrate("list")
    assert code == 0 and "line riverboat:" in lines
    assert lines[lines.index("line riverboat:") + 1].startswith("* 001  client registry")
    assert db.migrate("validate") == (
        0,
        [f"no unapplied migrations; at version {LATEST_VERSION} {_RIVERBOAT_AT_LATEST}"],
    )
    # River's main can't go below 005 (river_migration.line) under another line.
    refused = cli_in_process("migrate", "down", "--line", "main", *db.args, "--target-version", "4")
    assert "while the riverboat line is applied" in one_line_error(refused)
    assert _version(db) == LATEST_VERSION
    # Nothing to revert on main (its target reached, or no steps) is a no-op, not that.
    for no_op in (
        ("--target-version", str(LATEST_VERSION)),
        ("--max-steps", "-1"),
        ("--target-version", str(LATEST_VERSION), "--dry-run"),
    ):
        assert db.migrate("down", "--line", "main", *no_op)[0] == 0, no_op
    assert _version(db) == LATEST_VERSION
    latest = riverboat_step(RIVERBOAT_LATEST)
    code, lines = db.migrate("down")
    assert code == 0 and lines[0] == f"reverted {latest}"
    code, lines = db.migrate("validate")
    assert code == 1 and lines == [
        f"unapplied migrations: riverboat {RIVERBOAT_LATEST:03d}; run `riverboat migrate up`"
    ]
    code, lines = db.migrate("up", "--line", "riverboat")
    assert code == 0 and lines[0] == f"applied {latest.removeprefix('riverboat ')}"
    code, lines = db.migrate("down", "--max-steps", str(RIVERBOAT_LATEST + 1))
    assert code == 0 and lines[: RIVERBOAT_LATEST + 1] == [
        *(f"reverted {riverboat_step(v)}" for v in reversed(RIVERBOAT_LINE)),
        "reverted 008 job id autoincrement",
    ]
    assert db.migrate("up")[0] == 0
    code, lines = db.migrate("down", "--target-version", "0")
    assert code == 0 and lines[0] == f"reverted {latest}"
    assert _version(db) == 0


def test_riverboat_line_needs_rivers_line_column(db: Db) -> None:
    assert db.migrate("up", "--line", "main", "--target-version", "4")[0] == 0
    error = one_line_error(cli_in_process("migrate", "up", "--line", "riverboat", *db.args))
    assert "needs River's main line at version 5" in error


def test_line_flag(db: Db) -> None:
    assert db.migrate("up", "--line", "main")[0] == 0
    for action in ("up", "down", "validate"):
        error = one_line_error(cli_in_process("migrate", action, *db.args, "--line", "workflow"))
        assert "unknown migration line 'workflow'" in error


def test_newer_schema_is_refused_by_every_command(db: Db) -> None:
    assert db.migrate("up")[0] == 0
    # Every command works on a database at River's latest version ...
    for command in (["migrate", "validate"], ["jobs", "list"], ["queues", "list"]):
        result = cli_in_process(*command, *db.args)
        assert result.returncode == 0, (command, result.stderr)
    # ... and refuses one newer than riverboat knows, in one line that says what to do.
    db.execute("INSERT INTO river_migration (line, version) VALUES ('main', 9)")
    for command in (
        ["migrate", "up"],
        ["migrate", "down"],
        ["migrate", "list"],
        ["migrate", "validate"],
        ["migrate", "up", "--dry-run"],
        ["jobs", "list"],
        ["queues", "list"],
    ):
        error = one_line_error(cli_in_process(*command, *db.args))
        assert "version 9" in error and "upgrade riverboat" in error, (command, error)


def test_actions_that_only_read_create_no_sqlite_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """validate, list, down and a dry run read a missing file (or a schema's missing
    sibling) as an empty database; they had left an empty file behind a typo."""
    missing = f"sqlite:///{tmp_path / 'typo.sqlite3'}"
    for argv in (["validate"], ["list"], ["down"], ["up", "--dry-run"]):
        code = main(["migrate", *argv, "--database-url", missing])
        assert code == (1 if argv == ["validate"] else 0)
    out = capsys.readouterr().out
    assert "would apply 001 create river migration [up] [dry run]" in out
    assert "nothing to revert" in out
    migrated = tmp_path / "app.sqlite3"
    assert main(["migrate", "up", "--database-url", f"sqlite:///{migrated}"]) == 0
    url = f"sqlite:///{migrated}"
    assert main(["migrate", "up", "--dry-run", "--database-url", url, "--schema", "typo"]) == 0
    assert main(["migrate", "validate", "--database-url", url, "--schema", "typo"]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sqlite3"]
