"""Commands that read riverboat's own tables (the registry, periodic records, flow
records) on a database where only River's migration line was applied: one line saying
what to run, as the jobs commands give for a database not migrated at all, not a
driver error naming a missing table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.migrations.test_cli import cli


@pytest.mark.parametrize("argv", [("periodic", "list"), ("workers", "list"), ("queues", "limits")])
def test_riverboats_own_tables_missing_is_one_line(tmp_path: Path, argv: tuple[str, ...]) -> None:
    url = f"sqlite:///{tmp_path / 'river-only.sqlite3'}"
    migrated = cli("migrate", "up", "--line", "main", "--database-url", url)
    assert migrated.returncode == 0, migrated.stderr
    done = cli(*argv, "--database-url", url)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("riverboat: error: riverboat's own tables are at version 0 of ")
    assert line.endswith("run `riverboat migrate up`"), line
    # River's own commands still work there.
    assert cli("queues", "list", "--database-url", url).returncode == 0
