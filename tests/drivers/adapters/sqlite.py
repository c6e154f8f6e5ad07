"""SQLite, sync and async, on one migrated database file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from riverboat.drivers.sqlite import AsyncSqliteDriver, SqliteDriver
from tests.drivers.harness import Harness
from tests.sqlite.helpers import raw


class Sync(Harness):
    async def open(self) -> Any:
        return SqliteDriver(self.env.url)

    @asynccontextmanager
    async def native(self, kind: str, *, commit: bool) -> AsyncIterator[Any]:
        conn = raw(self.env.url)
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield conn
            conn.execute("COMMIT" if commit else "ROLLBACK")
        finally:
            conn.close()


class Async(Sync):
    async def open(self) -> Any:
        return AsyncSqliteDriver(self.env.url)
