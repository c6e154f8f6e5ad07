"""Commands whose usage is ``riverboat CMD [--database-url URL] [--schema S] [--json]
ACTION``: the options work before the action as well as after it. argparse wrote the
action's own defaults over the ones given before it, so ``periodic --database-url A
forget ID`` acted on $DATABASE_URL's database instead of A's, and ``--json`` before the
action printed a table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability._support import REPO


def _cli(*argv: str, database_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "riverboat.cli", *argv],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


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
    done = _cli(command, "--database-url", sqlite_url, *rest, database_url=elsewhere)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_forget_acts_on_the_database_named_before_the_action(
    sqlite_url: str, tmp_path: Path
) -> None:
    elsewhere = f"sqlite:///{tmp_path / 'not-this-one.sqlite3'}"
    done = _cli(
        "periodic", "--database-url", sqlite_url, "forget", "nothing_here", database_url=elsewhere
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[-1] == "not stored: nothing_here"
    # After the action, it is used as well.
    after = _cli("periodic", "forget", "--database-url", sqlite_url, "x", database_url=elsewhere)
    assert after.returncode == 1, after.stderr
    assert after.stdout.splitlines()[-1] == "not stored: x"
