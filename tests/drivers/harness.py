"""What the conformance suite needs from each driver, and helpers that let one test body
drive sync and async drivers alike.

An adapter (``tests/drivers/adapters/<driver>.py``) subclasses :class:`Harness`: it opens
the driver under test, opens the caller-side connections ``wrap()`` accepts (``native``),
and closes what it opened. Tests call everything through :meth:`Harness.call`, which
awaits the result when the driver is async, so one test body serves both kinds.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
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

    # -- raw SQL on a connection of the test's own, for setting up and inspecting rows ---
    @property
    def dialect_name(self) -> str:
        """``"postgres"`` or ``"sqlite"``."""
        return "sqlite" if self.env.schema is None else "postgres"

    def sql(self, text: str, *params: Any) -> list[tuple[Any, ...]]:
        """One statement (``?`` placeholders), committed; its rows. Datetimes are
        written the way the dialect stores them."""
        if self.dialect_name == "sqlite":
            from riverboat.dialect._sqlite_common import format_timestamp
            from tests.sqlite.helpers import query

            args = [format_timestamp(p) if isinstance(p, datetime) else p for p in params]
            return [tuple(r) for r in query(self.env.url, text, *args)]
        import psycopg

        with psycopg.connect(self.env.url, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{self.env.schema}"')
            cur = conn.execute(text.replace("?", "%s"), params)
            return cur.fetchall() if cur.description is not None else []

    def now_sql(self, offset_seconds: float = 0) -> str:
        """An SQL expression for the database's clock, plus ``offset_seconds``."""
        if self.dialect_name == "sqlite":
            return f"datetime('now', 'subsec', '{offset_seconds:+f} seconds')"
        return f"(now() + make_interval(secs => {offset_seconds}))"

    def insert_job_row(self, **columns: Any) -> int:
        """A river_job row written directly (any state, times, unique keys, errors), as
        another River client could have left it; its id. ``metadata`` is a dict,
        ``errors`` a list of dicts; ``*_at`` columns take a datetime or a number of
        seconds from the database's now."""
        columns.setdefault("args", {})
        columns.setdefault("kind", "conf_row")
        sqlite = self.dialect_name == "sqlite"
        names, values, params = [], [], []
        for name, value in columns.items():
            names.append(name)
            if name.endswith("_at") and isinstance(value, int | float):
                values.append(self.now_sql(value))
                continue
            if name in ("args", "metadata"):
                values.append("jsonb(?)" if sqlite else "?::jsonb")
                value = json.dumps(value)
            elif name == "errors":
                values.append("jsonb(?)" if sqlite else "?::text[]::jsonb[]")
                value = json.dumps(value) if sqlite else [json.dumps(e) for e in value]
            elif name == "state" and not sqlite:
                values.append("?::river_job_state")
            elif name == "unique_states" and not sqlite:
                values.append("?::integer::bit(8)")
            else:
                values.append("?")
            params.append(value)
        rows = self.sql(
            f"INSERT INTO river_job ({', '.join(names)}) VALUES ({', '.join(values)}) RETURNING id",
            *params,
        )
        return int(rows[0][0])

    def force_state(self, job_id: int, state: str, **extra: Any) -> None:
        """Put a job into ``state`` directly, keeping River's finalized_at constraint."""
        finalized = state in ("cancelled", "completed", "discarded")
        cast = "?" if self.dialect_name == "sqlite" else "?::river_job_state"
        sets = [f"state = {cast}", "finalized_at = " + (self.now_sql() if finalized else "NULL")]
        params: list[Any] = [state]
        if state == "running":
            sets.append(f"attempt = attempt + 1, attempted_at = {self.now_sql()}")
        for column, value in extra.items():
            sets.append(f"{column} = ?")
            params.append(value)
        self.sql(f"UPDATE river_job SET {', '.join(sets)} WHERE id = ?", *params, job_id)

    @contextmanager
    def notifications(self, topic: str) -> Iterator[NotificationLog]:
        """What River's clients are told on ``topic`` from now on: a LISTEN on Postgres,
        the river_notification outbox on SQLite."""
        log: NotificationLog
        if self.dialect_name == "sqlite":
            log = _OutboxLog(self.env.url, topic)
        else:
            assert self.env.schema is not None
            log = _ListenLog(self.env.url, f"{self.env.schema}.{topic}")
        try:
            yield log
        finally:
            log.close()


class NotificationLog:
    def drain(self) -> list[Any]:
        """The payloads (decoded) sent since the last drain, oldest first."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class _OutboxLog(NotificationLog):
    def __init__(self, url: str, topic: str) -> None:
        from tests.sqlite.helpers import query

        self._query = query
        self._url, self._topic = url, topic
        self._after = int(query(url, "SELECT coalesce(max(id), 0) FROM river_notification")[0][0])

    def drain(self) -> list[Any]:
        rows = self._query(
            self._url,
            "SELECT id, payload FROM river_notification WHERE topic = ? AND id > ? ORDER BY id",
            self._topic,
            self._after,
        )
        if rows:
            self._after = int(rows[-1][0])
        return [json.loads(payload) for _, payload in rows]


class _ListenLog(NotificationLog):
    """Postgres delivers notifications in commit order, so ``drain()`` sends a sentinel
    on the same channel and reads up to it: everything committed before is in hand."""

    _SENTINEL = {"sentinel": True}

    def __init__(self, url: str, channel: str) -> None:
        import psycopg

        self._url, self._channel = url, channel
        self._conn = psycopg.connect(url, autocommit=True)
        self._conn.execute(f'LISTEN "{channel}"')

    def drain(self) -> list[Any]:
        import psycopg

        with psycopg.connect(self._url, autocommit=True) as other:
            other.execute("SELECT pg_notify(%s, %s)", (self._channel, json.dumps(self._SENTINEL)))
        out: list[Any] = []
        for note in self._conn.notifies(timeout=10):
            payload = json.loads(note.payload)
            if payload == self._SENTINEL:
                return out
            out.append(payload)
        raise AssertionError("the sentinel notification never arrived")

    def close(self) -> None:
        self._conn.close()


def needs(h: Harness, what: str) -> None:
    """Skip the test for drivers that lack a capability (``listen``)."""
    if not getattr(h.driver.capabilities, what):
        pytest.skip(f"{type(h.driver).__name__} has no {what}")
