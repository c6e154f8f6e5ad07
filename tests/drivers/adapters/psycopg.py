"""psycopg 3, sync and async: the reference driver."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from riverboat.drivers.psycopg import AsyncPsycopgDriver, PsycopgDriver
from tests.drivers.harness import Harness


class Sync(Harness):
    async def open(self) -> Any:
        return PsycopgDriver(self.env.url, schema=self.env.schema, max_pool_size=4)

    @asynccontextmanager
    async def native(self, kind: str, *, commit: bool) -> AsyncIterator[Any]:
        with psycopg.connect(self.env.url) as conn:  # not autocommit: a transaction opens
            yield conn
            conn.commit() if commit else conn.rollback()


class Async(Harness):
    async def open(self) -> Any:
        return AsyncPsycopgDriver(self.env.url, schema=self.env.schema, max_pool_size=4)

    @asynccontextmanager
    async def native(self, kind: str, *, commit: bool) -> AsyncIterator[Any]:
        async with await psycopg.AsyncConnection.connect(self.env.url) as conn:
            yield conn
            await (conn.commit() if commit else conn.rollback())
