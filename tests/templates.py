"""Migrated databases for tests, made fast: the fixtures in tests/conftest.py clone a
template migrated once per session (see there); the migration tests call the functions
that run every migration."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from riverboat.testing import create_migrated_postgres_schema, drop_postgres_schema
from tests.pgserver import find_pg_bin

if TYPE_CHECKING:
    import psycopg

__all__ = ["SchemaCloner", "create_migrated_schema", "drop_schema", "migrate_sqlite_file"]


def _new_schema() -> str:
    return "t_" + uuid.uuid4().hex[:16]


def create_migrated_schema(pg_url: str) -> str:
    """A new schema brought to the latest version by running every migration."""
    return create_migrated_postgres_schema(pg_url, "t_")


def drop_schema(pg_url: str, schema: str) -> None:
    drop_postgres_schema(pg_url, schema)


class SchemaCloner:
    """Makes migrated schemas from the SQL ``pg_dump`` writes for one migrated template
    schema (data included: river_migration's rows). The template's name is random, so
    replacing it in the dump renames exactly the template's objects. Without a usable
    ``pg_dump`` (none installed, or older than an external server) every schema is
    migrated instead."""

    def __init__(self, pg_url: str) -> None:
        self.pg_url = pg_url
        self.template = "tmpl_" + uuid.uuid4().hex
        self.sql: str | None = None
        self.why_not: str | None = None
        self._template_created = False
        self._conn: psycopg.Connection[Any] | None = None
        bin_dir = find_pg_bin()
        if bin_dir is None or not (bin_dir / "pg_dump").exists():
            self.why_not = "no pg_dump found"
            return
        import psycopg

        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.template}"')
        self._template_created = True
        from riverboat.drivers.psycopg import PsycopgDriver
        from riverboat.migrations import up_all

        driver = PsycopgDriver(pg_url, schema=self.template, max_pool_size=1)
        try:
            up_all(driver)
        finally:
            driver.close()
        dump = subprocess.run(
            [
                str(bin_dir / "pg_dump"),
                "--schema",
                self.template,
                "--inserts",
                "--no-owner",
                "--no-privileges",
                "--dbname",
                pg_url,
            ],
            capture_output=True,
            text=True,
        )
        if dump.returncode != 0:
            self.why_not = f"pg_dump failed: {dump.stderr.strip()}"
            return
        # Drop psql's meta-commands (``\restrict``): the SQL is sent by psycopg.
        self.sql = "\n".join(line for line in dump.stdout.splitlines() if not line.startswith("\\"))

    def create(self) -> str:
        if self.sql is None:
            return create_migrated_schema(self.pg_url)
        schema = _new_schema()
        self._execute(self.sql.replace(self.template, schema))
        return schema

    def drop(self, schema: str) -> None:
        self._execute(f'DROP SCHEMA "{schema}" CASCADE')

    def _execute(self, sql: str) -> None:
        """On the session's own connection: a new one per call cost two backend starts
        per test. Reconnects once if the connection was lost."""
        import psycopg

        for attempt in (1, 2):
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(
                    self.pg_url, autocommit=True, application_name="riverboat-test-templates"
                )
            try:
                self._conn.execute(sql)
                return
            except psycopg.OperationalError:
                self._conn.close()
                if attempt == 2:
                    raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._template_created:
            drop_schema(self.pg_url, self.template)


def migrate_sqlite_file(path: Path) -> str:
    """Runs every migration on the SQLite file ``path``; returns its URL."""
    from riverboat.drivers.sqlite import SqliteDriver
    from riverboat.migrations import up_all

    url = f"sqlite:///{path}"
    driver = SqliteDriver(url)
    try:
        up_all(driver)
    finally:
        driver.close()
    return url
