"""asyncpg: a driver built from a URL (its own pool) and one over the caller's pool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from riverboat.drivers.asyncpg import AsyncpgDriver
from tests.drivers.harness import Harness


class FromUrl(Harness):
    native_kinds: tuple[str, ...] = ("connection", "pool_connection")

    async def open(self) -> Any:
        return AsyncpgDriver(self.env.url, schema=self.env.schema, max_pool_size=4)

    @asynccontextmanager
    async def native(self, kind: str, *, commit: bool) -> AsyncIterator[Any]:
        if kind == "pool_connection":
            async with asyncpg.create_pool(self.env.url, min_size=1, max_size=1) as pool:
                async with pool.acquire() as conn:
                    async with self._tx(conn, commit):
                        yield conn
            return
        conn = await asyncpg.connect(self.env.url)
        try:
            async with self._tx(conn, commit):
                yield conn
        finally:
            await conn.close()

    @asynccontextmanager
    async def _tx(self, conn: Any, commit: bool) -> AsyncIterator[None]:
        tx = conn.transaction()
        await tx.start()
        yield
        await (tx.commit() if commit else tx.rollback())


class FromPool(FromUrl):
    """The application's own pool: the driver borrows a connection per statement."""

    native_kinds = ("connection",)

    async def open(self) -> Any:
        self._pool = await asyncpg.create_pool(self.env.url, min_size=1, max_size=4)
        return AsyncpgDriver(self._pool, schema=self.env.schema)

    async def close(self) -> None:
        await self.driver.close()
        await self._pool.close()
