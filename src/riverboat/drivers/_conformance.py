"""Type-checked only: every driver class fulfils its protocol (:class:`Driver` or
:class:`AsyncDriver`). mypy reads the assignments below, so a driver that lacks an
operation, or has one with the wrong signature, is a type error in CI; nothing here
runs (the drivers' optional libraries are not imported at run time)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from riverboat.drivers.asyncpg import AsyncpgDriver
    from riverboat.drivers.base import AsyncDriver, Driver
    from riverboat.drivers.django import DjangoDriver
    from riverboat.drivers.psycopg import AsyncPsycopgDriver, PsycopgDriver
    from riverboat.drivers.sqlalchemy import AsyncSqlAlchemyDriver, SqlAlchemyDriver
    from riverboat.drivers.sqlite import AsyncSqliteDriver, SqliteDriver

    SYNC_DRIVERS: tuple[type[Driver], ...] = (
        PsycopgDriver,
        SqlAlchemyDriver,
        SqliteDriver,
        DjangoDriver,
    )
    ASYNC_DRIVERS: tuple[type[AsyncDriver], ...] = (
        AsyncPsycopgDriver,
        AsyncpgDriver,
        AsyncSqlAlchemyDriver,
        AsyncSqliteDriver,
    )
