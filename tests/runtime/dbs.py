"""One database fixture for feature tests that must pass on Postgres and SQLite: the
client's URL and schema, and a way to open a plain connection of the caller's own (for
``*_tx`` calls), with a side table for effects that must commit with a job."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from riverboat.drivers._sqlite_module import sqlite_module
from tests.cli_in_process import cli_in_process


@dataclass
class Db:
    dialect: str
    url: str
    schema: str | None

    def cli(
        self, command: str, *args: str, process: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """``riverboat COMMAND ARGS`` against this database: in this process
        (tests/cli_in_process.py: only from synchronous code, so an async test calls it
        through ``asyncio.to_thread``), or in a subprocess with ``process=True``, for what
        only a real process shows (how its output is encoded, its exit)."""
        schema = ["--schema", self.schema] if self.schema else []
        argv = [command, *args, "--database-url", self.url, *schema]
        if not process:
            return cli_in_process(*argv)
        return subprocess.run(
            [sys.executable, "-m", "riverboat.cli", *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )

    @contextmanager
    def connect(self) -> Iterator[Any]:
        """A connection of the caller's own, in manual-commit mode."""
        if self.dialect == "postgres":
            with psycopg.connect(self.url) as conn:
                conn.execute(f'SET search_path TO "{self.schema}"')
                conn.commit()
                yield conn
        else:
            conn = sqlite_module().connect(self.url.removeprefix("sqlite:///"), timeout=30)
            try:
                yield conn
            finally:
                conn.close()

    def execute(self, sql: str, *params: Any) -> list[Any]:
        """Run one statement in autocommit and return its rows."""
        with self.connect() as conn:
            sql = sql if self.dialect == "postgres" else sql.replace("%s", "?")
            cur = conn.execute(sql, params)
            rows = list(cur.fetchall()) if cur.description else []
            conn.commit()
            return rows


def make_db(request: pytest.FixtureRequest, dialect: str) -> Db:
    if dialect == "postgres":
        return Db(dialect, request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema"))
    return Db(dialect, request.getfixturevalue("sqlite_url"), None)


@pytest.fixture(params=["postgres", "sqlite"])
def any_db(request: pytest.FixtureRequest) -> Db:
    """Each test using it runs twice: on a Postgres schema and on a SQLite file."""
    return make_db(request, request.param)
