"""psycopg 3 driver, sync (:class:`PsycopgDriver`) and async (:class:`AsyncPsycopgDriver`).

Connections are autocommit, so a single statement needs no BEGIN/COMMIT, and raw cursors
speak Postgres's own ``$1`` placeholders, so psycopg does no query rewriting per call.
Hot statements are prepared server-side, and the driver's own connections use generic
plans (``plan_cache_mode = force_generic_plan``): riverboat's statements are ID- or
index-driven, so a generic plan is as good as a custom one, and it skips re-planning on
every call, which for the completion statement is most of its cost (about 190 → 85 µs
per call here). They also run in the UTC time zone, so timestamps load without a
conversion (see ``_SESSION_SETUP``). ``prepare=False`` turns all of this off, for
PgBouncer in transaction pooling, where session settings and prepared statements would
leak between clients.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

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
    StatementRunner,
    TcpSettings,
    Watchdog,
    call_timeout,
    caller_connection,
    import_optional,
    plain_postgres_url,
    shut_socket,
    translate_error,
)
from riverboat.errors import DeadlineExceededError, DriverError

if TYPE_CHECKING:
    import psycopg  # noqa: F401  (named in the drivers' quoted generic bases)
    import psycopg_pool  # noqa: F401

__all__ = ["AsyncPsycopgDriver", "PsycopgDriver"]


# Run on every connection the driver opens for its own pool, unless prepare=False
# (PgBouncer in transaction pooling, where a session setting would leak to other
# clients of the server connection). A connection or pool the caller hands over keeps
# its own settings.
# - plan_cache_mode: see the module's docstring.
# - TimeZone UTC: timestamptz values are instants whatever the session's zone, but
#   psycopg gives them the session's tzinfo, and for any zone but UTC (a server's default
#   is often 'Etc/UTC', a ZoneInfo) its loader converts every value with astimezone:
#   0.94 µs per row of three timestamps against 0.31 µs with datetime.timezone.utc, and
#   arithmetic on them is faster too.
# - lock_timeout: a statement that meets a row lock held by another session fails after
#   this long instead of waiting with it (base.LOCK_TIMEOUT).
_SESSION_SETUP = (
    "SELECT set_config('plan_cache_mode', 'force_generic_plan', false),"
    " set_config('TimeZone', 'UTC', false)"
)


def _session_setup(lock_timeout: float | None) -> str:
    if lock_timeout is None:
        return _SESSION_SETUP
    return (
        _SESSION_SETUP
        + f", set_config('lock_timeout', '{max(1, round(lock_timeout * 1000))}', false)"
    )


def _call_error(watchdog: Watchdog | None, exc: BaseException) -> Exception:
    """What a failed call raises: the deadline's error when its watchdog broke the
    connection, else the driver's error translated."""
    if watchdog is not None and watchdog.missed:
        return watchdog.error()
    return _translate(exc)


def _watch(conn: Any, seconds: float | None, what: str) -> Watchdog | None:
    """The deadline of one call on ``conn``: past it, the connection's socket is shut,
    the call fails at once and the connection is broken (so never pooled again)."""
    if seconds is None:
        return None
    return Watchdog(seconds, lambda: shut_socket(conn.pgconn.socket), what)


#: Seconds the sync driver's close() waits for its pool's worker threads.
POOL_CLOSE_TIMEOUT = 1.0

#: Seconds a new connection may take (libpq's connect_timeout), so an unreachable
#: host fails instead of hanging on TCP's own timeout.
CONNECT_TIMEOUT = 10
#: Seconds a statement waits for a pooled connection before it fails (psycopg_pool's
#: default): the pool is busy or the server is unreachable.
POOL_TIMEOUT = 30.0


def _import_psycopg() -> Any:
    return import_optional("psycopg", "psycopg")


def _binary_arrays(conn: Any) -> None:
    """Send list parameters in Postgres's binary array format on this connection.

    psycopg's default for a list in a ``$n`` placeholder is the text format, which
    quotes every element through a regular expression: 0.5-0.7 µs per element here,
    against 0.12-0.2 µs for the binary dumper. The completer's and insert_many's
    parallel arrays are riverboat's only per-job parameters, and every statement casts
    its arrays explicitly (``:ids::bigint[]``), so the element types the binary format
    names (int2/4/8, text, bool, timestamptz, bytea) are converted by the server. Only
    the driver's own connections are changed; a connection or pool the caller hands us
    keeps its adapters."""
    from psycopg.types.array import ListBinaryDumper

    conn.adapters.register_dumper(list, ListBinaryDumper)


_translate = translate_error


def _returns_rows(cur: Any) -> bool:
    """Whether the statement just run returned a result set (possibly empty). Not
    ``cur.description``: psycopg builds a Column object per column on every access, 19
    per job row, about 10 µs of a single insert's ~120 µs of client CPU."""
    result = cur.pgresult
    return result is not None and result.nfields > 0


def _libpq_url(url: str) -> str:
    return plain_postgres_url(
        url, ("postgresql+psycopg://", "postgresql+asyncpg://", "postgres+psycopg://")
    )


class _SyncExecutor(StatementRunner):
    """Runs statements on one borrowed connection (a transaction or a caller's conn)."""

    __slots__ = ("_conn", "_cursor_cls", "_stats")

    def __init__(self, conn: Any, stats: DriverStats) -> None:
        psycopg = _import_psycopg()
        self._conn = conn
        self._stats = stats
        self._cursor_cls = psycopg.RawCursor

    def _run(self, stmt: Statement, want_rows: bool) -> Any:
        sql, names = stmt.query.compile("dollar")
        params = stmt.params
        self._stats.count(stmt.query.name)
        watchdog = _watch(self._conn, call_timeout(), stmt.query.name)
        try:
            cur = self._cursor_cls(self._conn)
            cur.execute(sql, [params[n] for n in names], binary=True)
            result = (
                (cur.fetchall() if _returns_rows(cur) else []) if want_rows else int(cur.rowcount)
            )
        except _psycopg_error() as exc:
            if watchdog is not None:
                watchdog.cancel()
            raise _call_error(watchdog, exc) from exc
        if watchdog is not None and watchdog.cancel():
            # The deadline struck as the answer came: the statement ran, but the
            # connection (a transaction's, or the caller's) is broken for the next one.
            raise watchdog.error()
        return result

    def copy(self, batch: CopyBatch) -> int:
        """COPY ``batch``'s rows in (text format): ``insert_many_fast``."""
        self._stats.count("copy_" + batch.table)
        try:
            with self._conn.cursor() as cur, cur.copy(_copy_command(batch)) as copy:
                write_row = copy.write_row
                for row in batch.rows:
                    write_row(row)
        except _psycopg_error() as exc:
            raise _translate(exc) from exc
        return len(batch.rows)


def _copy_command(batch: CopyBatch) -> Any:
    from psycopg import sql

    if batch.schema:
        table = sql.Identifier(batch.schema, batch.table)
    else:
        table = sql.Identifier(batch.table)
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in batch.columns)
    return sql.SQL("COPY {} ({}) FROM STDIN").format(table, columns)


def _psycopg_error() -> type[Exception]:
    error: type[Exception] = _import_psycopg().Error
    return error


ConnT = TypeVar("ConnT")
PoolT = TypeVar("PoolT")


class _PsycopgDriverBase(Generic[ConnT, PoolT]):
    """What the sync and async psycopg drivers share: their arguments, and what a URL,
    a connection or a pool given as ``source`` means."""

    def __init__(
        self,
        source: str | ConnT | PoolT,
        *,
        schema: str | None = None,
        max_pool_size: int = 10,
        prepare: bool = True,
        pool_timeout: float = POOL_TIMEOUT,
        tcp: TcpSettings | None = DEFAULT_TCP,
        lock_timeout: float | None = LOCK_TIMEOUT,
    ) -> None:
        self.dialect = PostgresDialect(schema)
        self.stats = DriverStats()
        self._prepare: bool | None = True if prepare else None
        self.url: str | None = _libpq_url(source) if isinstance(source, str) else None
        # libpq parameters for every connection opened from the URL (keepalives, TCP
        # user timeout), those the URL names left to it; run on every new connection.
        self._connect_params: dict[str, Any] = {
            "connect_timeout": CONNECT_TIMEOUT,
            **(tcp.libpq_params(self.url) if tcp is not None else {}),
        }
        self._tcp = tcp
        self._lock_timeout = lock_timeout
        self._session_sql = _session_setup(lock_timeout)
        self._open(source, max_pool_size, pool_timeout)
        if self.url is not None:  # its own pool, made from the URL
            new_pool_after_fork(self)

    def _open(self, source: Any, max_pool_size: int, pool_timeout: float) -> None:
        """Keep the connection or pool given, or make the pool for ``self.url``."""
        raise NotImplementedError

    def _after_fork(self) -> None:
        """In a forked child (see drivers._fork.new_pool_after_fork): an empty pool. A
        connection or pool the caller gave is theirs to handle."""
        raise NotImplementedError


class PsycopgDriver(
    _PsycopgDriverBase["psycopg.Connection[Any]", "psycopg_pool.ConnectionPool[Any]"],
    StatementRunner,
):
    """Sync psycopg driver over a URL, a ``psycopg.Connection`` or a ``ConnectionPool``.

    With a URL the driver owns a ``psycopg_pool.ConnectionPool`` of autocommit
    connections; with a connection it uses that one (serialised by a lock); with a pool
    it borrows from the caller's pool for each statement.
    """

    capabilities = Capabilities(listen=True, sync=True, copy=True)

    def _open(self, source: Any, max_pool_size: int, pool_timeout: float) -> None:
        psycopg = _import_psycopg()
        self._owned_pool = False
        self._conn: Any = None
        self._pool: Any = None
        self._pool_timeout = pool_timeout
        if self.url is not None:
            # Opened at the first statement, after one direct connection has proved the
            # URL works: a wrong password or database then fails at once with the
            # server's own message, instead of a pool retrying for 30 s in the background.
            self._max_pool_size = max_pool_size
            self._pool = self._new_pool()
            # When each pooled connection was last returned (or opened), for _check_idle.
            self._idle_since: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
            self._owned_pool = True
            self._pool_opened = False
        elif isinstance(source, psycopg.Connection):
            self._conn = source
        else:
            self._pool = source
        self._lock = threading.Lock()

    def _new_pool(self) -> Any:
        """The owned pool, not opened yet."""
        psycopg = _import_psycopg()
        psycopg_pool = import_optional("psycopg_pool", "psycopg")
        return psycopg_pool.ConnectionPool(
            self.url,
            min_size=1,
            max_size=self._max_pool_size,
            kwargs={
                "autocommit": True,
                "cursor_factory": psycopg.RawCursor,
                "prepare_threshold": 0 if self._prepare else None,
                **self._connect_params,
            },
            open=False,
            configure=self._on_connect,
            check=self._check_idle,
            reset=self._note_idle,
            timeout=self._pool_timeout,
        )

    def _pool_wait(self) -> float | None:
        """How long to wait for a pooled connection under a call deadline: within it,
        or the call fails (the pool's own timeout is 30 s). None: no deadline, the
        pool's own timeout."""
        deadline = call_timeout()
        return None if deadline is None else min(deadline, self._pool_timeout)

    def _after_fork(self) -> None:
        set_aside(self._pool)
        self._pool = self._new_pool()
        self._pool_opened = False
        self._idle_since = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # another thread of the parent may have held it

    def _open_pool(self) -> None:
        """Prove the URL with one connection, then open the owned pool (once) and wait
        for its first connection. A statement that found the pool still empty made
        psycopg_pool open a second connection for it (the pool grows for a waiting
        client): three backends started for a client's first statement, not two."""
        psycopg = _import_psycopg()
        with self._lock:
            if self._pool_opened:
                return
            try:
                psycopg.connect(self.url, **self._connect_params).close()
            except psycopg.Error as exc:
                raise _translate(exc) from exc
            self._pool.open(wait=False)
            wait = self._pool_wait()
            try:
                self._pool.wait(timeout=self._pool_timeout if wait is None else wait)
            except psycopg.Error:
                # PoolTimeout: wait() closed the pool, and a closed psycopg_pool cannot
                # be opened again. The next statement proves the URL again, with a new one.
                self._pool = self._new_pool()
                raise
            self._pool_opened = True

    def _failure(self, exc: Exception) -> DriverError:
        """The DriverError for ``exc``. A pool timeout says only that no connection
        came: when a direct connection fails now, say why, with the server's message."""
        psycopg = _import_psycopg()
        err = _translate(exc)
        # Not under a call deadline, which the pool's wait has used up: the connect
        # would take up to its own 10 s more.
        if type(exc).__name__ == "PoolTimeout" and self.url is not None and call_timeout() is None:
            try:
                psycopg.connect(self.url, **self._connect_params).close()
            except psycopg.Error as cause:
                err = DriverError(f"{err}; connecting now fails with: {_translate(cause)}")
                err.__cause__ = cause
        return err

    def _on_connect(self, conn: Any) -> None:
        self.stats.connections_opened += 1
        _binary_arrays(conn)
        if self._prepare:
            conn.execute(self._session_sql)
        self._note_idle(conn)

    def _note_idle(self, conn: Any) -> None:
        self._idle_since[conn] = time.monotonic()

    def _check_idle(self, conn: Any) -> None:
        """Before the owned pool hands out a connection idle for CHECK_IDLE_AFTER or
        more: an empty statement, which raises if the server or a firewall cut it
        meanwhile (the pool then drops it and takes another). A restarted server made
        the next statement on every pooled connection fail instead, one DriverError per
        connection."""
        since = self._idle_since.get(conn)
        if since is None or time.monotonic() - since >= CHECK_IDLE_AFTER:
            # Under a call deadline, the check has it too: a connection to a server that
            # stopped answering held the check, and the call, for ever.
            watchdog = _watch(conn, call_timeout(), "idle connection check")
            try:
                conn.execute("")
            finally:
                if watchdog is not None and watchdog.cancel():
                    # Struck as the answer came: the pool drops a connection whose
                    # check raised, and takes another.
                    raise watchdog.error()

    @contextmanager
    def _lease(self) -> Iterator[Any]:
        self.stats.leases += 1
        if self._pool is None:
            with self._lock:
                yield self._conn
            return
        if self._owned_pool and not self._pool_opened:
            self._open_pool()
        with self._pool.connection(timeout=self._pool_wait()) as conn:
            yield conn
            if not conn.autocommit and conn.info.transaction_status != 0:
                conn.commit()

    def _run(self, stmt: Statement, want_rows: bool) -> Any:
        sql, names = stmt.query.compile("dollar")
        params = stmt.params
        args = [params[n] for n in names]
        self.stats.count(stmt.query.name)
        psycopg = _import_psycopg()
        # The lease is inside the try: a pool timeout or a failed connect is a
        # psycopg.Error too, and must surface as DriverError like any other.
        watchdog = None
        try:
            with self._lease() as conn:
                # Under call_deadline (the CLI's commands): a server that stopped
                # answering held the call, and the command, for ever.
                watchdog = _watch(conn, call_timeout(), stmt.query.name)
                try:
                    cur = psycopg.RawCursor(conn)
                    cur.execute(sql, args, prepare=self._prepare, binary=True)
                    if want_rows:
                        return cur.fetchall() if _returns_rows(cur) else []
                    return int(cur.rowcount)
                finally:
                    # Before the connection goes back to the pool: a deadline that
                    # struck as the answer came broke it, and the pool must drop it.
                    if watchdog is not None and watchdog.cancel():
                        conn.close()
        except psycopg.Error as exc:
            if watchdog is not None and watchdog.missed:
                raise watchdog.error() from exc
            raise self._failure(exc) from exc

    @contextmanager
    def transaction(self) -> Iterator[_SyncExecutor]:
        psycopg = _import_psycopg()
        try:
            with self._lease() as conn, conn.transaction():
                yield _SyncExecutor(conn, self.stats)
        except psycopg.Error as exc:  # the lease, BEGIN or COMMIT failed
            raise self._failure(exc) from exc

    def wrap(self, conn: Any) -> _SyncExecutor:
        """An executor over the caller's connection; their transaction stays theirs."""
        psycopg = _import_psycopg()
        return _SyncExecutor(
            caller_connection(conn, psycopg.Connection, "a psycopg.Connection"), self.stats
        )

    def execute_script(self, sql: str) -> None:
        psycopg = _import_psycopg()
        with self._lease() as conn:
            try:
                # Plain cursors accept several statements when there are no parameters.
                with psycopg.ClientCursor(conn) as cur:
                    cur.execute(sql)
            except psycopg.Error as exc:
                raise _translate(exc) from exc

    def close(self) -> None:
        if self._owned_pool:
            # Its workers are daemon threads: one still connecting to a server that
            # does not answer is left to end on its own, not waited for 5 s.
            self._pool.close(timeout=POOL_CLOSE_TIMEOUT)

    def async_driver(self) -> AsyncPsycopgDriver:
        """An async driver on the same database, for running workers from sync code."""
        if self.url is None:
            raise TypeError("only a driver built from a URL can make its async twin")
        return AsyncPsycopgDriver(
            self.url,
            schema=self.dialect.schema,
            prepare=bool(self._prepare),
            tcp=self._tcp,
            lock_timeout=self._lock_timeout,
        )


class _AsyncExecutor(AsyncConnectionExecutor):
    __slots__ = ()

    async def _run(self, stmt: Statement, want_rows: bool) -> Any:
        psycopg = _import_psycopg()
        sql, names = stmt.query.compile("dollar")
        params = stmt.params
        self._stats.count(stmt.query.name)
        try:
            cur = psycopg.AsyncRawCursor(self._conn)
            await cur.execute(sql, [params[n] for n in names], binary=True)
            if want_rows:
                return await cur.fetchall() if _returns_rows(cur) else []
            return int(cur.rowcount)
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    async def copy(self, batch: CopyBatch) -> int:
        """COPY ``batch``'s rows in (text format): ``insert_many_fast``."""
        psycopg = _import_psycopg()
        self._stats.count("copy_" + batch.table)
        try:
            async with self._conn.cursor() as cur, cur.copy(_copy_command(batch)) as copy:
                write_row = copy.write_row
                for row in batch.rows:
                    await write_row(row)
        except psycopg.Error as exc:
            raise _translate(exc) from exc
        return len(batch.rows)


class _AsyncListener:
    """One dedicated autocommit connection running LISTEN.

    Under a call deadline (:func:`~riverboat.drivers.base.call_deadline`, which the
    notifier sets) each command must answer within it, and :meth:`notifications` checks
    the connection with a ``SELECT 1`` every deadline's worth of seconds: a connection
    that went silent (its peer's kernel still acknowledging, nothing answering) fails
    the iteration instead of waiting for ever for notifications that can't come."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def listen(self, channel: str) -> None:
        await self._command('LISTEN "' + channel.replace('"', '""') + '"')

    async def unlisten(self, channel: str) -> None:
        await self._command('UNLISTEN "' + channel.replace('"', '""') + '"')

    async def _command(self, sql: str, what: str = "LISTEN connection") -> None:
        watchdog = _watch(self._conn, call_timeout(), what)
        try:
            await self._conn.execute(sql)
        except _psycopg_error() as exc:  # a dropped connection, like any other statement
            raise _call_error(watchdog, exc) from exc
        finally:
            if watchdog is not None:
                watchdog.cancel()

    async def notifications(self) -> AsyncIterator[Notification]:
        psycopg = _import_psycopg()
        check_every = call_timeout()
        try:
            while True:
                # Without a deadline notifies() never ends; with one it returns after
                # check_every seconds (the lock it holds is free again for the check).
                async for note in self._conn.notifies(timeout=check_every):
                    yield Notification(note.channel, note.payload)
                await self._command("SELECT 1", "LISTEN connection health check")
        except psycopg.Error as exc:
            raise _translate(exc) from exc

    async def close(self) -> None:
        await self._conn.close()


class _Pooled:
    """A pooled connection, the raw cursor reused for every statement on it, when it was
    opened and when it was last handed back (``time.monotonic()``)."""

    __slots__ = ("conn", "cursor", "expires", "idle_since")

    def __init__(self, conn: Any, cursor: Any, expires: float) -> None:
        self.conn = conn
        self.cursor = cursor
        self.expires = expires
        self.idle_since = 0.0


#: A connection is closed once this old (seconds, minus up to 10 % jitter so a pool's
#: connections don't all reconnect at once): server-side memory, and load balancers or
#: proxies that cut long-lived connections, as psycopg_pool's ``max_lifetime`` (1 h).
MAX_LIFETIME = 3600.0
#: An idle connection is checked with an empty statement before use once it has sat
#: this long (seconds), as pgx's pool does: a firewall or server restart may have cut it
#: meanwhile. Busy connections (the hot path) are never idle that long, so they pay
#: nothing; a quiet client pays one round trip on its first statement after a pause.
CHECK_IDLE_AFTER = 1.0


def _left(deadline: float) -> float:
    """Seconds until ``deadline`` (``time.monotonic()``), never negative."""
    return max(deadline - time.monotonic(), 0.0)


class _AsyncPool:
    """A minimal pool of autocommit connections for the runtime's hot path.

    psycopg_pool does more per checkout (health checks, resets) than a lease of one
    autocommit statement needs. This pool bounds open connections with a semaphore
    (waiting at most ``timeout`` seconds for one), hands out an idle one or opens a new
    one, and drops connections that come back broken or mid-transaction (the latter
    counted as resets). A connection idle for :data:`CHECK_IDLE_AFTER` is checked before
    use, and one older than :data:`MAX_LIFETIME` is closed when it comes back. Each
    connection keeps one raw cursor, so a statement costs no cursor set-up.
    """

    def __init__(
        self,
        url: str,
        max_size: int,
        prepare: bool,
        stats: DriverStats,
        timeout: float,
        connect_params: dict[str, Any],
        session_sql: str,
    ) -> None:
        self._url = url
        self._prepare = prepare
        self._connect_params = connect_params
        self._session_sql = session_sql
        self._idle: list[_Pooled] = []
        self._slots = asyncio.Semaphore(max_size)
        self._max_size = max_size
        self._timeout = timeout
        self._stats = stats
        self._closed = False
        self._closing: set[asyncio.Task[None]] = set()
        # Connections handed out and not yet back: close() closes them too, so none is
        # left to the garbage collector still open when the driver is closed mid-call
        # (a stop that abandoned a call on a silent connection).
        self._leased: set[_Pooled] = set()

    async def get(self, deadline: float | None = None) -> _Pooled:
        """A connection: an idle one or a new one. ``deadline`` (``time.monotonic()``)
        is the call's, and bounds the wait for a free slot, the check of a connection
        idle for long and the connect."""
        if self._closed:
            raise DriverError("the driver is closed")
        if not self._slots.locked():
            await self._slots.acquire()  # free at once: no timer to set up
        else:
            wait = self._timeout if deadline is None else min(self._timeout, _left(deadline))
            try:
                async with asyncio.timeout(wait):
                    await self._slots.acquire()
            except TimeoutError:
                if wait < self._timeout:
                    raise DeadlineExceededError(
                        f"no connection free within the call's deadline: all "
                        f"{self._max_size} of the pool's connections are in use"
                    ) from None
                raise DriverError(
                    f"no connection free after {self._timeout:g} s: all {self._max_size} "
                    "of the pool's connections are in use (max_pool_size)"
                ) from None
        try:
            now = time.monotonic()
            while self._idle:
                pooled = self._idle.pop()
                if pooled.conn.closed or pooled.conn.broken:
                    self._close_later(pooled.conn)
                    continue
                if now - pooled.idle_since >= CHECK_IDLE_AFTER and not await self._alive(
                    pooled, deadline
                ):
                    continue
                self._leased.add(pooled)
                return pooled
            pooled = await self._connect(deadline)
            self._leased.add(pooled)
            return pooled
        except BaseException:
            self._slots.release()
            raise

    async def _alive(self, pooled: _Pooled, deadline: float | None) -> bool:
        watchdog = _watch(pooled.conn, None if deadline is None else _left(deadline), "check")
        try:
            await pooled.conn.execute("")
        except Exception:  # any failure means this connection is done
            self._close_later(pooled.conn)
            return False
        finally:
            if watchdog is not None:
                watchdog.cancel()
        return True

    async def _connect(self, deadline: float | None = None) -> _Pooled:
        psycopg = _import_psycopg()
        try:
            # Cancelling a connect in progress costs nothing (no query to cancel).
            async with asyncio.timeout(None if deadline is None else _left(deadline)):
                conn = await psycopg.AsyncConnection.connect(
                    self._url,
                    autocommit=True,
                    prepare_threshold=0 if self._prepare else None,
                    **self._connect_params,
                )
        except TimeoutError:
            raise DeadlineExceededError("connecting took longer than the call's deadline") from None
        except psycopg.Error as exc:
            raise _translate(exc) from exc
        _binary_arrays(conn)
        if self._prepare:
            left = None if deadline is None else _left(deadline)
            watchdog = _watch(conn, left, "session setup")
            try:
                await conn.execute(self._session_sql)
            except psycopg.Error as exc:
                self._close_later(conn)
                raise _call_error(watchdog, exc) from exc
            except BaseException:  # cancelled (a stop) before the pool owned it
                self._close_later(conn)
                raise
            finally:
                if watchdog is not None:
                    watchdog.cancel()
        self._stats.connections_opened += 1
        lifetime = MAX_LIFETIME * (1.0 - 0.1 * random.random())
        return _Pooled(conn, psycopg.AsyncRawCursor(conn), time.monotonic() + lifetime)

    def put(self, pooled: _Pooled) -> None:
        """Hand a connection back (no await: closing one runs in the background)."""
        conn = pooled.conn
        self._leased.discard(pooled)
        try:
            if conn.closed:
                return
            if conn.broken:  # failed, or dropped at its deadline: close its socket
                self._close_later(conn)
                return
            if conn.info.transaction_status != 0:  # not IDLE: the lease left a mess
                self._stats.resets += 1
                self._close_later(conn)
                return
            now = time.monotonic()
            if self._closed or now >= pooled.expires:
                self._close_later(conn)
                return
            pooled.idle_since = now
            self._idle.append(pooled)
        finally:
            self._slots.release()

    def discard_idle(self) -> None:
        """Close every idle connection: the next statements open fresh ones."""
        idle, self._idle = self._idle, []
        for pooled in idle:
            self._close_later(pooled.conn)

    def _close_later(self, conn: Any) -> None:
        task = asyncio.ensure_future(conn.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for pooled in idle:
            await pooled.conn.close()
        leased, self._leased = list(self._leased), set()
        for pooled in leased:  # a call still under way fails: the driver is closing
            await pooled.conn.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


class AsyncPsycopgDriver(
    _PsycopgDriverBase["psycopg.AsyncConnection[Any]", "psycopg_pool.AsyncConnectionPool[Any]"],
    AsyncStatementRunner,
):
    """Async psycopg driver over a URL, an ``AsyncConnection`` or an ``AsyncConnectionPool``."""

    capabilities = Capabilities(listen=True, async_=True, copy=True)

    def _open(self, source: Any, max_pool_size: int, pool_timeout: float) -> None:
        psycopg = _import_psycopg()
        self._conn: Any = None
        self._user_pool: Any = None
        self._pool: _AsyncPool | None = None
        # Kept for _after_fork, which opens the same again.
        self._pool_args = (max_pool_size, pool_timeout)
        if self.url is not None:
            self._pool = _AsyncPool(
                self.url,
                max_pool_size,
                bool(self._prepare),
                self.stats,
                pool_timeout,
                self._connect_params,
                self._session_sql,
            )
        elif isinstance(source, psycopg.AsyncConnection):
            self._conn = source
        else:
            self._user_pool = source
        self._conn_lock = asyncio.Lock()

    @asynccontextmanager
    async def _lease(self) -> AsyncIterator[Any]:
        self.stats.leases += 1
        if self._pool is not None:
            pooled = await self._pool.get()
            try:
                yield pooled.conn
            finally:
                self._pool.put(pooled)
        elif self._conn is not None:
            async with self._conn_lock:
                yield self._conn
        else:
            async with self._user_pool.connection() as conn:
                yield conn
                if not conn.autocommit and conn.info.transaction_status != 0:
                    await conn.commit()

    def _after_fork(self) -> None:
        set_aside(self._pool)
        self._open(self.url, *self._pool_args)

    async def _run(self, stmt: Statement, want_rows: bool) -> Any:
        sql, names = stmt.query.compile("dollar")
        params = stmt.params
        args = [params[n] for n in names]
        self.stats.count(stmt.query.name)
        pool = self._pool
        timeout = call_timeout()
        if pool is not None:
            # The hot path, spelled out: no context manager, the connection's own cursor.
            self.stats.leases += 1
            if timeout is None:
                pooled = await pool.get()
                watchdog = None
            else:
                deadline = time.monotonic() + timeout
                pooled = await pool.get(deadline)
                watchdog = Watchdog(
                    _left(deadline),
                    lambda: shut_socket(pooled.conn.pgconn.socket),
                    stmt.query.name,
                    timeout,
                )
            try:
                cur = pooled.cursor
                await cur.execute(sql, args, prepare=self._prepare, binary=True)
                if want_rows:
                    return await cur.fetchall() if _returns_rows(cur) else []
                return int(cur.rowcount)
            except _psycopg_error() as exc:
                if pooled.conn.broken or pooled.conn.closed:
                    # A server restart or pg_terminate_backend takes the idle siblings
                    # with it, and a connection that stopped answering usually has
                    # silent siblings too; drop them now rather than fail on each.
                    pool.discard_idle()
                raise _call_error(watchdog, exc) from exc
            finally:
                if watchdog is not None:
                    watchdog.cancel()
                pool.put(pooled)
        psycopg = _import_psycopg()
        async with self._lease() as conn:
            watchdog = _watch(conn, timeout, stmt.query.name)
            try:
                cur = psycopg.AsyncRawCursor(conn)
                await cur.execute(sql, args, prepare=self._prepare, binary=True)
                if want_rows:
                    return await cur.fetchall() if _returns_rows(cur) else []
                return int(cur.rowcount)
            except psycopg.Error as exc:
                raise _call_error(watchdog, exc) from exc
            finally:
                if watchdog is not None:
                    watchdog.cancel()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_AsyncExecutor]:
        psycopg = _import_psycopg()
        try:
            async with self._lease() as conn, conn.transaction():
                yield _AsyncExecutor(conn, self.stats)
        except psycopg.Error as exc:  # the lease, BEGIN or COMMIT failed, as in the sync twin
            raise _translate(exc) from exc

    def wrap(self, conn: Any) -> _AsyncExecutor:
        """An executor over the caller's async connection; their transaction stays theirs."""
        psycopg = _import_psycopg()
        return _AsyncExecutor(
            caller_connection(conn, psycopg.AsyncConnection, "a psycopg.AsyncConnection"),
            self.stats,
        )

    async def execute_script(self, sql: str) -> None:
        psycopg = _import_psycopg()
        async with self._lease() as conn:
            try:
                # Client-side binding: the simple protocol, so several statements go at once.
                async with psycopg.AsyncClientCursor(conn) as cur:
                    await cur.execute(sql)
            except psycopg.Error as exc:
                raise _translate(exc) from exc

    async def listener(self) -> _AsyncListener:
        psycopg = _import_psycopg()
        if self.url is None:
            raise DriverError("LISTEN needs a driver built from a URL (a dedicated connection)")
        try:
            async with asyncio.timeout(call_timeout()):
                conn = await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, **self._connect_params
                )
        except TimeoutError:
            raise DeadlineExceededError(
                "connecting the LISTEN connection took longer than the call's deadline"
            ) from None
        except psycopg.Error as exc:
            raise _translate(exc) from exc
        self.stats.connections_opened += 1
        return _AsyncListener(conn)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
