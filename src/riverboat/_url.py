"""Picking a driver from a database URL."""

from __future__ import annotations

from typing import Any

from riverboat.errors import InvalidInputError

__all__ = ["async_driver_from_url", "driver_from_url", "is_sqlite_url"]

_PG_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://", "postgresql+asyncpg://")
_ASYNCPG_SCHEME = "postgresql+asyncpg://"


def is_sqlite_url(url: str) -> bool:
    return url.startswith("sqlite:")


def _check(url: object) -> str:
    if not isinstance(url, str) or not url:
        raise InvalidInputError("database_url", "must be a non-empty URL string")
    if not (url.startswith(_PG_SCHEMES) or is_sqlite_url(url)):
        raise InvalidInputError(
            "database_url",
            "must start with postgresql:// (psycopg) or sqlite:/// (embedded SQLite)",
        )
    return url


def driver_from_url(url: str, *, schema: str | None = None) -> Any:
    """A sync driver: psycopg for ``postgresql://`` (and for ``postgresql+asyncpg://``,
    asyncpg having no sync mode), sqlite3 for ``sqlite:///path``."""
    url = _check(url)
    if is_sqlite_url(url):
        from riverboat.drivers.sqlite import SqliteDriver

        return SqliteDriver(url, schema=schema)
    from riverboat.drivers.psycopg import PsycopgDriver

    return PsycopgDriver(url, schema=schema)


def async_driver_from_url(url: str, *, schema: str | None = None) -> Any:
    """An async driver: psycopg's async connections, asyncpg for
    ``postgresql+asyncpg://``, or sqlite3 on a worker thread."""
    url = _check(url)
    if is_sqlite_url(url):
        from riverboat.drivers.sqlite import AsyncSqliteDriver

        return AsyncSqliteDriver(url, schema=schema)
    if url.startswith(_ASYNCPG_SCHEME):
        from riverboat.drivers.asyncpg import AsyncpgDriver

        return AsyncpgDriver(url, schema=schema)
    from riverboat.drivers.psycopg import AsyncPsycopgDriver

    return AsyncPsycopgDriver(url, schema=schema)
