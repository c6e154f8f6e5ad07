"""Commands whose usage is ``riverboat CMD [--database-url URL] [--schema S] [--json]
ACTION``: the options work before the action as well as after it. argparse wrote the
action's own defaults over the ones given before it, so ``periodic --database-url A
forget ID`` acted on $DATABASE_URL's database instead of A's, and ``--json`` before the
action printed a table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.migrations.test_cli import cli


@pytest.mark.parametrize(
    "argv",
    [
        ("periodic", "--json", "list"),
        ("periodic", "--json"),
        ("workers", "--json", "list"),
        ("workers", "--json"),
    ],
)
def test_options_before_the_action_are_used(
    sqlite_url: str, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    elsewhere = f"sqlite:///{tmp_path / 'not-this-one.sqlite3'}"  # $DATABASE_URL: no file
    command, *rest = argv
    done = cli(command, "--database-url", sqlite_url, *rest, env={"DATABASE_URL": elsewhere})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_forget_acts_on_the_database_named_before_the_action(
    sqlite_url: str, tmp_path: Path
) -> None:
    elsewhere = f"sqlite:///{tmp_path / 'not-this-one.sqlite3'}"
    moved = {"DATABASE_URL": elsewhere}
    done = cli("periodic", "--database-url", sqlite_url, "forget", "nothing_here", env=moved)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[-1] == "not stored: nothing_here"
    # After the action, it is used as well.
    after = cli("periodic", "forget", "--database-url", sqlite_url, "x", env=moved)
    assert after.returncode == 1, after.stderr
    assert after.stdout.splitlines()[-1] == "not stored: x"
