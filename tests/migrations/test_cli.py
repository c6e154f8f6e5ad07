"""``riverboat migrate`` against the test server: what the commands print, return and
change, in this process (tests/cli_in_process.py); concurrent runs and the entry point in
real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from riverboat.migrations import LATEST_VERSION
from tests.cli_in_process import cli_in_process
from tests.migrations import RIVERBOAT_LATEST, RIVERBOAT_LINE
from tests.migrations.catalog import expected, normalise_notify_body, rivers_part, snapshot

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return cli_in_process(*args, env=env)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("riverboat: error: ")
    return lines[0]


def test_up_list_down(pg_url: str, empty_schema: str, conn: Any) -> None:
    common = ["--database-url", pg_url, "--schema", empty_schema]
    up = cli("migrate", "up", *common, "--target-version", "3")
    assert up.returncode == 0, up.stderr
    assert up.stdout.splitlines()[:3] == [
        "applied 001 create river migration",
        "applied 002 initial schema",
        "applied 003 river job tags non null",
    ]
    listing = cli("migrate", "list", *common)
    assert listing.returncode == 0, listing.stderr
    marks = [line[:5] for line in listing.stdout.splitlines() if line[2:5].isdigit()]
    assert marks == [
        "* 001",
        "* 002",
        "* 003",
        "  004",
        "  005",
        "  006",
        "  007",
        "  008",
        *(f"  {version:03d}" for version in RIVERBOAT_LINE),
    ]

    # DATABASE_URL is the default.
    rest = cli("migrate", "up", "--schema", empty_schema, env={"DATABASE_URL": pg_url})
    assert rest.returncode == 0, rest.stderr
    assert "applied 007 notification outbox sqlite jsonb and sql cleanup" in rest.stdout
    assert "applied 008 job id autoincrement" in rest.stdout
    assert "applied riverboat 001 client registry" in rest.stdout
    snap, own = rivers_part(normalise_notify_body(snapshot(conn, empty_schema)))
    assert snap["tables"] == expected(LATEST_VERSION)["tables"]
    assert own == [
        "riverboat_client",
        "riverboat_flow_client",
        "riverboat_flow_ended",
        "riverboat_periodic_job",
    ]

    again = cli("migrate", "up", *common)
    assert again.returncode == 0 and "nothing to apply" in again.stdout

    down = cli("migrate", "down", *common, "--line", "main")
    assert down.returncode == 0, down.stderr
    assert down.stdout.splitlines()[0] == "reverted 008 job id autoincrement"
    gone = cli("migrate", "down", *common, "--target-version", "0")
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout.splitlines()[-1] == f"current version: 0 (latest {LATEST_VERSION})"
    assert snapshot(conn, empty_schema)["tables"] == {}


def test_get_sql_needs_no_database() -> None:
    result = cli("migrate", "get-sql", "--target-version", "2", "--schema", "jobs")
    assert result.returncode == 0, result.stderr
    assert 'CREATE TABLE "jobs".river_migration' in result.stdout
    assert "002 initial schema [up]" in result.stdout
    assert "003" not in result.stdout
    down = cli("migrate", "get-sql", "--direction", "down", "--version", "1")
    assert down.stdout.strip().endswith("DROP TABLE river_migration;")


def test_errors_are_one_line(pg_url: str, empty_schema: str, conn: Any) -> None:
    assert "database_url" in one_line_error(cli("migrate", "up"))
    assert "must start with postgresql://" in one_line_error(
        cli("migrate", "up", "--database-url", "mysql://localhost/x")
    )
    assert "schema" in one_line_error(
        cli("migrate", "up", "--database-url", pg_url, "--schema", "no-dashes")
    )
    started = time.monotonic()
    assert "cannot connect" in one_line_error(
        cli("migrate", "list", "--database-url", "postgresql://postgres@127.0.0.1:1/nope")
    )
    assert time.monotonic() - started < 30  # no pool timeout to sit out

    common = ["--database-url", pg_url, "--schema", empty_schema]
    assert cli("migrate", "up", *common).returncode == 0
    conn.execute(
        f"INSERT INTO \"{empty_schema}\".river_migration (line, version) VALUES ('main', 99)"
    )
    for action in ("up", "down", "list"):
        assert "newer" in one_line_error(cli("migrate", action, *common))
    assert "not a valid migration version" in one_line_error(
        cli("migrate", "up", *common, "--target-version", "42")
    )


def test_usage_errors_exit_2() -> None:
    assert cli().returncode == 2
    assert cli("migrate").returncode == 2
    assert cli("nonsense").returncode == 2
    assert cli("migrate", "up", "--target-version", "x").returncode == 2


def test_help_does_not_import_commands() -> None:
    code = (
        "import sys\n"
        "from riverboat.cli import build_parser\n"
        "build_parser([])\n"
        "print('riverboat.cli.migrate' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.stdout.strip() == "False", result.stderr


def test_concurrent_cli_processes(pg_url: str, empty_schema: str, conn: Any) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    args = [sys.executable, "-m", "riverboat.cli", "migrate", "up", "--database-url", pg_url,
            "--schema", empty_schema]  # fmt: skip
    procs = [
        subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
        )
        for _ in range(3)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], outputs
    applied = sorted(
        line.split()[1]
        for out, _ in outputs
        for line in out.splitlines()
        if line.startswith("applied")
    )
    mains = [f"{v:03d}" for v in range(1, LATEST_VERSION + 1)]
    assert applied == sorted(mains + ["riverboat"] * RIVERBOAT_LATEST)
    got = conn.execute(
        f"""SELECT line, version, count(*) FROM "{empty_schema}".river_migration
            GROUP BY 1, 2 ORDER BY 1, 2"""
    ).fetchall()
    assert got == [("main", v, 1) for v in range(1, LATEST_VERSION + 1)] + [
        ("riverboat", v, 1) for v in RIVERBOAT_LINE
    ]


@pytest.mark.parametrize("entry", [["-m", "riverboat.cli", "--help"]])
def test_module_entry_point(entry: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, *entry], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0
    assert "migrate" in result.stdout
