"""Running the ```python blocks of Markdown files (README.md, docs/*.md) as scripts.

A block written for ``sqlite:///app.sqlite3`` runs on a migrated SQLite file, one for
``postgresql://localhost/app`` (or one that reads ``DATABASE_URL``) on a fresh migrated
Postgres schema, reached through the URL's ``search_path`` option so the block's own
connections see it too. Each block runs in its own interpreter with warnings as errors,
the way a reader would paste it. A block fenced ```python no-run is shown, not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.forkserver import run_python

SQLITE_PLACEHOLDER = "sqlite:///app.sqlite3"
PG_PLACEHOLDER = "postgresql://localhost/app"
_BLOCK_RE = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_blocks(path: Path, *, include_no_run: bool = False) -> list[tuple[int, str]]:
    """``(line, code)`` of every runnable ```python block (line of its first code line)."""
    text = path.read_text()
    blocks = []
    for match in _BLOCK_RE.finditer(text):
        if "no-run" in match.group(1) and not include_no_run:
            continue
        line = text.count("\n", 0, match.start()) + 2
        blocks.append((line, match.group(2)))
    return blocks


def target_of(code: str) -> str:
    """ "postgres" or "sqlite": the database a block is written for."""
    if PG_PLACEHOLDER in code or "DATABASE_URL" in code:
        return "postgres"
    return "sqlite"


def database_for(code: str, request: pytest.FixtureRequest) -> tuple[str, str]:
    """Substitute the block's example URL; returns ``(code, url)``."""
    if target_of(code) == "postgres":
        pg_url: str = request.getfixturevalue("pg_url")
        schema: str = request.getfixturevalue("pg_schema")
        sep = "&" if "?" in pg_url else "?"
        url = f"{pg_url}{sep}options=-csearch_path%3D{schema}"
        return code.replace(PG_PLACEHOLDER, url), url
    url = request.getfixturevalue("sqlite_url")
    return code.replace(SQLITE_PLACEHOLDER, url), url


def run_script(
    path: Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -W error PATH`` in ``cwd``, in a process of its own forked from a server
    with riverboat imported (tests/forkserver.py): what a reader who pastes the block
    into a file runs, without an interpreter's start-up each time."""
    return run_python(
        ("-W", "error"), str(path), cwd=str(cwd), env={**os.environ, **(env or {})}, timeout=60
    )


@contextmanager
def fresh_database(pg_url: str) -> Iterator[str]:
    """A new database on the server, migrated in its public schema; its URL. For blocks
    whose libraries take no ``options`` URL parameter (asyncpg)."""
    import psycopg

    from riverboat.drivers.psycopg import PsycopgDriver
    from riverboat.migrations import up_all

    name = "docs_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, query = pg_url.partition("?")
    url = base.rsplit("/", 1)[0] + f"/{name}" + (f"?{query}" if query else "")
    try:
        driver = PsycopgDriver(url, max_pool_size=1)
        try:
            up_all(driver)
        finally:
            driver.close()
        yield url
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
