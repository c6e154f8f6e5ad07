"""Django driver: riverboat's statements on Django's own database connection.

:class:`DjangoDriver` runs every statement through ``django.db.connections[alias]``, the
connection Django's ORM uses in the calling thread. So ``client.insert(...)`` inside
``transaction.atomic()`` is part of that transaction: the job commits or rolls back with
the caller's rows, with no ``insert_tx`` needed (``insert_tx(connection, ...)`` works
too). Statements use ``Query.compile("format")`` (``%s`` placeholders, literal ``%``
doubled), the DB-API style every Django backend's cursor speaks; Postgres backends get
:class:`~riverboat.dialect.postgres.PostgresDialect`, and psycopg (the adapter behind
Django's backend) adapts the Python lists of the batch statements to Postgres arrays.
A ``sqlite3`` database gets riverboat's SQLite dialect, which needs an SQLite with
``jsonb()`` (3.45+) under Python's ``sqlite3`` module.

The worker runtime does **not** run on this driver. :meth:`DjangoDriver.async_driver`
builds an :class:`~riverboat.drivers.psycopg.AsyncPsycopgDriver` from the same
``DATABASES`` entry instead, because:

* the runtime is asyncio, and Django's connections are bound to the thread that opened
  them and refuse use from a running event loop (``SynchronousOnlyOperation``); hopping
  to a thread per statement (``sync_to_async``) would serialise the producers, completer
  and notifier on one thread connection and cost a thread switch per statement;
* the runtime needs a dedicated LISTEN connection and short autocommit leases, which a
  Django connection (one per thread, closed at Django's request boundaries) cannot give.

Work functions still use the ORM freely: sync ones run in worker threads, each with its
own Django connection, which :mod:`riverboat.contrib.django` closes or hands back after
every job (see :func:`riverboat.contrib.django.reclaim_connections`).




"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from riverboat._sql import Statement
from riverboat.drivers.base import (
    Capabilities,
    ConnectionExecutor,
    DriverStats,
    StatementRunner,
    import_optional,
    translate_error,
)
from riverboat.errors import InvalidInputError

if TYPE_CHECKING:
    from riverboat.dialect.base import Dialect
    from riverboat.drivers.psycopg import AsyncPsycopgDriver

__all__ = ["DjangoDriver", "libpq_params"]

# Django-only keys of a postgresql DATABASES entry's connection parameters that libpq
# does not know (get_connection_params() already drops assume_role, pool and the like).
_NOT_LIBPQ = ("cursor_factory", "context", "prepare_threshold")


def _django() -> Any:
    return import_optional("django.db", "django")


_translate = translate_error


def _returns_rows(cursor: Any) -> bool:
    """Whether the statement just run returned a result set. Under Django's psycopg 3
    backend the wrapped cursor's ``pgresult`` answers in 0.1 µs where ``description``
    builds a Column object per column (23 µs for a job row); other backends' cursors
    (sqlite3, psycopg2) have a cheap ``description``."""
    result = getattr(getattr(cursor, "cursor", None), "pgresult", None)
    if result is not None:
        return bool(result.nfields)
    return cursor.description is not None


def _run_on(cursor: Any, stmt: Statement, stats: DriverStats, want_rows: bool) -> Any:
    db = _django()
    stats.count(stmt.query.name)
    sql, names = stmt.query.compile("format")
    try:
        if stmt.query.raw:  # migration DDL, sent exactly as written: no % doubling
            cursor.execute(sql)
        else:
            params = stmt.params
            # An empty list, not None: the backend then un-doubles literal %%.
            cursor.execute(sql, [params[n] for n in names])
        result: Any
        if want_rows:
            result = list(cursor.fetchall()) if _returns_rows(cursor) else []
        else:
            result = int(cursor.rowcount)
        for follow in stmt.then:  # SQLite statement chains
            _run_on(cursor, follow, stats, False)
        return result
    except db.Error as exc:
        raise _translate(exc) from exc


def _dialect_for(vendor: str, schema: str | None) -> Dialect:
    if vendor == "postgresql":
        from riverboat.dialect.postgres import PostgresDialect

        return PostgresDialect(schema)
    if vendor == "sqlite":
        try:
            from riverboat.dialect.sqlite import SqliteDialect
        except ImportError:  # pragma: no cover - the module ships with riverboat
            pass
        else:
            return SqliteDialect(schema)
    raise InvalidInputError(
        "alias", f"riverboat supports Django's postgresql and sqlite3 backends, not {vendor!r}"
    )


class _Executor(ConnectionExecutor):
    """Statements on one Django connection (a transaction, or the caller's)."""

    __slots__ = ()

    def _run(self, stmt: Statement, want_rows: bool) -> Any:
        db = _django()
        try:
            # Opens the connection when there is none, or finds it closed: a DriverError,
            # as from every other driver, not Django's OperationalError.
            cursor = self._conn.cursor()
        except db.Error as exc:
            raise _translate(exc) from exc
        with cursor as cur:
            return _run_on(cur, stmt, self._stats, want_rows)


class DjangoDriver(StatementRunner):
    """A sync driver over ``django.db.connections[alias]``.

    Every call uses the calling thread's connection for ``alias``, exactly as the ORM
    does, so statements join whatever ``atomic()`` block is open there. Outside one, a
    statement runs in Django's autocommit mode (each statement commits by itself).
    ``schema`` is where River's tables live (default: the connection's search_path).
    """

    capabilities = Capabilities(sync=True)

    def __init__(self, alias: str = "default", schema: str | None = None) -> None:
        db = _django()
        if alias not in db.connections.settings:
            raise InvalidInputError("alias", f"no database {alias!r} in settings.DATABASES")
        self.alias = alias
        self.stats = DriverStats()
        vendor = db.connections[alias].vendor
        self.vendor: str = vendor
        self.dialect = _dialect_for(vendor, schema)

    @property
    def connection(self) -> Any:
        """This thread's Django connection for the alias."""
        return _django().connections[self.alias]

    def _executor(self) -> _Executor:
        self.stats.leases += 1
        return _Executor(self.connection, self.stats)

    def _run(self, stmt: Statement, want_rows: bool) -> Any:
        return self._executor()._run(stmt, want_rows)

    @contextmanager
    def transaction(self) -> Iterator[_Executor]:
        """``transaction.atomic(using=alias)``: a transaction, or a savepoint inside the
        caller's."""
        from django.db import transaction

        db = _django()
        with ExitStack() as stack:
            try:  # BEGIN (and maybe connecting) fails as a DriverError; the caller's own
                # errors inside the block stay theirs.
                stack.enter_context(transaction.atomic(using=self.alias))
            except db.Error as exc:
                raise _translate(exc) from exc
            yield self._executor()

    def wrap(self, conn: Any) -> _Executor:
        """An executor over a Django connection (``django.db.connection``,
        ``connections[alias]``); its transaction stays the caller's."""
        db = _django()
        from django.db.backends.base.base import BaseDatabaseWrapper
        from django.utils.connection import ConnectionProxy

        if isinstance(conn, ConnectionProxy):  # django.db.connection
            conn = db.connections[conn._alias]
        if not isinstance(conn, BaseDatabaseWrapper):
            raise TypeError(f"expected a Django database connection, got {type(conn).__name__}")
        return _Executor(conn, self.stats)

    def execute_script(self, sql: str) -> None:
        db = _django()
        self.stats.leases += 1
        try:
            with self.connection.cursor() as cur:
                cur.execute(sql)
        except db.Error as exc:
            raise _translate(exc) from exc

    def close(self) -> None:
        """Nothing to close: the connections are Django's."""

    def async_driver(
        self, *, prepare: bool | None = None, max_pool_size: int = 10
    ) -> AsyncPsycopgDriver:
        """An async psycopg driver on the same database, for the worker runtime.

        Built from the alias's ``DATABASES`` entry (NAME, USER, PASSWORD, HOST, PORT and
        libpq ``OPTIONS`` such as ``sslmode`` or ``options``). ``prepare`` defaults to
        Django's own choice: server-side prepared statements only when ``OPTIONS`` sets
        ``prepare_threshold`` (Django leaves them off so PgBouncer keeps working).
        """
        if self.vendor != "postgresql":
            raise InvalidInputError(
                "alias", "the worker runtime from Django settings needs a postgresql database"
            )
        from riverboat.drivers.psycopg import AsyncPsycopgDriver

        conninfo, django_prepare = libpq_params(self.alias)
        return AsyncPsycopgDriver(
            conninfo,
            schema=self.dialect.schema,
            max_pool_size=max_pool_size,
            prepare=django_prepare if prepare is None else prepare,
        )

    def __repr__(self) -> str:
        return f"DjangoDriver(alias={self.alias!r}, schema={self.dialect.schema!r})"


def libpq_params(alias: str = "default") -> tuple[str, bool]:
    """``(libpq conninfo string, prepared statements wanted)`` for a postgresql alias."""
    db = _django()
    make_conninfo = import_optional("psycopg.conninfo", "psycopg").make_conninfo
    params = dict(db.connections[alias].get_connection_params())
    prepare = params.get("prepare_threshold") is not None
    for key in _NOT_LIBPQ:
        params.pop(key, None)
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None}), prepare
