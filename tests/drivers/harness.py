"""What the conformance suite needs from each driver, and helpers that let one test body
drive sync and async drivers alike.

An adapter (``tests/drivers/adapters/<driver>.py``) subclasses :class:`Harness`: it opens
the driver under test, opens the caller-side connections ``wrap()`` accepts (``native``),
and closes what it opened. Tests call everything through :meth:`Harness.call`, which
awaits the result when the driver is async, so one test body serves both kinds.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

import riverboat


@dataclass(frozen=True)
class Env:
    """Where the case's database is: a migrated Postgres schema, or a SQLite file."""

    url: str
    schema: str | None


class Harness:
    #: The kinds of caller-side connection ``native()`` opens for ``*_tx`` calls.
    native_kinds: tuple[str, ...] = ("connection",)

    def __init__(self, env: Env) -> None:
        self.env = env
        self.driver: Any = None

    # -- what an adapter implements ----------------------------------------------------
    async def open(self) -> Any:
        """Build the driver under test."""
        raise NotImplementedError

    def native(self, kind: str, *, commit: bool) -> AbstractAsyncContextManager[Any]:
        """A caller's connection (or session, per ``kind``) with a transaction open,
        committed on exit when ``commit``, else rolled back."""
        raise NotImplementedError

    async def close(self) -> None:
        await self.call(self.driver.close)

    # -- shared ------------------------------------------------------------------------
    @property
    def is_async(self) -> bool:
        return bool(self.driver.capabilities.async_)

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    def client(self, **kwargs: Any) -> Any:
        cls = riverboat.AsyncClient if self.is_async else riverboat.Client
        return cls(self.driver, **kwargs)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """The driver's own ``transaction()``, sync or async."""
        if self.is_async:
            async with self.driver.transaction() as tx:
                yield tx
        else:
            with self.driver.transaction() as tx:
                yield tx

    async def fetch(self, executor: Any, stmt: Any) -> list[Any]:
        return list(await self.call(executor.fetch, stmt))

    async def execute(self, executor: Any, stmt: Any) -> int:
        return int(await self.call(executor.execute, stmt))

    async def count_jobs(self, kind: str) -> int:
        """Jobs of ``kind``, counted on a connection of its own (not the driver's)."""
        if self.env.schema is not None:
            import psycopg

            with psycopg.connect(self.env.url, autocommit=True) as conn:
                row = conn.execute(
                    f'SELECT count(*) FROM "{self.env.schema}".river_job WHERE kind = %s',
                    (kind,),
                ).fetchone()
        else:
            from tests.sqlite.helpers import query

            row = query(self.env.url, "SELECT count(*) FROM river_job WHERE kind = ?", kind)[0]
        assert row is not None
        return int(row[0])


def needs(h: Harness, what: str) -> None:
    """Skip the test for drivers that lack a capability (``listen``)."""
    if not getattr(h.driver.capabilities, what):
        pytest.skip(f"{type(h.driver).__name__} has no {what}")
