"""asyncpg driver: :class:`AsyncpgDriver`, over a URL, an ``asyncpg.Pool`` or a connection.

asyncpg speaks Postgres's ``$1`` placeholders and prepares every statement itself (its
per-connection statement cache), so the hot statements are parsed once per connection.
Parameter types come from the server: every dialect statement casts its parameters
(``:ids::bigint[]``), and the dialects pass the Python values asyncpg's codecs want
(``str`` for ``text``/``jsonb`` and their arrays, ``datetime`` for ``timestamptz``,
``bytes`` for ``bytea``, ``int`` for integers).

A pool built from a URL skips asyncpg's reset query on release (``RESET ALL``,
``UNLISTEN *``... one round trip per lease): riverboat's leases leave no session state
behind, and a lease that leaves a transaction open is rolled back by asyncpg and counted
in :attr:`DriverStats.resets`. Pass ``statement_cache_size=0`` behind PgBouncer in
transaction pooling mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from riverboat._sql import Statement
from riverboat.dialect.postgres import CopyBatch, PostgresDialect
from riverboat.drivers._fork import new_pool_after_fork, set_aside
from riverboat.drivers.base import (
    DEFAULT_TCP,
    LOCK_TIMEOUT,
    AsyncConnectionExecutor,
    AsyncStatementRunner,
    Capabilities,
    DriverStats,
    Notification,
    TcpSettings,
    Watchdog,
    call_timeout,
    import_optional,
    plain_postgres_url,
    translate_error,
)
from riverboat.errors import DeadlineExceededError, DriverError

if TYPE_CHECKING:
    import asyncpg

__all__ = ["AsyncpgDriver", "connect_listener"]

log = logging.getLogger("riverboat.asyncpg")


def _import_asyncpg() -> Any:
    return import_optional("asyncpg", "asyncpg")


def _errors(asyncpg: Any) -> tuple[type[BaseException], ...]:
    # PostgresError: the server said no. InterfaceError (and its DataError): asyncpg
    # refused an argument or the connection is gone. InternalClientError: a statement
    # sent on a connection the server had just ended, before asyncpg saw it close
    # ("cannot switch to state 12; another operation (2) is in progress"). OSError: the
    # socket failed.
    return (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError)


def _connection_broken(exc: BaseException, asyncpg: Any) -> bool:
    """Whether ``exc`` (or what it was translated from) leaves its connection unusable:
    anything but the server's refusal of a statement. asyncpg's pool never takes back
    a connection left in InternalClientError's state: its slot stayed checked out, and
    once all were, every call waited for the pool for ever."""
    cause = exc.__cause__ if isinstance(exc, DriverError) and exc.__cause__ else exc
    if isinstance(cause, asyncpg.PostgresError):
        return isinstance(cause, asyncpg.exceptions.ConnectionDoesNotExistError)
    if isinstance(cause, TimeoutError):  # an OSError, but the caller's, not the socket's
        return False
    return isinstance(cause, (asyncpg.InterfaceError, asyncpg.InternalClientError, OSError))


# Seconds a call waits for a connection from the pool when it has no deadline of its own
# (the psycopg driver's pool_timeout), and that close() waits for the pool's connections
# to be handed back before it terminates them.
POOL_TIMEOUT = 30.0
CLOSE_TIMEOUT = 10.0


_translate = translate_error


def _asyncpg_url(url: str) -> str:
    return plain_postgres_url(
        url, ("postgresql+asyncpg://", "postgresql+psycopg://", "postgres+asyncpg://")
    )


def _rowcount(status: str) -> int:
    # asyncpg returns the command tag: "UPDATE 3", "INSERT 0 1", "SELECT 2", "NOTIFY".
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else 0


async def _run_on(conn: Any, stmt: Statement, stats: DriverStats, want_rows: bool) -> Any:
    sql, names = stmt.query.compile("dollar")
    params = stmt.params
    stats.count(stmt.query.name)
    asyncpg = _import_asyncpg()
    try:
        if want_rows:
            records = await conn.fetch(sql, *[params[n] for n in names])
            # Records index like tuples; plain tuples keep callers independent of asyncpg.
            return [tuple(r) for r in records]
        status = await conn.execute(sql, *[params[n] for n in names])
    except _errors(asyncpg) as exc:
        raise _translate(exc) from exc
    return _rowcount(status or "")


async def _run_watched(
    conn: Any, stmt: Statement, stats: DriverStats, want_rows: bool, seconds: float, deadline: float
) -> Any:
    """:func:`_run_on` within ``seconds`` (what is left of the call's ``deadline``):
    past them the connection is terminated (its socket closed, so a pool discards it)
    and the call raises DeadlineExceededError."""
    watchdog = Watchdog(seconds, conn.terminate, stmt.query.name, deadline)
    try:
        return await _run_on(conn, stmt, stats, want_rows)
    except DriverError as exc:
        if watchdog.missed:
            raise watchdog.error() from exc
        raise
    finally:
        watchdog.cancel()


def _apply_tcp(conn: Any, tcp: TcpSettings | None) -> None:
    """asyncpg takes no keepalive parameters: set them on the connection's socket."""
    if tcp is None:
        return
    transport = getattr(conn, "_transport", None)
    if transport is not None:
        tcp.apply(transport.get_extra_info("socket"))


class _Executor(AsyncConnectionExecutor):
    """Runs statements on one connection: a transaction's, or the caller's own."""

    __slots__ = ()

    async def _run(self, stmt: Statement, want_rows: bool) -> Any:
        return await _run_on(self._conn, stmt, self._stats, want_rows)

    async def copy(self, batch: CopyBatch) -> int:
        """COPY ``batch``'s rows in (binary format): ``insert_many_fast``."""
        self._stats.count("copy_" + batch.table)
        asyncpg = _import_asyncpg()
        try:
            await self._conn.copy_records_to_table(
                batch.table,
                records=batch.rows,
                columns=list(batch.columns),
                schema_name=batch.schema,
            )
        except _errors(asyncpg) as exc:
            raise _translate(exc) from exc
        return len(batch.rows)


_CLOSED = object()


class _Listener:
    """A dedicated connection LISTENing through ``add_listener``.

    asyncpg delivers notifications to callbacks; they are queued here and handed out by
    :meth:`notifications`, which raises :class:`DriverError` once the connection is lost
    so the notifier reconnects.
    """

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        # Set by the notifier's call deadline: how long the connection may stay silent
        # before it is checked, and how long the check may take.
        self._check_every = call_timeout()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._channels: set[str] = set()
        conn.add_termination_listener(self._on_terminate)

    def _on_notify(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        self._queue.put_nowait(Notification(channel, payload))

    def _on_terminate(self, _conn: Any) -> None:
        self._queue.put_nowait(_CLOSED)

    async def listen(self, channel: str) -> None:
        await self._subscription(self._conn.add_listener, channel)
        self._channels.add(channel)

    async def unlisten(self, channel: str) -> None:
        await self._subscription(self._conn.remove_listener, channel)
        self._channels.discard(channel)

    async def _subscription(self, method: Callable[..., Awaitable[None]], channel: str) -> None:
        """``add_listener`` or ``remove_listener`` for ``channel``, errors translated."""
        asyncpg = _import_asyncpg()
        try:
            await method(channel, self._on_notify)
        except _errors(asyncpg) as exc:
            raise _translate(exc) from exc

    async def notifications(self) -> AsyncIterator[Notification]:
        check_every = call_timeout() or self._check_every
        while True:
            try:
                # asyncio.timeout, not wait_for: runtime/_waiting.py says why.
                async with asyncio.timeout(check_every):
                    item = await self._queue.get()
            except TimeoutError:
                # Quiet for a while: make sure the connection still answers, since a
                # silent one would never deliver anything (nor say it is gone).
                assert check_every is not None
                watchdog = Watchdog(check_every, self._conn.terminate, "LISTEN health check")
                try:
                    await self._conn.execute("SELECT 1")
                except _errors(_import_asyncpg()) as exc:
                    if watchdog.missed:
                        raise watchdog.error() from exc
                    raise _translate(exc) from exc
                finally:
                    watchdog.cancel()
                continue
            if item is _CLOSED:
                raise DriverError("the LISTEN connection was closed")
            yield item

    async def close(self) -> None:
        self._conn.remove_termination_listener(self._on_terminate)
        if not self._conn.is_closed():
            try:
                await self._conn.close(timeout=5)
            except Exception:
                self._conn.terminate()
        self._queue.put_nowait(_CLOSED)


async def _connect_listen(*args: Any, **kwargs: Any) -> Any:
    """``asyncpg.connect(*args, **kwargs)`` for a LISTEN connection, within the call
    deadline if one is set, its errors riverboat's."""
    asyncpg = _import_asyncpg()
    try:
        async with asyncio.timeout(call_timeout()):
            return await asyncpg.connect(*args, **kwargs)
    except TimeoutError:
        raise DeadlineExceededError(
            "connecting the LISTEN connection took longer than the call's deadline"
        ) from None
    except _errors(asyncpg) as exc:
        raise _translate(exc) from exc


async def connect_listener(
    url: str, stats: DriverStats | None = None, tcp: TcpSettings | None = DEFAULT_TCP
) -> _Listener:
    """A LISTEN connection of its own to ``url`` (also used by the SQLAlchemy driver),
    with ``tcp``'s keepalives, connected within the call deadline if one is set."""
    conn = await _connect_listen(_asyncpg_url(url))
    _apply_tcp(conn, tcp)
    if stats is not None:
        stats.connections_opened += 1
    return _Listener(conn)


async def _no_reset(_conn: Any) -> None:
    # asyncpg has already rolled back any open transaction (and counted nothing); the
    # session state riverboat's statements touch needs no RESET ALL.
    return None


class AsyncpgDriver(AsyncStatementRunner):
    """Async driver over a URL (an owned pool), an ``asyncpg.Pool`` or a ``Connection``.

    With a URL the pool is created on first use, on the running event loop. With a
    caller's pool each statement borrows a connection from it; with a single connection
    calls are serialised by a lock. ``listener()`` needs a URL (or a pool, whose connect
    arguments are reused) for its dedicated connection.
    """

    def __init__(
        self,
        source: str | asyncpg.Pool | asyncpg.Connection,
        *,
        schema: str | None = None,
        max_pool_size: int = 10,
        min_pool_size: int = 1,
        statement_cache_size: int = 100,
        tcp: TcpSettings | None = DEFAULT_TCP,
        lock_timeout: float | None = LOCK_TIMEOUT,
        pool_timeout: float = POOL_TIMEOUT,
    ) -> None:
        asyncpg = _import_asyncpg()
        self._pool_timeout = pool_timeout
        self.dialect = PostgresDialect(schema)
        self.stats = DriverStats()
        self.url: str | None = None
        self._pool: Any = None
        self._owned_pool = False
        self._conn: Any = None
        self._pool_args = {
            "min_size": min(min_pool_size, max_pool_size),
            "max_size": max_pool_size,
            "statement_cache_size": statement_cache_size,
        }
        self._tcp = tcp
        # Not behind PgBouncer in transaction pooling (statement_cache_size=0), where a
        # session setting would reach other clients of the server connection.
        self._lock_timeout = lock_timeout if statement_cache_size else None
        self._pool_lock: asyncio.Lock | None = None
        self._conn_lock = asyncio.Lock()
        self._closed = False
        if isinstance(source, str):
            self.url = _asyncpg_url(source)
            self._owned_pool = True
            new_pool_after_fork(self)
        elif isinstance(source, asyncpg.Pool):
            self._pool = source
        elif isinstance(source, asyncpg.Connection):
            self._conn = source
        else:
            raise TypeError(
                f"expected a URL, an asyncpg.Pool or an asyncpg.Connection, "
                f"got {type(source).__name__}"
            )
        # A lone connection has nothing to open a dedicated LISTEN connection from.
        self.capabilities = Capabilities(listen=self._conn is None, async_=True, copy=True)

    def _after_fork(self) -> None:
        """In a forked child (see drivers._fork.new_pool_after_fork): the pool is made
        again on first use, on the child's event loop."""
        set_aside(self._pool)
        self._pool = None
        self._pool_lock = None
        self._conn_lock = asyncio.Lock()

    async def _on_connect(self, conn: Any) -> None:
        self.stats.connections_opened += 1
        _apply_tcp(conn, self._tcp)
        if self._lock_timeout is not None:
            millis = max(1, round(self._lock_timeout * 1000))
            await conn.execute(f"SELECT set_config('lock_timeout', '{millis}', false)")

    async def _owned(self) -> Any:
        if self._pool is not None:
            return self._pool
        if self._closed:
            raise DriverError("the driver is closed")
        if self._pool_lock is None:
            self._pool_lock = asyncio.Lock()
        async with self._pool_lock:
            if self._pool is None:
                asyncpg = _import_asyncpg()
                try:
                    self._pool = await asyncpg.create_pool(
                        self.url,
                        init=self._on_connect,
                        reset=_no_reset,
                        **self._pool_args,
                    )
                except _errors(asyncpg) as exc:
                    raise _translate(exc) from exc
        return self._pool

    @asynccontextmanager
    async def _lease(self, timeout: float | None = None) -> AsyncIterator[Any]:
        """A connection; ``timeout`` bounds the wait for one from the pool (and the
        connect of a new one)."""
        self.stats.leases += 1
        if self._conn is not None:
            async with self._conn_lock:
                yield self._conn
            return
        pool = self._pool if self._pool is not None else await self._owned()
        asyncpg = _import_asyncpg()
        try:
            conn = await pool.acquire(
                timeout=timeout if timeout is not None else self._pool_timeout
            )
        except TimeoutError:
            if timeout is None:
                raise DriverError(
                    f"no connection free after {self._pool_timeout:g} s: all of the pool's "
                    "connections are in use (max_pool_size)"
                ) from None
            raise DeadlineExceededError(
                f"no connection from the pool within the call's deadline of {timeout:g}s"
            ) from None
        except _errors(asyncpg) as exc:
            raise _translate(exc) from exc
        try:
            yield conn
        except BaseException as exc:
            if getattr(conn, "_con", conn) is not None and _connection_broken(exc, asyncpg):
                conn.terminate()  # the pool replaces it, and takes the slot back
            raise
        finally:
            # A connection terminated at its deadline has already left the pool's
            # proxy (asyncpg releases it); the pool replaces it and release is a no-op.
            if getattr(conn, "_con", conn) is not None:
                if not conn.is_closed() and conn.is_in_transaction():
                    self.stats.resets += 1
            await pool.release(conn)

    async def _run(self, stmt: Statement, want_rows: bool) -> Any:
        timeout = call_timeout()
        if timeout is None:
            async with self._lease() as conn:
                return await _run_on(conn, stmt, self.stats, want_rows)
        deadline = time.monotonic() + timeout
        async with self._lease(timeout) as conn:
            left = max(deadline - time.monotonic(), 0.0)
            return await _run_watched(conn, stmt, self.stats, want_rows, left, timeout)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_Executor]:
        """One transaction on one leased connection: committed on success, rolled back
        when the block raises."""
        asyncpg = _import_asyncpg()
        async with self._lease() as conn:
            tx = conn.transaction()
            try:
                await tx.start()
            except _errors(asyncpg) as exc:
                raise _translate(exc) from exc
            try:
                yield _Executor(conn, self.stats)
            except BaseException:
                if not conn.is_closed():
                    # A connection the server ended can't roll back either: the block's
                    # own error is the one to raise (the lease then terminates it).
                    with contextlib.suppress(*_errors(asyncpg)):
                        await tx.rollback()
                raise
            try:
                await tx.commit()
            except _errors(asyncpg) as exc:
                raise _translate(exc) from exc

    def wrap(self, conn: Any) -> _Executor:
        """An executor over the caller's connection (a pool's proxy connection too);
        their transaction stays theirs."""
        asyncpg = _import_asyncpg()
        if not isinstance(conn, asyncpg.Connection | asyncpg.pool.PoolConnectionProxy):
            raise TypeError(f"expected an asyncpg.Connection, got {type(conn).__name__}")
        return _Executor(conn, self.stats)

    async def execute_script(self, sql: str) -> None:
        """Several statements in one simple-protocol round trip (no parameters)."""
        asyncpg = _import_asyncpg()
        async with self._lease() as conn:
            try:
                await conn.execute(sql)
            except _errors(asyncpg) as exc:
                raise _translate(exc) from exc

    async def listener(self) -> _Listener:
        """A dedicated connection (never one of the pool's) for LISTEN."""
        if self.url is not None:
            return await connect_listener(self.url, self.stats, self._tcp)
        if self._pool is not None:
            # A caller's pool: open a connection with the same connect arguments.
            pool = self._pool
            conn = await _connect_listen(*pool._connect_args, **pool._connect_kwargs)
            self.stats.connections_opened += 1
            return _Listener(conn)
        raise DriverError("LISTEN needs a driver built from a URL or a pool, not a connection")

    async def close(self) -> None:
        """Close an owned pool; a caller's pool or connection stays open. Connections
        not handed back within CLOSE_TIMEOUT seconds are terminated (asyncpg's own
        close waits for them for ever)."""
        self._closed = True
        if self._owned_pool and self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), CLOSE_TIMEOUT)
            except TimeoutError:
                log.warning(
                    "asyncpg: the pool's connections were not handed back within %gs of "
                    "close(); terminated",
                    CLOSE_TIMEOUT,
                )
                pool.terminate()
