"""The driver conformance suite's parametrisation: every driver, one line each.

A new driver is an adapter module under ``tests/drivers/adapters/`` (a
:class:`~tests.drivers.harness.Harness` subclass) and one ``DriverCase`` line below. Every
test in ``tests/drivers/`` then runs against it; a driver passes when the suite does.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Literal

import pytest

from tests.drivers.harness import Env, Harness


@dataclass(frozen=True)
class DriverCase:
    """``make`` is a Harness class, or ``"module:Class"`` under tests.drivers.adapters,
    imported only when the case runs: a driver that fails to import fails its own
    cases, not the whole suite."""

    name: str
    make: Callable[[Env], Harness] | str
    dialect: Literal["postgres", "sqlite"]

    def harness(self, env: Env) -> Harness:
        make = self.make
        if isinstance(make, str):
            module, _, attr = make.partition(":")
            make = getattr(importlib.import_module(f"tests.drivers.adapters.{module}"), attr)
        return make(env)


CASES = [
    DriverCase("psycopg", "psycopg:Sync", "postgres"),
    DriverCase("psycopg-async", "psycopg:Async", "postgres"),
    DriverCase("asyncpg", "asyncpg:FromUrl", "postgres"),
    DriverCase("asyncpg-pool", "asyncpg:FromPool", "postgres"),
    DriverCase("sqlalchemy", "sqlalchemy:Sync", "postgres"),
    DriverCase("sqlalchemy-url", "sqlalchemy:SyncFromUrl", "postgres"),
    DriverCase("sqlalchemy-async-psycopg", "sqlalchemy:Async", "postgres"),
    DriverCase("sqlalchemy-async-asyncpg", "sqlalchemy:AsyncAsyncpg", "postgres"),
    DriverCase("sqlite", "sqlite:Sync", "sqlite"),
    DriverCase("sqlite-async", "sqlite:Async", "sqlite"),
    DriverCase("django", "django:Sync", "postgres"),
]


@pytest.fixture(params=CASES, ids=[case.name for case in CASES])
def case(request: pytest.FixtureRequest) -> DriverCase:
    param: DriverCase = request.param
    return param


@pytest.fixture
def env(case: DriverCase, request: pytest.FixtureRequest) -> Env:
    # Fixtures are looked up lazily so SQLite cases never start a Postgres server.
    if case.dialect == "postgres":
        return Env(request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema"))
    return Env(request.getfixturevalue("sqlite_url"), None)


@pytest.fixture
async def h(case: DriverCase, env: Env) -> AsyncIterator[Harness]:
    """The harness of the case's driver, opened; closed after the test."""
    harness = case.harness(env)
    harness.driver = await harness.open()
    try:
        yield harness
    finally:
        await harness.close()
