"""SQLAlchemy 2 Core drivers: :class:`SqlAlchemyDriver` (an ``Engine``) and
:class:`AsyncSqlAlchemyDriver` (an ``AsyncEngine``), for Postgres.

Statements run as ``text()`` with ``:name`` parameters and come back as plain tuples;
the ORM is never involved. Single statements run on connections in ``AUTOCOMMIT``
isolation, so no BEGIN/COMMIT wraps them; :meth:`transaction` uses ``engine.begin()``.

:meth:`wrap` accepts what an application holds inside its own transaction: a
``Connection`` or ``Session`` (sync), an ``AsyncConnection`` or ``AsyncSession``
(async). A session is used through ``session.connection()``, so a job inserted there
commits or rolls back with the session's transaction, and nothing is flushed on its
behalf.

LISTEN needs a dedicated connection outside SQLAlchemy's pool: the async driver opens
one from the engine's URL with riverboat's psycopg or asyncpg listener, whichever
library the engine uses.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

from riverboat._sql import Query, Statement
from riverboat.dialect.postgres import PostgresDialect
from riverboat.drivers.base import (
    AsyncListener,
    AsyncStatementRunner,
    Capabilities,
    DriverStats,
    StatementRunner,
    import_optional,
    translate_error,
)
from riverboat.errors import DriverError, InvalidInputError, MissingDependencyError

if TYPE_CHECKING:
    import sqlalchemy
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["AsyncSqlAlchemyDriver", "SqlAlchemyDriver"]


def _import_sqlalchemy() -> Any:
    return import_optional("sqlalchemy", "sqlalchemy")


def _translate(exc: BaseException) -> DriverError:
    # SQLAlchemy's DBAPIError wraps the library's error as .orig; the message of the
    # latter is the useful one.
    return translate_error(exc, getattr(exc, "orig", None))


_CAST_AFTER_PARAM = re.compile(r"(?<![:\w])(:[a-z_][a-z0-9_]*)::")


class _Texts:
    """``text()`` clauses per query, built once.

    SQLAlchemy's bind regex refuses a name followed by a colon and backtracks, reading
    ``:ids::bigint[]`` as a parameter ``:id`` followed by ``s::bigint[]``. A space before
    the cast (``:ids ::bigint[]``, the same SQL to Postgres) keeps the name whole.
    Escaping the casts as ``\\:\\:`` does not work: text() leaves an escape followed
    by a colon in place, which breaks slices such as ``[n - :m::integer:]``.
    """

    __slots__ = ("_by_query", "_text")

    def __init__(self, sqlalchemy: Any) -> None:
        self._text = sqlalchemy.text
        self._by_query: dict[Query, Any] = {}

    def get(self, query: Query) -> tuple[Any, tuple[str, ...]]:
        clause = self._by_query.get(query)
        sql, names = query.compile("named")
        if clause is None:
            if len(self._by_query) > 1024:  # ad-hoc queries (migrations) must not pile up
                self._by_query.clear()
            clause = self._text(_CAST_AFTER_PARAM.sub(r"\1 ::", sql))
            self._by_query[query] = clause
        return clause, names


def _args(stmt: Statement, names: tuple[str, ...]) -> dict[str, Any]:
    params: Mapping[str, Any] = stmt.params
    return {n: params[n] for n in names}


def _rows(result: Any) -> list[Any]:
    if not result.returns_rows:
        return []
    return [tuple(row) for row in result.fetchall()]


def _library_errors(driver: str) -> tuple[type[BaseException], ...]:
    """The exceptions of the library under an engine (for calls made on its own
    connection, outside SQLAlchemy's wrapping)."""
    if driver == "asyncpg":
        import asyncpg

        return (asyncpg.PostgresError, asyncpg.InterfaceError)
    if driver in ("psycopg", "psycopg2"):
        module = __import__(driver)
        return (module.Error,)
    return ()


def _check_postgres(engine: Any) -> None:
    if engine.dialect.name != "postgresql":
        raise InvalidInputError(
            "engine", f"riverboat's SQLAlchemy drivers need Postgres, not {engine.dialect.name}"
        )


# The drivers counting each engine's new connections, by engine: one listener per
# engine, holding the drivers' stats weakly. A listener per driver (a bound method) was
# never removed from a caller's engine unless the driver was closed, which a Client on
# the caller's engine does not do: a Client per request held every driver ever made.
_Tally = weakref.WeakValueDictionary[int, DriverStats]  # by id(): DriverStats is unhashable
_COUNTED: weakref.WeakKeyDictionary[Any, _Tally] = weakref.WeakKeyDictionary()


def _count_connections(engine: Any, stats: DriverStats) -> None:
    counted = _COUNTED.get(engine)
    if counted is None:
        counted = _COUNTED[engine] = weakref.WeakValueDictionary()
        tally = counted  # not the engine: the listener must not keep it alive

        def on_connect(_dbapi_conn: Any, _record: Any) -> None:
            for each in list(tally.values()):
                each.connections_opened += 1

        _import_sqlalchemy().event.listen(engine, "connect", on_connect)
    counted[id(stats)] = stats


def _stop_counting_connections(engine: Any, stats: DriverStats) -> None:
    counted = _COUNTED.get(engine)
    if counted is not None:
        counted.pop(id(stats), None)


# The URL query keys libpq (and so psycopg and asyncpg's URL parsing) understands; the
# rest of an engine's query is SQLAlchemy's or its dialect's (prepared_statement_cache_size
# for asyncpg): asyncpg sent those to the server as settings, failing every LISTEN.
_LIBPQ_KEYS = frozenset(
    """host hostaddr port dbname user password passfile channel_binding connect_timeout
    client_encoding options application_name fallback_application_name keepalives
    keepalives_idle keepalives_interval keepalives_count tcp_user_timeout gssencmode
    sslmode requiressl sslcompression sslcert sslkey sslpassword sslcertmode sslrootcert
    sslcrl sslcrldir sslsni requirepeer ssl_min_protocol_version ssl_max_protocol_version
    krbsrvname gsslib gssdelegation service target_session_attrs
    load_balance_hosts""".split()
)


def _libpq_url(url: Any) -> str:
    """The engine's URL (password included) as a plain ``postgresql://`` URL: each part
    percent-encoded (SQLAlchemy renders a database name with a space as is, which
    psycopg refuses), with only the query keys libpq knows."""
    from urllib.parse import quote, urlencode

    credentials = ""
    if url.username:
        credentials = quote(url.username, safe="")
        if url.password is not None:
            credentials += ":" + quote(str(url.password), safe="")
        credentials += "@"
    host = url.host or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    port = f":{url.port}" if url.port else ""
    database = quote(url.database or "", safe="")
    query = urlencode(
        [
            (key, value)
            for key, values in url.query.items()
            if key in _LIBPQ_KEYS
            for value in (values if isinstance(values, tuple) else (values,))
        ]
    )
    return f"postgresql://{credentials}{host}{port}/{database}" + (f"?{query}" if query else "")


def _sync_url(url: str) -> str:
    # A bare postgresql:// means psycopg2 to SQLAlchemy; riverboat's default is psycopg 3.
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _async_url(url: str) -> str:
    url = _sync_url(url)
    if url.startswith("postgresql+psycopg2://"):
        return "postgresql+psycopg://" + url[len("postgresql+psycopg2://") :]
    return url


class _SyncExecutor(StatementRunner):
    """Runs statements on one SQLAlchemy ``Connection`` (a transaction's or the caller's)."""

    __slots__ = ("_conn", "_driver")

    def __init__(self, conn: Any, driver: SqlAlchemyDriver) -> None:
        self._conn = conn
        self._driver = driver

    def _run(self, stmt: Statement, want_rows: bool) -> Any:
        return self._driver._run_on(self._conn, stmt, want_rows)


class SqlAlchemyDriver(StatementRunner):
    """Sync driver over a SQLAlchemy ``Engine`` (or a URL, for an engine of its own).

    A URL without a driver (``postgresql://``) gets psycopg 3
    (``postgresql+psycopg://``); ``postgresql+psycopg2://`` works as well.
    """

    capabilities = Capabilities(listen=True, sync=True)

    def __init__(
        self, engine_or_url: str | sqlalchemy.Engine, *, schema: str | None = None
    ) -> None:
        sqlalchemy = _import_sqlalchemy()
        self.dialect = PostgresDialect(schema)
        self.stats = DriverStats()
        if isinstance(engine_or_url, str):
            self.engine = sqlalchemy.create_engine(_sync_url(engine_or_url))
            self._owns_engine = True
        elif isinstance(engine_or_url, sqlalchemy.Engine):
            self.engine = engine_or_url
            self._owns_engine = False
        else:
            raise TypeError(
                f"expected a sqlalchemy.Engine or a URL, got {type(engine_or_url).__name__}"
            )
        _check_postgres(self.engine)
        if getattr(self.engine.dialect, "is_async", False):
            # Otherwise accepted, and the first statement failed with MissingGreenlet.
            raise InvalidInputError(
                "engine",
                f"{self.engine.dialect.driver} is an async DBAPI: use AsyncSqlAlchemyDriver, "
                "or a sync one (postgresql+psycopg://)",
            )
        self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self._texts = _Texts(sqlalchemy)
        self._errors = (sqlalchemy.exc.SQLAlchemyError,)
        _count_connections(self.engine, self.stats)

    def _run_on(self, conn: Any, stmt: Statement, want_rows: bool) -> Any:
        clause, names = self._texts.get(stmt.query)
        self.stats.count(stmt.query.name)
        try:
            result = conn.execute(clause, _args(stmt, names))
            return _rows(result) if want_rows else int(result.rowcount)
        except self._errors as exc:
            raise _translate(exc) from exc

    def _run(self, stmt: Statement, want_rows: bool) -> Any:
        self.stats.leases += 1
        clause, names = self._texts.get(stmt.query)
        self.stats.count(stmt.query.name)
        try:
            with self._autocommit.connect() as conn:
                result = conn.execute(clause, _args(stmt, names))
                return _rows(result) if want_rows else int(result.rowcount)
        except self._errors as exc:
            raise _translate(exc) from exc

    @contextmanager
    def transaction(self) -> Iterator[_SyncExecutor]:
        """``engine.begin()``: committed on success, rolled back when the block raises."""
        self.stats.leases += 1
        try:
            tx = self.engine.begin()
            conn = tx.__enter__()
        except self._errors as exc:
            raise _translate(exc) from exc
        try:
            yield _SyncExecutor(conn, self)
        except BaseException as exc:
            tx.__exit__(type(exc), exc, exc.__traceback__)
            raise
        try:
            tx.__exit__(None, None, None)
        except self._errors as exc:
            raise _translate(exc) from exc

    def wrap(self, conn: Any) -> _SyncExecutor:
        """An executor over the caller's ``Connection`` or ``Session``: the statement
        joins their transaction, which stays theirs to commit or roll back."""
        sqlalchemy = _import_sqlalchemy()
        from sqlalchemy.orm import Session

        if isinstance(conn, Session):
            # connection() begins the session's transaction if needed and never flushes.
            return _SyncExecutor(conn.connection(), self)
        if isinstance(conn, sqlalchemy.Connection):
            return _SyncExecutor(conn, self)
        raise TypeError(f"expected a sqlalchemy Connection or Session, got {type(conn).__name__}")

    def execute_script(self, sql: str) -> None:
        """Several statements at once, on the library's own connection: with no
        parameters, psycopg and psycopg2 send them in one simple-protocol round trip and
        leave ``%`` alone."""
        self.stats.leases += 1
        library_errors = _library_errors(self.engine.dialect.driver)
        try:
            with self._autocommit.connect() as conn:
                raw = conn.connection.driver_connection
                assert raw is not None
                with raw.cursor() as cur:
                    cur.execute(sql)
        except self._errors + library_errors as exc:
            raise _translate(exc) from exc

    def close(self) -> None:
        """Dispose of an engine the driver created; a caller's engine stays as it is."""
        _stop_counting_connections(self.engine, self.stats)
        if self._owns_engine:
            self.engine.dispose()

    def async_driver(self) -> AsyncSqlAlchemyDriver:
        """An async driver on the same database, for running workers from sync code
        (``Client(queues=...)``): an async engine of its own on the same URL, with
        psycopg 3 in place of psycopg2."""
        url = _async_url(self.engine.url.render_as_string(hide_password=False))
        return AsyncSqlAlchemyDriver(url, schema=self.dialect.schema)


class _AsyncExecutor(AsyncStatementRunner):
    """Runs statements on one ``AsyncConnection``, or on an ``AsyncSession``'s."""

    __slots__ = ("_conn", "_driver", "_session")

    def __init__(self, conn: Any, driver: AsyncSqlAlchemyDriver, session: Any = None) -> None:
        self._conn = conn
        self._driver = driver
        self._session = session

    async def _connection(self) -> Any:
        if self._conn is None:
            # AsyncSession.connection() is a coroutine; resolved on first use.
            self._conn = await self._session.connection()
        return self._conn

    async def _run(self, stmt: Statement, want_rows: bool) -> Any:
        return await self._driver._run_on(await self._connection(), stmt, want_rows)


class AsyncSqlAlchemyDriver(AsyncStatementRunner):
    """Async driver over a SQLAlchemy ``AsyncEngine`` (or a URL, for an engine of its own):
    ``postgresql+psycopg://`` (psycopg 3's async mode) or ``postgresql+asyncpg://``."""

    def __init__(
        self, async_engine_or_url: str | AsyncEngine, *, schema: str | None = None
    ) -> None:
        sqlalchemy = _import_sqlalchemy()
        try:
            from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
        except ImportError as exc:  # greenlet is missing
            raise MissingDependencyError("greenlet", "sqlalchemy", exc) from exc
        self.dialect = PostgresDialect(schema)
        self.stats = DriverStats()
        if isinstance(async_engine_or_url, str):
            self.engine = create_async_engine(_async_url(async_engine_or_url))
            self._owns_engine = True
        elif isinstance(async_engine_or_url, AsyncEngine):
            self.engine = async_engine_or_url
            self._owns_engine = False
        else:
            raise TypeError(
                f"expected a sqlalchemy AsyncEngine or a URL, "
                f"got {type(async_engine_or_url).__name__}"
            )
        _check_postgres(self.engine)
        self._listen_with = self.engine.dialect.driver  # "psycopg", "asyncpg"...
        self.capabilities = Capabilities(
            listen=self._listen_with in ("psycopg", "asyncpg"), async_=True
        )
        self._autocommit = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self._texts = _Texts(sqlalchemy)
        self._errors = (sqlalchemy.exc.SQLAlchemyError,)
        _count_connections(self.engine.sync_engine, self.stats)

    async def _run_on(self, conn: Any, stmt: Statement, want_rows: bool) -> Any:
        clause, names = self._texts.get(stmt.query)
        self.stats.count(stmt.query.name)
        try:
            result = await conn.execute(clause, _args(stmt, names))
            return _rows(result) if want_rows else int(result.rowcount)
        except self._errors as exc:
            raise _translate(exc) from exc

    async def _run(self, stmt: Statement, want_rows: bool) -> Any:
        self.stats.leases += 1
        clause, names = self._texts.get(stmt.query)
        self.stats.count(stmt.query.name)
        try:
            async with self._autocommit.connect() as conn:
                result = await conn.execute(clause, _args(stmt, names))
                return _rows(result) if want_rows else int(result.rowcount)
        except self._errors as exc:
            raise _translate(exc) from exc

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_AsyncExecutor]:
        """``engine.begin()``: committed on success, rolled back when the block raises."""
        self.stats.leases += 1
        tx = self.engine.begin()
        try:
            conn = await tx.__aenter__()
        except self._errors as exc:
            raise _translate(exc) from exc
        try:
            yield _AsyncExecutor(conn, self)
        except BaseException as exc:
            await tx.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        try:
            await tx.__aexit__(None, None, None)
        except self._errors as exc:
            raise _translate(exc) from exc

    def wrap(self, conn: Any) -> _AsyncExecutor:
        """An executor over the caller's ``AsyncConnection`` or ``AsyncSession``."""
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

        if isinstance(conn, AsyncSession):
            return _AsyncExecutor(None, self, session=conn)
        if isinstance(conn, AsyncConnection):
            return _AsyncExecutor(conn, self)
        raise TypeError(
            f"expected a sqlalchemy AsyncConnection or AsyncSession, got {type(conn).__name__}"
        )

    async def execute_script(self, sql: str) -> None:
        """Several statements at once, on the library's own connection (asyncpg's
        adapter would prepare them, and a prepared statement is a single one)."""
        self.stats.leases += 1
        library_errors = _library_errors(self._listen_with)
        try:
            async with self._autocommit.connect() as conn:
                raw = (await conn.get_raw_connection()).driver_connection
                assert raw is not None
                if self._listen_with == "asyncpg":
                    await raw.execute(sql)
                else:
                    async with raw.cursor() as cur:
                        await cur.execute(sql)
        except self._errors + library_errors as exc:
            raise _translate(exc) from exc

    async def listener(self) -> AsyncListener:
        """A dedicated LISTEN connection to the engine's database, outside its pool."""
        url = _libpq_url(self.engine.url)
        if self._listen_with == "asyncpg":
            from riverboat.drivers.asyncpg import connect_listener

            return await connect_listener(url, self.stats)
        if self._listen_with == "psycopg":
            from riverboat.drivers.psycopg import AsyncPsycopgDriver

            # A driver with no pool opened: only its listener() is used.
            listener: AsyncListener = await AsyncPsycopgDriver(url).listener()
            self.stats.connections_opened += 1
            return listener
        raise DriverError(f"LISTEN is not supported over SQLAlchemy's {self._listen_with}")

    async def close(self) -> None:
        """Dispose of an engine the driver created; a caller's engine stays as it is."""
        _stop_counting_connections(self.engine.sync_engine, self.stats)
        if self._owns_engine:
            await self.engine.dispose()
