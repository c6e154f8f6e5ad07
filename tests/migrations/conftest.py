"""Fixtures for migration tests: an empty schema and drivers/migrators on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from riverboat.drivers.psycopg import PsycopgDriver
from riverboat.migrations import Migrator
from tests.templates import create_migrated_schema, drop_schema, migrate_sqlite_file


@pytest.fixture
def empty_schema(pg_url: str) -> Iterator[str]:
    """A fresh, empty schema; dropped afterwards."""
    schema = "m_" + uuid.uuid4().hex[:16]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield schema
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def driver(pg_url: str, empty_schema: str) -> Iterator[PsycopgDriver]:
    drv = PsycopgDriver(pg_url, schema=empty_schema, max_pool_size=2)
    yield drv
    drv.close()


@pytest.fixture
def migrator(driver: PsycopgDriver) -> Migrator:
    return Migrator(driver)


@pytest.fixture
def conn(pg_url: str) -> Iterator[Any]:
    """An autocommit connection for inspecting and tampering."""
    with psycopg.connect(pg_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def pg_schema(pg_url: str) -> Iterator[str]:
    """Here a schema really migrated (not the suite's clone of a migrated template): these
    tests are about the migrations."""
    schema = create_migrated_schema(pg_url)
    yield schema
    drop_schema(pg_url, schema)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """Here a SQLite file really migrated, not a copy of the suite's template."""
    return migrate_sqlite_file(tmp_path / "riverboat.sqlite3")
