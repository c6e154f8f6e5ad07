"""Shared fixtures: a real Postgres server for the session, a migrated schema per test,
and a migrated SQLite file per test. Nothing is mocked."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.pgserver import PgServer


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """URL of a Postgres server: RIVERBOAT_TEST_DATABASE_URL, or a throwaway cluster."""
    url = os.environ.get("RIVERBOAT_TEST_DATABASE_URL")
    if url:
        yield url
        return
    server = PgServer()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``long`` run only with ``RIVERBOAT_LONG=1`` (``./scripts/test --long``)."""
    if os.environ.get("RIVERBOAT_LONG") != "1":
        skip = pytest.mark.skip(reason="long scenario: run with ./scripts/test --long")
        for item in (i for i in items if "long" in i.keywords):
            item.add_marker(skip)


@pytest.fixture
def test_seed(request: pytest.FixtureRequest) -> int:
    """The seed of a randomized test: ``RIVERBOAT_TEST_SEED`` to replay one, else a new
    one. It is printed (pytest shows it with a failure's output) and recorded in the
    JUnit report as the ``seed`` property."""
    import random

    given = os.environ.get("RIVERBOAT_TEST_SEED")
    seed = int(given) if given else random.randrange(1 << 30)
    print(f"random seed {seed}: replay with RIVERBOAT_TEST_SEED={seed}")
    request.node.user_properties.append(("seed", seed))
    return seed


def _new_schema() -> str:
    return "t_" + uuid.uuid4().hex[:16]


@pytest.fixture
def pg_schema(pg_url: str) -> Iterator[str]:
    """A fresh schema migrated to River's latest version; dropped afterwards."""
    import psycopg

    from riverboat.drivers.psycopg import PsycopgDriver
    from riverboat.migrations import Migrator

    schema = _new_schema()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    driver = PsycopgDriver(pg_url, schema=schema, max_pool_size=2)
    try:
        Migrator(driver).up()
    finally:
        driver.close()
    yield schema
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def pg_driver(pg_url: str, pg_schema: str) -> Iterator[object]:
    from riverboat.drivers.psycopg import PsycopgDriver

    driver = PsycopgDriver(pg_url, schema=pg_schema)
    yield driver
    driver.close()


@pytest.fixture
async def apg_driver(pg_url: str, pg_schema: str) -> AsyncIterator[object]:
    from riverboat.drivers.psycopg import AsyncPsycopgDriver

    driver = AsyncPsycopgDriver(pg_url, schema=pg_schema)
    yield driver
    await driver.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A migrated SQLite database file in the test's temporary directory."""
    from riverboat.drivers.sqlite import SqliteDriver
    from riverboat.migrations import Migrator

    url = f"sqlite:///{tmp_path / 'riverboat.sqlite3'}"
    driver = SqliteDriver(url)
    try:
        Migrator(driver).up()
    finally:
        driver.close()
    return url
