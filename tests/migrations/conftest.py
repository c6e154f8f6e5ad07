"""Fixtures for migration tests: an empty schema and drivers/migrators on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from riverboat.drivers.psycopg import PsycopgDriver
from riverboat.migrations import Migrator


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
