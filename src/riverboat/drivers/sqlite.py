"""SQLite driver, sync (:class:`SqliteDriver`) and async (:class:`AsyncSqliteDriver`).

SQLite allows one writer at a time, so each driver keeps a single connection and
serialises its users: a sync driver behind a re-entrant lock, an async one on a dedicated
worker thread. Connections are in autocommit mode; ``transaction()`` opens with
``BEGIN IMMEDIATE`` so a transaction takes the write lock before it reads and can never
deadlock upgrading a read lock. "database is locked" from other processes is waited out
(``busy_timeout``) and then retried with backoff, so it does not reach callers.

Notifications are rows of the ``river_notification`` outbox, polled by
:class:`SqliteListener`. When a connection of this process commits an outbox row, the
listeners of this process on the same file poll at once (``_LocalWakes``), so a job
inserted by any client of the process wakes its producers in milliseconds, not at
the next poll; other processes still see it at their next poll.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from riverboat._sql import Statement
from riverboat.dialect.sqlite import SqliteDialect
from riverboat.drivers._fork import new_pool_after_fork, set_aside
from riverboat.drivers._sqlite_module import sqlite_module
from riverboat.drivers.base import (
    AsyncStatementRunner,
    Capabilities,
    DriverStats,
    Notification,
    StatementRunner,
    translate_error,
)
from riverboat.errors import DriverError, InvalidInputError

__all__ = [
    "AsyncSqliteDriver",
    "SqliteDriver",
    "SqliteListener",
    "sqlite_path_from_url",
    "sqlite_schema_path",
]

T = TypeVar("T")

_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes)
_RETRY_FOR = 60.0  # seconds of "database is locked" retries before giving up
# A statement still waiting for the write lock after this long says so, once: another
# process holds it (a stopped or hung one keeps it until it resumes or dies).
_WARN_AFTER = 5.0
# A write this slow waited for another connection's write lock (DriverStats.blocked_at):
# riverboat's own writes take milliseconds, a large batch well under this.
_BLOCKED_AFTER = 1.0
_MEMORY = ":memory:"

log = logging.getLogger("riverboat.sqlite")


def sqlite_path_from_url(url_or_path: str | Path) -> str:
    """The file path of ``sqlite:///relative``, ``sqlite:////absolute``,
    ``sqlite:///:memory:`` or a plain path."""
    if isinstance(url_or_path, Path):
        return str(url_or_path)
    if not isinstance(url_or_path, str) or not url_or_path:
        raise InvalidInputError("database_url", "must be a sqlite:/// URL or a file path")
    text = url_or_path
    if text.startswith("sqlite:"):
        rest = text[len("sqlite:") :]
        if rest.startswith("///"):
            path = rest[3:]
        elif rest.startswith("//"):
            raise InvalidInputError(
                "database_url",
                "SQLite URLs have no host: use sqlite:///relative/path or sqlite:////abs/path",
            )
        else:
            path = rest
        if "?" in path:
            raise InvalidInputError("database_url", "SQLite URL query options are not supported")
        if not path:
            raise InvalidInputError("database_url", "the SQLite URL names no file")
        return path
    return text


def _is_busy(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) in _BUSY_CODES
    message = str(exc)
    return "database is locked" in message or "database table is locked" in message


_translate = translate_error


def _params(stmt: Statement) -> Mapping[str, Any]:
    params = stmt.params
    return params if isinstance(params, dict) else dict(params)


def _split_script(sql: str, complete: Callable[[str], bool]) -> list[str]:
    """Split a script into statements; ``complete`` (sqlite3.complete_statement) knows
    about semicolons inside strings, comments and trigger bodies."""
    statements: list[str] = []
    buffer = ""
    for piece in sql.split(";"):
        buffer += piece + ";"
        if complete(buffer):
            if buffer.strip(" \t\r\n;"):
                statements.append(buffer)
            buffer = ""
    if buffer.strip(" \t\r\n;"):
        statements.append(buffer)
    return statements


def _writes_outbox(query: Any, cache: dict[str, bool] = {}) -> bool:  # noqa: B006
    """Whether a statement inserts ``river_notification`` rows (cached per query name:
    the dialect's queries never change)."""
    known = cache.get(query.name)
    if known is None:
        text = " ".join(query.text.split())
        known = cache[query.name] = "river_notification (payload, topic)" in text
    return known


class _LocalWakes:
    """The process's SQLite listeners by the file their outbox is in. A connection that
    commits outbox rows pokes them, from whatever thread it runs on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_file: dict[str, set[SqliteListener]] = {}

    def add(self, file: str, listener: SqliteListener) -> None:
        with self._lock:
            self._by_file.setdefault(file, set()).add(listener)

    def discard(self, file: str, listener: SqliteListener) -> None:
        with self._lock:
            listeners = self._by_file.get(file)
            if listeners is not None:
                listeners.discard(listener)
                if not listeners:
                    del self._by_file[file]

    def poke(self, file: str) -> None:
        with self._lock:
            listeners = list(self._by_file.get(file, ()))
        for listener in listeners:
            listener.poke()


_local_wakes = _LocalWakes()


def _lenient_text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _outbox_file(path: str, schema: str | None, attach_path: str | None) -> str | None:
    """The file holding the outbox a connection writes (None: a private in-memory
    database, which no other connection sees)."""
    file = attach_path if schema is not None and attach_path is not None else path
    if file in (_MEMORY, "") or file.startswith("file:"):
        return None
    return os.path.realpath(file)


def _open_failed(exc: BaseException, path: str) -> DriverError:
    """The error for a file SQLite could not open, naming it: its own message ("unable
    to open database file") says neither which file nor why."""
    error = _translate(exc)
    if path == ":memory:" or path.startswith("file:"):
        return error
    folder = os.path.dirname(os.path.abspath(path))
    why = "" if os.path.isdir(folder) else f"; its directory {folder} does not exist"
    opened = DriverError(f"cannot open the SQLite file {path}{why} ({error})")
    opened.__cause__ = exc
    return opened


class _Connection:
    """One SQLite connection with riverboat's pragmas; used from one thread at a time."""

    def __init__(
        self,
        path: str,
        schema: str | None,
        attach_path: str | None,
        busy_timeout: float,
        stats: DriverStats,
    ) -> None:
        self.module = sqlite_module()
        self.stats = stats
        self.outbox_file = _outbox_file(path, schema, attach_path)
        self._outbox_written = False  # outbox rows in the open transaction
        try:
            self.conn = self.module.connect(
                path,
                isolation_level=None,
                check_same_thread=False,
                timeout=busy_timeout,
                cached_statements=256,
            )
        except self.module.Error as exc:
            raise _open_failed(exc, path) from exc
        stats.connections_opened += 1
        # Text that is not UTF-8 (written by another program: SQLite stores what it is
        # given) is read with U+FFFD in place of the bad bytes, as Go's JSON decoding
        # reads it, instead of failing the statement: a claim had already marked every
        # job it took running when its rows failed to decode, and the good jobs claimed
        # beside the bad one waited for the rescuer. (A Python text factory costs about
        # 0.25 µs a value.)
        self.conn.text_factory = _lenient_text
        try:
            self._configure(schema, attach_path, busy_timeout)
        except BaseException:
            self.conn.close()
            raise

    def _configure(self, schema: str | None, attach_path: str | None, timeout: float) -> None:
        def run(sql: str, *args: Any) -> None:
            self.retrying(lambda: self.conn.execute(sql, args).fetchall(), wrote=False)

        run(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        run("PRAGMA foreign_keys = ON")
        if schema is not None and attach_path is not None:
            run(f'ATTACH DATABASE ? AS "{schema}"', attach_path)
        for db in ["main"] + ([schema] if schema else []):
            # Switching to WAL needs a moment of exclusive access, hence the retry; it
            # is a no-op for in-memory databases and files already in WAL mode.
            run(f'PRAGMA "{db}".journal_mode = WAL')
            run(f'PRAGMA "{db}".synchronous = NORMAL')

    def retrying(self, operation: Callable[[], T], wrote: bool | Callable[[], bool] = True) -> T:
        """Run ``operation``, retrying while SQLite reports the database busy.

        Only for operations that leave nothing behind when they fail: a single
        autocommit statement, BEGIN, or COMMIT. ``wrote`` (or what it returns once the
        operation succeeded): whether it took the write lock, so that a slow success
        means it waited for another connection's (``DriverStats.blocked_at``)."""
        started = time.monotonic()
        deadline = started + _RETRY_FOR
        delay = 0.001
        warned = False
        while True:
            try:
                result = operation()
            except self.module.Error as exc:
                now = time.monotonic()
                if _is_busy(exc):
                    self.stats.blocked_at = now
                if not _is_busy(exc) or now >= deadline:
                    raise _translate(exc) from exc
                if not warned and now - started >= _WARN_AFTER:
                    warned = True
                    log.warning(
                        "the SQLite database has been locked by another process's write "
                        "for %.0fs (a stopped or hung process keeps SQLite's write lock "
                        "until it resumes or exits); still retrying, for up to %.0fs",
                        now - started,
                        _RETRY_FOR,
                    )
            else:
                ended = time.monotonic()
                if ended - started >= _BLOCKED_AFTER and (wrote() if callable(wrote) else wrote):
                    # A write this slow waited inside SQLite's busy handler (up to
                    # busy_timeout) for another connection's write lock; a slow read
                    # (a big list) is not that.
                    self.stats.blocked_at = ended
                return result
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.1)

    @property
    def in_transaction(self) -> bool:
        return bool(self.conn.in_transaction)

    def run(self, stmt: Statement, want_rows: bool, retry: bool) -> Any:
        sql, _ = stmt.query.compile("named")
        params = _params(stmt)
        self.stats.count(stmt.query.name)

        changed = -1  # rows the statement wrote (-1: not known)

        def once() -> Any:
            nonlocal changed
            cur = self.conn.execute(sql, params)
            if want_rows:
                rows = cur.fetchall() if cur.description is not None else []
                changed = cur.rowcount
                return rows
            changed = cur.rowcount
            return changed

        if retry:
            # rowcount is -1 for a statement that wrote nothing (a SELECT).
            result = self.retrying(once, wrote=lambda: changed != -1)
        else:
            try:
                result = once()
            except self.module.Error as exc:
                raise _translate(exc) from exc
        # An outbox INSERT that wrote no row (the scheduler's, every run, with nothing
        # due) wakes nobody: each such commit woke this process's listeners for a read.
        if self.outbox_file is not None and changed != 0 and _writes_outbox(stmt.query):
            if self.conn.in_transaction:
                self._outbox_written = True
            else:
                _local_wakes.poke(self.outbox_file)
        return result

    def run_statement(self, stmt: Statement, want_rows: bool) -> Any:
        """A statement (or a chain) on this connection, atomically.

        Outside a transaction a lone statement runs in autocommit (and may be retried); a
        chain gets its own IMMEDIATE transaction. Inside a transaction nothing is retried,
        since a half-done transaction cannot be replayed from here."""
        then = stmt.then
        if self.in_transaction:
            result = self.run(stmt, want_rows, retry=False)
            for follow in then:
                self.run(follow, False, retry=False)
            return result
        if not then:
            return self.run(stmt, want_rows, retry=True)
        with self.transaction():
            result = self.run(stmt, want_rows, retry=False)
            for follow in then:
                self.run(follow, False, retry=False)
            return result

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self.in_transaction:
            # Nested use on the same connection (a migrator calling execute_script inside
            # its transaction): a savepoint keeps the inner part all-or-nothing.
            name = f"rb_{id(self)}_{time.monotonic_ns()}"
            self.retrying(lambda: self.conn.execute(f'SAVEPOINT "{name}"'))
            try:
                yield
            except BaseException:
                self.conn.execute(f'ROLLBACK TO "{name}"')
                self.conn.execute(f'RELEASE "{name}"')
                raise
            self.conn.execute(f'RELEASE "{name}"')
            return
        self.retrying(lambda: self.conn.execute("BEGIN IMMEDIATE"))
        self._outbox_written = False
        try:
            yield
        except BaseException:
            self._outbox_written = False
            if self.conn.in_transaction:
                try:
                    self.conn.execute("ROLLBACK")
                except self.module.Error:
                    pass
            raise
        try:
            self.retrying(lambda: self.conn.execute("COMMIT"))
        except BaseException:
            self._outbox_written = False
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        if self._outbox_written:
            self._outbox_written = False
            if self.outbox_file is not None:
                _local_wakes.poke(self.outbox_file)

    def execute_script(self, sql: str) -> None:
        statements = _split_script(sql, self.module.complete_statement)
        with self.transaction():
            for text in statements:
                try:
                    self.conn.execute(text)
                except self.module.Error as exc:
                    raise _translate(exc) from exc

    def close(self) -> None:
        try:
            self.conn.close()
        except self.module.Error as exc:
            raise _translate(exc) from exc


def sqlite_schema_path(path: str, schema: str | None) -> str | None:
    """The file a driver opened on ``path`` attaches for ``schema`` (None: no file of
    its own, the main database's): ``app-<schema>.sqlite3`` beside ``app.sqlite3``."""
    return _attach_path(path, schema, None)


def _attach_path(path: str, schema: str | None, attach: Mapping[str, str] | None) -> str | None:
    if schema is None:
        return None
    if attach and schema in attach:
        return attach[schema]
    if schema in ("main", "temp"):
        return None
    if path == _MEMORY or path == "":
        return _MEMORY
    file = Path(path)
    return str(file.with_name(f"{file.stem}-{schema}{file.suffix}"))


class _SyncExecutor(StatementRunner):
    """Runs statements on a connection already inside a transaction (ours or the
    caller's); nothing is retried there."""

    __slots__ = ("_call", "_conn")

    def __init__(self, conn: Any, call: Callable[[Statement, bool], Any]) -> None:
        self._conn = conn
        self._call = call

    def _run(self, stmt: Statement, want_rows: bool) -> Any:
        return self._call(stmt, want_rows)


class _SqliteDriverBase:
    """Where a SQLite driver's database is, and how to open a connection to it: the
    part the sync and async drivers share (they differ in who runs the connection)."""

    def __init__(
        self,
        url_or_path: str | Path,
        schema: str | None = None,
        *,
        attach: Mapping[str, str] | None = None,
        busy_timeout: float = 10.0,
    ) -> None:
        self.dialect = SqliteDialect(schema)
        self.stats = DriverStats()
        self.path = sqlite_path_from_url(url_or_path)
        self.url = url_or_path if isinstance(url_or_path, str) else f"sqlite:///{url_or_path}"
        self._attach = dict(attach) if attach else None
        self._attach_path = _attach_path(self.path, self.dialect.schema, attach)
        self._busy_timeout = busy_timeout
        self._closed = False
        self._start()
        if _MEMORY not in (self.path, self._attach_path):
            # A process forked from this one opens the file again (an in-memory database,
            # the main one or the schema's, exists only in the copy it inherited):
            # SQLite's file locks are per process, and a connection used across fork()
            # can corrupt the database.
            new_pool_after_fork(self)

    def _start(self) -> None:
        """Set up whoever runs the connection (a lock, or a thread)."""
        raise NotImplementedError

    def _after_fork(self) -> None:
        """In a forked child (see drivers._fork.new_pool_after_fork): set the inherited
        connection (and thread) aside; a new one opens at the first statement."""
        raise NotImplementedError

    def _open_connection(self, stats: DriverStats | None = None) -> _Connection:
        """A connection counting into ``stats`` (default: the driver's)."""
        return _Connection(
            self.path,
            self.dialect.schema,
            self._attach_path,
            self._busy_timeout,
            self.stats if stats is None else stats,
        )


class SqliteDriver(_SqliteDriverBase, StatementRunner):
    """Sync SQLite driver over a URL or a path.

    ``schema`` names an attached database (River's notion of a schema on SQLite). It is
    attached from ``attach[schema]`` if given, otherwise from a sibling file
    ``<stem>-<schema><suffix>`` (or a private in-memory database for ``:memory:``).
    With ``schema=None`` everything lives in the main database.
    """

    capabilities = Capabilities(listen=False, sync=True)

    def _start(self) -> None:
        self._lock = threading.RLock()
        self._conn: _Connection | None = self._open_connection()

    def _after_fork(self) -> None:
        set_aside(self._conn)
        self._conn = None
        # Another thread of the parent may have held it. (If it held a write
        # transaction, the file stays locked for this process: SQLite's lock records
        # are the process's. docs/drivers.md: no fork inside a transaction.)
        self._lock = threading.RLock()

    @contextmanager
    def _lease(self) -> Iterator[_Connection]:
        with self._lock:
            if self._closed:
                raise DriverError("the driver is closed")
            self.stats.leases += 1
            if self._conn is None:
                self._conn = self._open_connection()
            yield self._conn

    def _run(self, stmt: Statement, want_rows: bool) -> Any:
        with self._lease() as conn:
            return conn.run_statement(stmt, want_rows)

    @contextmanager
    def transaction(self) -> Iterator[_SyncExecutor]:
        """An IMMEDIATE transaction; commits on success, rolls back on an exception."""
        with self._lease() as conn, conn.transaction():
            yield _SyncExecutor(conn.conn, conn.run_statement)

    def wrap(self, conn: Any) -> _SyncExecutor:
        """An executor over the caller's sqlite3 connection (their transaction stays
        theirs), or over an executor from :meth:`transaction`."""
        return _wrap_connection(conn, self.stats)

    def execute_script(self, sql: str) -> None:
        """Run several statements (a migration) atomically: in a transaction of their
        own, or in a savepoint when a transaction of this driver is open."""
        with self._lease() as conn:
            conn.execute_script(sql)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                if self._conn is not None:
                    self._conn.close()

    def async_driver(self) -> AsyncSqliteDriver:
        """An async driver on the same database (its own connection)."""
        return AsyncSqliteDriver(
            self.url,
            schema=self.dialect.schema,
            attach=self._attach,
            busy_timeout=self._busy_timeout,
        )

    def __enter__(self) -> SqliteDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _AsyncExecutor(AsyncStatementRunner):
    __slots__ = ("_call",)

    def __init__(self, call: Callable[[Statement, bool], Any]) -> None:
        self._call = call

    async def _run(self, stmt: Statement, want_rows: bool) -> Any:
        return await self._call(stmt, want_rows)


class AsyncSqliteDriver(_SqliteDriverBase, AsyncStatementRunner):
    """Async SQLite driver: one connection, worked by one dedicated thread.

    Every call is queued to that thread, so statements never run concurrently on the
    connection and the event loop never blocks on SQLite. A transaction holds the
    driver for its task: other tasks wait until it commits or rolls back.
    """

    capabilities = Capabilities(listen=True, async_=True)

    def _start(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="riverboat-sqlite")
        self._conn: _Connection | None = None
        # Owner task of the open transaction (re-entrant for that task only).
        self._owner: asyncio.Task[Any] | None = None
        self._depth = 0
        self._free: asyncio.Condition | None = None

    def _after_fork(self) -> None:
        # The executor's thread is not in the child, and the executor does not start
        # another: every statement there waited for ever.
        set_aside((self._conn, self._thread))
        self._start()

    def _connection(self) -> _Connection:
        # Runs on the worker thread: the connection is opened lazily there.
        if self._conn is None:
            self._conn = self._open_connection()
        return self._conn

    async def _on_thread(self, fn: Callable[[], T]) -> T:
        if self._closed:
            raise DriverError("the driver is closed")
        loop = asyncio.get_running_loop()
        # The job is queued before any cancellation can land, and the single thread runs
        # jobs in order, so a later ROLLBACK always follows the statement it undoes.
        return await loop.run_in_executor(self._thread, fn)

    def _condition(self) -> asyncio.Condition:
        if self._free is None:
            self._free = asyncio.Condition()
        return self._free

    @asynccontextmanager
    async def _hold(self) -> AsyncIterator[bool]:
        """Exclusive use of the connection for the current task; yields whether this
        is the outermost hold."""
        task = asyncio.current_task()
        if self._owner is not None and self._owner is task:
            self._depth += 1
            try:
                yield False
            finally:
                self._depth -= 1
            return
        free = self._condition()
        async with free:
            await free.wait_for(lambda: self._owner is None)
            self._owner = task
            self._depth = 1
        try:
            yield True
        finally:
            async with free:
                self._owner = None
                self._depth = 0
                free.notify_all()

    async def _run(self, stmt: Statement, want_rows: bool) -> Any:
        self.stats.leases += 1
        task = asyncio.current_task()
        if self._owner is not None and self._owner is task:
            return await self._on_thread(lambda: self._connection().run_statement(stmt, want_rows))
        async with self._hold():
            return await self._on_thread(lambda: self._connection().run_statement(stmt, want_rows))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_AsyncExecutor]:
        """An IMMEDIATE transaction (a savepoint when this task already has one)."""
        async with self._hold():
            tx: list[Any] = []

            def begin() -> None:
                manager = self._connection().transaction()
                manager.__enter__()
                tx.append(manager)

            def finish(exc: BaseException | None) -> None:
                manager = tx.pop()
                if exc is None:
                    manager.__exit__(None, None, None)
                else:
                    try:
                        manager.__exit__(type(exc), exc, exc.__traceback__)
                    except BaseException as raised:
                        if raised is not exc:
                            raise

            try:
                await self._on_thread(begin)
            except BaseException as exc:
                # Cancelled while BEGIN was queued: it still runs, so undo it after.
                failure = exc

                def undo() -> None:
                    if tx:
                        finish(failure)

                self._thread.submit(undo)
                raise

            def run_in_tx(stmt: Statement, want_rows: bool) -> Any:
                return self._on_thread(lambda: self._connection().run_statement(stmt, want_rows))

            try:
                yield _AsyncExecutor(run_in_tx)
            except BaseException as exc:
                error = exc
                await asyncio.shield(self._on_thread(lambda: finish(error)))
                raise
            await self._on_thread(lambda: finish(None))

    def wrap(self, conn: Any) -> _AsyncExecutor:
        """An executor from :meth:`transaction` as is, or one over the caller's sqlite3
        connection, run on the event loop thread (the caller's connection may only be
        usable from there)."""
        if isinstance(conn, _AsyncExecutor):
            return conn
        sync = _wrap_connection(conn, self.stats)

        async def call(stmt: Statement, want_rows: bool) -> Any:
            return sync.fetch(stmt) if want_rows else sync.execute(stmt)

        return _AsyncExecutor(call)

    async def execute_script(self, sql: str) -> None:
        async with self._hold():
            await self._on_thread(lambda: self._connection().execute_script(sql))

    async def listener(self) -> SqliteListener:
        """A poller of the ``river_notification`` outbox (SQLite's LISTEN/NOTIFY), on a
        connection and thread of its own; it starts after the newest row."""
        listener = SqliteListener(self.dialect, self._open_connection)
        await listener.connect()
        return listener

    async def close(self) -> None:
        if self._closed:
            return
        async with self._hold():
            conn = self._conn
            if conn is not None:
                await self._on_thread(conn.close)
            self._closed = True
        self._thread.shutdown(wait=False)


class SqliteListener:
    """River's SQLite listener: polls ``river_notification`` for rows after the newest
    one it has seen, every ``poll_interval`` (River's 50 ms) while nothing is new, reading
    up to a batch per poll (River reads one row per query).

    Rows are seen in id order and the cursor passes every row, listened to or not:
    SQLite's single writer commits outbox rows in id order, so an id below the cursor can
    never appear later. Channels are the notifier's ``"<schema>.<topic>"`` (the schema
    part may be empty); outbox topics carry no schema, since the table itself lives in
    the schema's attached database, so a row's topic is matched against each channel's
    last dotted part and delivered under the channel it was listened on.

    A connection of this process that commits outbox rows to the same file pokes the
    listener (``_LocalWakes``): it polls at once instead of at the end of the interval.
    """

    poll_interval = 0.05

    def __init__(
        self,
        dialect: SqliteDialect,
        open_connection: Callable[[DriverStats], _Connection],
    ) -> None:
        self._dialect = dialect
        self._open = open_connection
        # Polls are counted here, not in the driver's stats, so they don't show up as
        # statements per job in the benchmark.
        self.stats = DriverStats()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="riverboat-listen")
        self._conn: _Connection | None = None
        self._channels: dict[str, str] = {}
        self._last_id = 0
        self._full_batch = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poked = asyncio.Event()
        self._registered: str | None = None
        self.pokes = 0  # commits of outbox rows by this process that woke this listener

    def poke(self) -> None:
        """Poll now (called from any thread, by a connection that committed outbox rows)."""
        loop = self._loop
        if loop is None or self._closed:
            return
        self.pokes += 1
        try:
            loop.call_soon_threadsafe(self._poked.set)
        except RuntimeError:  # the loop is closed: nothing is listening any more
            pass

    async def _on_thread(self, fn: Callable[[], T]) -> T:
        if self._closed:
            raise DriverError("the listener is closed")
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn)

    def _fetch(self, stmt: Statement) -> list[Any]:
        if self._conn is None:
            self._conn = self._open(self.stats)
        rows: list[Any] = self._conn.run(stmt, True, retry=True)
        return rows

    async def connect(self) -> None:
        self._loop = asyncio.get_running_loop()
        rows = await self._on_thread(lambda: self._fetch(self._dialect.notification_get_last_id()))
        self._last_id = int(rows[0][0]) if rows else 0
        file = self._conn.outbox_file if self._conn is not None else None
        if file is not None:
            self._registered = file
            _local_wakes.add(file, self)

    async def listen(self, channel: str) -> None:
        self._channels[channel.rpartition(".")[2]] = channel

    async def unlisten(self, channel: str) -> None:
        topic = channel.rpartition(".")[2]
        if self._channels.get(topic) == channel:
            del self._channels[topic]

    async def poll(self) -> list[Notification]:
        """One read of the outbox: the notifications for listened channels among the
        next batch of rows (the cursor moves past all of them)."""
        self._poked.clear()  # a commit after this point is seen by the read, or pokes again
        stmt = self._dialect.notification_get_after(self._last_id)
        rows: Sequence[Any] = await self._on_thread(lambda: self._fetch(stmt))
        out: list[Notification] = []
        for row_id, topic, payload in rows:
            self._last_id = max(self._last_id, int(row_id))
            channel = self._channels.get(topic)
            if channel is not None:
                out.append(Notification(channel, payload))
        self._full_batch = len(rows) >= int(stmt.params["max"])
        return out

    async def notifications(self) -> AsyncGenerator[Notification, None]:
        while not self._closed:
            for note in await self.poll():
                yield note
            if not self._full_batch:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a
                # cancellation that lands as the poke does, and the notifier's stop()
                # would then wait for ever.
                try:
                    async with asyncio.timeout(self.poll_interval):
                        await self._poked.wait()
                except TimeoutError:
                    pass

    async def close(self) -> None:
        if self._closed:
            return
        if self._registered is not None:
            _local_wakes.discard(self._registered, self)
            self._registered = None
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                # Queued behind any poll still running on the thread.
                await self._on_thread(conn.close)
        finally:
            self._closed = True
            self._thread.shutdown(wait=False)


def _wrap_connection(conn: Any, stats: DriverStats) -> _SyncExecutor:
    """An executor over a caller's sqlite3 connection: statements (and chains) run
    as they come, inside whatever transaction the caller has open."""
    if isinstance(conn, _SyncExecutor):
        return conn
    module = sqlite_module()
    if not isinstance(conn, module.Connection):
        raise TypeError(f"expected a {module.__name__}.Connection, got {type(conn).__name__}")

    def run_one(stmt: Statement, want_rows: bool) -> Any:
        sql, _ = stmt.query.compile("named")
        stats.count(stmt.query.name)
        try:
            cur = conn.execute(sql, _params(stmt))
            if want_rows:
                return cur.fetchall() if cur.description is not None else []
            return cur.rowcount
        except module.Error as exc:
            raise _translate(exc) from exc

    def run(stmt: Statement, want_rows: bool) -> Any:
        result = run_one(stmt, want_rows)
        for follow in stmt.then:
            run_one(follow, False)
        return result

    return _SyncExecutor(conn, run)
