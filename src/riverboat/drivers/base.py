"""The executor protocols every driver implements, sync and async."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import re
import socket
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from riverboat._sql import Statement
from riverboat.errors import (
    DeadlineExceededError,
    DriverError,
    MissingDependencyError,
    NotMigratedError,
)

if TYPE_CHECKING:
    from riverboat.dialect.base import Dialect

__all__ = [
    "DEFAULT_TCP",
    "LOCK_TIMEOUT",
    "AsyncConnectionExecutor",
    "AsyncDriver",
    "AsyncExecutor",
    "AsyncListener",
    "AsyncStatementRunner",
    "Capabilities",
    "ConnectionExecutor",
    "Driver",
    "DriverStats",
    "Executor",
    "Notification",
    "StatementRunner",
    "TcpSettings",
    "Watchdog",
    "call_deadline",
    "call_timeout",
    "caller_connection",
    "import_optional",
    "plain_postgres_url",
    "shut_socket",
    "translate_error",
]

Row = Sequence[Any]

# How Postgres and SQLite say that one of River's tables, or riverboat's own (its
# migration line's), or the schema is missing.
_MISSING_TABLE = re.compile(
    r'relation "(?:[^"]+\.)?(river(?:boat)?_\w+)" does not exist'
    r"|no such table: (?:\w+\.)?(river(?:boat)?_\w+)"
)
_MISSING_SCHEMA = re.compile(r'schema "([^"]+)" does not exist')


def import_optional(module: str, extra: str) -> Any:
    """Import an optional dependency, or raise :class:`MissingDependencyError` naming the
    extra that installs it. Imported on first use, so core riverboat needs none of them."""
    loaded = sys.modules.get(module)  # the common case, on hot paths: one dict lookup
    if loaded is not None:
        return loaded
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(module.partition(".")[0], extra, exc) from exc


def caller_connection(conn: Any, types: type | tuple[type, ...], expected: str) -> Any:
    """``conn``, the connection a caller hands to ``wrap`` (for the ``*_tx`` methods),
    checked to be one of ``types``: otherwise a TypeError naming ``expected``."""
    if not isinstance(conn, types):
        raise TypeError(f"expected {expected}, got {type(conn).__name__}")
    return conn


def plain_postgres_url(url: str, prefixes: Sequence[str]) -> str:
    """``url`` without a SQLAlchemy-style scheme suffix (``postgresql+psycopg://``), which
    means nothing to libpq or asyncpg; ``prefixes`` are the spellings a driver accepts."""
    for prefix in prefixes:
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def translate_error(exc: BaseException, detail: BaseException | None = None) -> DriverError:
    """The :class:`DriverError` a driver raises for a library's exception ``exc``
    (kept as ``__cause__``); ``detail`` is the exception whose text says what went
    wrong when ``exc`` wraps it (SQLAlchemy's ``.orig``).

    A statement that finds River's tables, riverboat's or the schema missing becomes a
    :class:`NotMigratedError` whose message says to run ``riverboat migrate up``: the
    same error from every driver and both databases, instead of the raw SQL error."""
    source = detail if detail is not None else exc
    text = str(source).strip()
    first_line = text.splitlines()[0] if text else ""
    err: DriverError
    if (table := _MISSING_TABLE.search(first_line)) is not None:
        name = table.group(1) or table.group(2)
        if name.startswith("riverboat_"):  # River's migrate-up does not make these
            err = NotMigratedError(
                f"riverboat's table {name} is missing ({first_line}): riverboat's "
                "migration line is not applied; run `riverboat migrate up`"
            )
        else:
            err = NotMigratedError(
                f"River's table {name} is missing ({first_line}): the database is not "
                "migrated; run `riverboat migrate up` (or River's `river migrate-up`)"
            )
    elif (schema := _MISSING_SCHEMA.search(first_line)) is not None:
        err = NotMigratedError(
            f"schema {schema.group(1)!r} does not exist: create it, then run "
            f"`riverboat migrate up --schema {schema.group(1)}`"
        )
    else:
        label = type(source).__name__
        name = getattr(source, "sqlite_errorname", None)
        if name:
            label = f"{label} ({name})"
        err = DriverError(f"{label}: {text}".strip())
    err.__cause__ = exc
    return err


@dataclass(slots=True, frozen=True)
class Capabilities:
    """What a driver can do; checked when a client is built."""

    listen: bool = False
    sync: bool = False
    async_: bool = False
    # Its transactions (and wrap()) have copy(CopyBatch): insert_many_fast uses COPY.
    copy: bool = False


@dataclass(slots=True, weakref_slot=True)  # weakly held by the SQLAlchemy drivers
class DriverStats:
    """Counters the benchmark reports. A reset is a connection handed back in a state
    (open transaction, error) that forced a rollback or discard before reuse."""

    statements: int = 0
    leases: int = 0
    resets: int = 0
    connections_opened: int = 0
    by_query: dict[str, int] = field(default_factory=dict)
    # time.monotonic() when a write of this driver last finished waiting for another
    # connection's write lock (SQLite, whose writers share one lock); 0: never. The
    # leader's dead-client rescue waits after it (runtime/maintenance/rescuer.py).
    blocked_at: float = 0.0

    def count(self, name: str) -> None:
        self.statements += 1
        self.by_query[name] = self.by_query.get(name, 0) + 1


@dataclass(slots=True, frozen=True)
class Notification:
    channel: str
    payload: str


@runtime_checkable
class Executor(Protocol):
    """Runs statements synchronously; each call is one statement."""

    def fetch(self, stmt: Statement) -> list[Row]: ...

    def execute(self, stmt: Statement) -> int: ...


@runtime_checkable
class AsyncExecutor(Protocol):
    """Runs statements on the event loop; each call is one statement."""

    async def fetch(self, stmt: Statement) -> list[Row]: ...

    async def execute(self, stmt: Statement) -> int: ...


class StatementRunner:
    """``fetch`` and ``execute`` for a driver or executor whose ``_run(stmt, want_rows)``
    runs one statement and returns its rows (``want_rows``) or its row count."""

    __slots__ = ()

    def _run(self, stmt: Statement, want_rows: bool) -> Any:
        raise NotImplementedError

    def fetch(self, stmt: Statement) -> list[Row]:
        rows: list[Row] = self._run(stmt, True)
        return rows

    def execute(self, stmt: Statement) -> int:
        count: int = self._run(stmt, False)
        return count


class AsyncStatementRunner:
    """:class:`StatementRunner` for the event loop: ``_run`` is a coroutine."""

    __slots__ = ()

    async def _run(self, stmt: Statement, want_rows: bool) -> Any:
        raise NotImplementedError

    async def fetch(self, stmt: Statement) -> list[Row]:
        rows: list[Row] = await self._run(stmt, True)
        return rows

    async def execute(self, stmt: Statement) -> int:
        count: int = await self._run(stmt, False)
        return count


class _OnConnection:
    """One connection (a transaction's, or the caller's own) and the driver's stats its
    statements count into."""

    __slots__ = ("_conn", "_stats")

    def __init__(self, conn: Any, stats: DriverStats) -> None:
        self._conn = conn
        self._stats = stats


class ConnectionExecutor(_OnConnection, StatementRunner):
    """Runs statements on one connection, counting them into the driver's stats."""

    __slots__ = ()


class AsyncConnectionExecutor(_OnConnection, AsyncStatementRunner):
    """:class:`ConnectionExecutor` for the event loop."""

    __slots__ = ()


class AsyncListener(Protocol):
    """A dedicated connection that LISTENs; iterate it for notifications."""

    async def listen(self, channel: str) -> None: ...

    async def unlisten(self, channel: str) -> None: ...

    def notifications(self) -> AsyncIterator[Notification]: ...

    async def close(self) -> None: ...


class _DriverAttributes(Protocol):
    """What every driver, sync or async, exposes besides running statements."""

    # Read-only in the protocol so a driver may hold a Dialect subclass.
    @property
    def dialect(self) -> Dialect: ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def stats(self) -> DriverStats: ...


class Driver(Executor, _DriverAttributes, Protocol):
    """A sync driver: a pool (or a single connection) plus transactions."""

    def transaction(self) -> AbstractContextManager[Executor]: ...

    def wrap(self, conn: Any) -> Executor:
        """An executor over the caller's own connection or transaction (for ``*_tx``)."""
        ...

    def execute_script(self, sql: str) -> None: ...

    def async_driver(self) -> AsyncDriver:
        """The async twin on the same database, for the runtime a sync client embeds."""
        ...

    def close(self) -> None: ...


class AsyncDriver(AsyncExecutor, _DriverAttributes, Protocol):
    """An async driver; the runtime runs on these."""

    def transaction(self) -> AbstractAsyncContextManager[AsyncExecutor]: ...

    def wrap(self, conn: Any) -> AsyncExecutor: ...

    async def execute_script(self, sql: str) -> None: ...

    async def listener(self) -> AsyncListener: ...

    async def close(self) -> None: ...


# -- connection liveness: TCP settings, per-call deadlines, lock waits ------------------

#: Seconds a statement on a driver's own Postgres connections waits for a row or table
#: lock before the server fails it (``lock_timeout``): shorter than the runtime's call
#: deadline, so a lock held by another session (a ``SELECT ... FOR UPDATE`` left open)
#: surfaces as an error on a healthy connection instead of a call that never answers.
LOCK_TIMEOUT = 5.0


@dataclass(slots=True, frozen=True)
class TcpSettings:
    """TCP settings for every Postgres connection a driver opens itself, named and
    measured as libpq's parameters (``tcp_user_timeout`` in milliseconds).

    Keepalive probes start after ``keepalives_idle`` seconds without traffic, one every
    ``keepalives_interval`` s, and the kernel drops the connection after
    ``keepalives_count`` unanswered ones: a peer that vanished (host down, NAT entry
    gone) is noticed within about 30 s instead of the kernel's two hours. Data sent
    and not acknowledged for ``tcp_user_timeout`` ms fails the connection likewise.
    Neither notices a peer whose kernel still acknowledges but whose application
    stopped answering (a stalled proxy): the runtime's per-call deadline and the
    LISTEN connection's health check cover that. ``None`` for a field leaves the
    operating system's default; a parameter named in the URL wins over these."""

    keepalives_idle: int | None = 15
    keepalives_interval: int | None = 5
    keepalives_count: int | None = 3
    tcp_user_timeout: int | None = 30_000

    def libpq_params(self, url: str | None = None) -> dict[str, int]:
        """The libpq connection parameters, leaving out any that ``url`` names."""
        params: dict[str, int] = {"keepalives": 1}
        for name in ("keepalives_idle", "keepalives_interval", "keepalives_count"):
            value = getattr(self, name)
            if value is not None:
                params[name] = int(value)
        if self.tcp_user_timeout is not None:
            params["tcp_user_timeout"] = int(self.tcp_user_timeout)
        if url:
            params = {k: v for k, v in params.items() if not re.search(rf"\b{k}=", url)}
        return params

    def apply(self, sock: socket.socket | None) -> None:
        """Set these options on a connected socket (drivers that take no libpq
        parameters, such as asyncpg). Options the platform lacks are skipped."""
        if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return
        options = [
            (socket.SOL_SOCKET, getattr(socket, "SO_KEEPALIVE", None), 1),
            (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPIDLE", None), self.keepalives_idle),
            (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), self.keepalives_interval),
            (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), self.keepalives_count),
            (socket.IPPROTO_TCP, getattr(socket, "TCP_USER_TIMEOUT", None), self.tcp_user_timeout),
        ]
        for level, option, value in options:
            if option is not None and value is not None:
                try:
                    sock.setsockopt(level, option, int(value))
                except OSError:  # not supported on this socket or platform
                    pass


#: The TCP settings drivers use unless given others (``tcp=``).
DEFAULT_TCP = TcpSettings()

# Seconds the database call being made in this task may take, set by call_deadline();
# drivers that honour it (psycopg's async driver, asyncpg) read it once per call.
_CALL_TIMEOUT: ContextVar[float | None] = ContextVar("riverboat_call_timeout", default=None)


def call_timeout() -> float | None:
    """The deadline (seconds) of database calls made here, or None: no deadline."""
    return _CALL_TIMEOUT.get()


@contextmanager
def call_deadline(seconds: float | None) -> Iterator[None]:
    """Every database call awaited in this block (and in tasks created in it) must
    answer within ``seconds``, lease included. A driver that honours it drops the
    connection of a call that misses it (never handing it back to its pool) and raises
    :class:`~riverboat.errors.DeadlineExceededError`. ``None``: no deadline."""
    token = _CALL_TIMEOUT.set(seconds)
    try:
        yield
    finally:
        _CALL_TIMEOUT.reset(token)


def shut_socket(fd: int) -> None:
    """Shut the socket ``fd`` down in both directions without closing the descriptor
    (its owner still does that): a read or write waiting on it fails at once, as if
    the server had closed the connection, although the peer never answered."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already shut or not connected
        pass
    finally:
        sock.detach()


class Watchdog:
    """Runs ``abort`` if a call is still running ``seconds`` from now: the deadline of
    one database call. ``abort`` breaks the call's connection (shuts its socket), so the
    call fails at once and the connection is discarded; :meth:`error` is then what the
    caller raises instead of the library's "connection closed"."""

    __slots__ = ("_cancelled", "_handle", "_lock", "missed", "seconds", "what")

    def __init__(
        self,
        seconds: float,
        abort: Callable[[], None],
        what: str = "",
        deadline: float | None = None,
    ) -> None:
        """``deadline``: the whole call's deadline, reported in :meth:`error` when
        ``seconds`` is only what was left of it."""
        self.seconds = seconds if deadline is None else deadline
        self.what = what
        self.missed = False
        self._cancelled = False
        self._lock: threading.Lock | None = None
        self._handle: asyncio.TimerHandle | threading.Timer
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # A sync driver's call (the CLI, a sync Client's own calls): the call blocks
            # its thread, so a timer thread breaks it. The lock makes firing and
            # cancelling exclusive: once cancel() returns, ``missed`` says for good
            # whether the socket was shut (a timer already firing could shut it after
            # the call had succeeded and its connection gone back to the pool).
            self._lock = threading.Lock()
            self._handle = threading.Timer(max(seconds, 0.0), self._fire, (abort,))
            self._handle.daemon = True
            self._handle.start()
        else:
            self._handle = loop.call_later(max(seconds, 0.0), self._fire, abort)

    def _fire(self, abort: Callable[[], None]) -> None:
        with self._lock or contextlib.nullcontext():
            if self._cancelled:
                return
            self.missed = True
            try:
                abort()
            except Exception:  # the connection is being dropped anyway
                pass

    def cancel(self) -> bool:
        """Stop the timer; returns whether it fired (the call's connection is broken,
        even if the call itself got its answer first)."""
        with self._lock or contextlib.nullcontext():
            self._cancelled = True
            self._handle.cancel()
        return self.missed

    def error(self) -> DeadlineExceededError:
        what = f" ({self.what})" if self.what else ""
        return DeadlineExceededError(
            f"no answer from the database within {self.seconds:g}s{what}; "
            "the connection was dropped"
        )
