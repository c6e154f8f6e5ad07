"""Fixtures of the interop suite: real River 0.51.2 (interop/go, built once per session
with Go) beside riverboat on one database, Postgres or a shared SQLite file.

Without a Go toolchain these tests skip with one line, except under ``CI=true``, where
they fail: CI must run them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.interop.river_go import RiverGo, Target, build_river_go, find_go

# River UI's browser check drives Debian's chromium with the dashboard tests' fixtures.
from tests.ui.conftest import browser, browser_context, page  # noqa: F401

NO_GO = "no Go toolchain on PATH: the River interop tests need Go 1.26 (see README, Development)"


@pytest.fixture(scope="session")
def river_go_binary() -> Path:
    go = find_go()
    if go is None:
        if os.environ.get("CI") == "true":
            pytest.fail(NO_GO + " (CI=true: required)")
        pytest.skip(NO_GO)
    return build_river_go(go)


@pytest.fixture(params=["postgres", "sqlite"])
def target(request: pytest.FixtureRequest) -> Target:
    """A database at River's latest version that both sides share."""
    if request.param == "postgres":
        schema: str = request.getfixturevalue("pg_schema")
        return Target("postgres", request.getfixturevalue("pg_url"), schema)
    url: str = request.getfixturevalue("sqlite_url")
    return Target("sqlite", url, None)


@pytest.fixture(params=["postgres", "sqlite"])
def empty_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """A database with no River tables yet: an empty schema or no SQLite file."""
    if request.param == "sqlite":
        yield Target("sqlite", f"sqlite:///{tmp_path / 'fresh.sqlite3'}", None)
        return
    pg_url: str = request.getfixturevalue("pg_url")
    schema = "interop_" + os.urandom(6).hex()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield Target("postgres", pg_url, schema)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def river(river_go_binary: Path, target: Target) -> RiverGo:
    return RiverGo(river_go_binary, target)
