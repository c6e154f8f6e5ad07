from __future__ import annotations

from collections.abc import Iterator

import pytest

import riverboat
from riverboat.drivers.sqlite import SqliteDriver


@pytest.fixture
def driver(sqlite_url: str) -> Iterator[SqliteDriver]:
    drv = SqliteDriver(sqlite_url)
    yield drv
    drv.close()


@pytest.fixture
def client(driver: SqliteDriver) -> riverboat.Client:
    return riverboat.Client(driver)
