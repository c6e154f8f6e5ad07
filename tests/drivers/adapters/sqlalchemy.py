"""SQLAlchemy 2 Core: sync engine (psycopg 3), async engines (psycopg 3 and asyncpg).

Caller-side connections are both a Core ``Connection`` and an ORM ``Session`` (and
their async forms), each in a transaction the test commits or rolls back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from riverboat.drivers.sqlalchemy import AsyncSqlAlchemyDriver, SqlAlchemyDriver
from tests.drivers.harness import Harness


def _url(url: str, driver: str) -> str:
    return url.replace("postgresql://", f"postgresql+{driver}://", 1)


class Sync(Harness):
    native_kinds: tuple[str, ...] = ("connection", "session")

    async def open(self) -> Any:
        self.engine = sqlalchemy.create_engine(_url(self.env.url, "psycopg"), pool_size=4)
        return SqlAlchemyDriver(self.engine, schema=self.env.schema)

    @asynccontextmanager
    async def native(self, kind: str, *, commit: bool) -> AsyncIterator[Any]:
        if kind == "session":
            with Session(self.engine) as session:
                yield session
                session.commit() if commit else session.rollback()
            return
        with self.engine.connect() as conn:
            conn.begin()
            yield conn
            conn.commit() if commit else conn.rollback()

    async def close(self) -> None:
        self.driver.close()
        self.engine.dispose()


class Async(Harness):
    native_kinds = ("connection", "session")
    library = "psycopg"

    async def open(self) -> Any:
        self.engine = create_async_engine(_url(self.env.url, self.library), pool_size=4)
        return AsyncSqlAlchemyDriver(self.engine, schema=self.env.schema)

    @asynccontextmanager
    async def native(self, kind: str, *, commit: bool) -> AsyncIterator[Any]:
        if kind == "session":
            async with AsyncSession(self.engine) as session:
                yield session
                await (session.commit() if commit else session.rollback())
            return
        async with self.engine.connect() as conn:
            await conn.begin()
            yield conn
            await (conn.commit() if commit else conn.rollback())

    async def close(self) -> None:
        await self.driver.close()
        await self.engine.dispose()


class AsyncAsyncpg(Async):
    library = "asyncpg"


class SyncFromUrl(Sync):
    """A driver that owns its engine (``postgresql://`` becomes psycopg 3)."""

    native_kinds = ("connection",)

    async def open(self) -> Any:
        driver = SqlAlchemyDriver(self.env.url, schema=self.env.schema)
        self.engine = driver.engine
        return driver

    async def close(self) -> None:
        self.driver.close()
