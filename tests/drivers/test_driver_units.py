"""Driver-specific checks that are not part of the per-driver conformance run: URL choice,
missing optional packages, and SQLAlchemy's reading of every statement's parameters."""

from __future__ import annotations

import sys

import pytest

import riverboat
from riverboat import MissingDependencyError
from riverboat.dialect.postgres import PostgresDialect


async def test_asyncpg_url_picks_asyncpg(pg_url: str, pg_schema: str) -> None:
    from riverboat.drivers.asyncpg import AsyncpgDriver
    from riverboat.drivers.psycopg import AsyncPsycopgDriver, PsycopgDriver

    url = pg_url.replace("postgresql://", "postgresql+asyncpg://", 1)
    async with riverboat.AsyncClient(url, schema=pg_schema) as client:
        assert isinstance(client.driver, AsyncpgDriver)
        result = await client.insert({"u": 1}, kind="conf_url")
        assert (await client.job_get(result.job.id)).kind == "conf_url"
    # asyncpg has no sync mode: the sync client stays on psycopg.
    with riverboat.Client(url, schema=pg_schema) as sync_client:
        assert isinstance(sync_client.driver, PsycopgDriver)
        assert sync_client.job_get(result.job.id).id == result.job.id
    async with riverboat.AsyncClient(pg_url, schema=pg_schema) as plain:
        assert isinstance(plain.driver, AsyncPsycopgDriver)


@pytest.mark.parametrize(
    ("module", "build"),
    [
        ("asyncpg", "riverboat.drivers.asyncpg:AsyncpgDriver"),
        ("sqlalchemy", "riverboat.drivers.sqlalchemy:SqlAlchemyDriver"),
    ],
)
def test_missing_package_names_the_extra(
    module: str, build: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    path, _, name = build.partition(":")
    cls = getattr(importlib.import_module(path), name)  # the module imports without it
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingDependencyError) as info:
        cls("postgresql://localhost/x")
    assert info.value.extra == module
    assert f"riverboat[{module}]" in str(info.value)


def test_sqlalchemy_text_reads_every_parameter() -> None:
    """``text()`` must see exactly the parameters riverboat binds, casts included."""
    import sqlalchemy

    from riverboat.drivers.sqlalchemy import _Texts

    texts = _Texts(sqlalchemy)
    dialect = PostgresDialect("some_schema")
    assert dialect.q
    for query in dialect.q.values():
        clause, names = texts.get(query)
        assert set(clause._bindparams) == set(names), query.name


def test_sqlalchemy_session_insert_runs_one_statement(pg_url: str, pg_schema: str) -> None:
    """In a Session the job rides on session.connection(): one statement, no flush, and
    the session's commit or rollback decides whether the job exists."""
    import sqlalchemy
    from sqlalchemy.orm import Session

    from riverboat.drivers.sqlalchemy import SqlAlchemyDriver

    engine = sqlalchemy.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"))
    executed: list[str] = []
    sqlalchemy.event.listen(
        engine, "before_cursor_execute", lambda _c, _cur, sql, *_: executed.append(sql)
    )
    client = riverboat.Client(SqlAlchemyDriver(engine, schema=pg_schema))
    try:
        with Session(engine) as session:
            gone = client.insert_tx(session, {"s": 1}, kind="conf_session")
            assert len(executed) == 1 and "river_job" in executed[0]
            session.rollback()
        with Session(engine) as session:
            kept = client.insert_tx(session, {"s": 2}, kind="conf_session")
            session.commit()
        assert len(executed) == 2
        with pytest.raises(riverboat.NotFoundError):
            client.job_get(gone.job.id)
        assert client.job_get(kept.job.id).args == {"s": 2}
    finally:
        client.close()
        engine.dispose()


async def test_asyncpg_driver_counts_a_lease_left_in_a_transaction(
    pg_url: str, pg_schema: str
) -> None:
    from riverboat.drivers.asyncpg import AsyncpgDriver

    driver = AsyncpgDriver(pg_url, schema=pg_schema, max_pool_size=1)
    try:
        async with driver._lease() as conn:
            await conn.execute("BEGIN")
        assert driver.stats.resets == 1
        # asyncpg rolled it back: the single pooled connection is idle and usable again.
        assert await driver.fetch(driver.dialect.stmt("ping")) == [(1,)]
        assert driver.stats.connections_opened == 1
    finally:
        await driver.close()


def test_a_broken_install_is_not_reported_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """psycopg present but failing to import (no libpq, a broken wheel): the message says
    what failed, and the ImportError stays the cause."""
    import importlib.abc

    from riverboat.drivers.psycopg import PsycopgDriver

    class BrokenPsycopg(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, *_: object) -> None:
            if name == "psycopg":
                raise ImportError("no pq wrapper available: libpq library not found")

    for name in [m for m in sys.modules if m == "psycopg" or m.startswith("psycopg.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [BrokenPsycopg(), *sys.meta_path])
    with pytest.raises(MissingDependencyError) as info:
        PsycopgDriver("postgresql://localhost/x")
    assert "psycopg failed to import" in str(info.value)
    assert "libpq library not found" in str(info.value)
    assert isinstance(info.value.__cause__, ImportError)
    # A truly absent package still reads as "not installed".
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(MissingDependencyError, match="psycopg is not installed") as absent:
        PsycopgDriver("postgresql://localhost/x")
    assert absent.value.__cause__ is not None


def test_the_sync_sqlalchemy_driver_refuses_an_async_dbapi(pg_url: str) -> None:
    """Accepted before, and the first statement failed with MissingGreenlet."""
    from riverboat.drivers.sqlalchemy import SqlAlchemyDriver

    with pytest.raises(riverboat.InvalidInputError, match="asyncpg is an async DBAPI"):
        SqlAlchemyDriver(pg_url.replace("postgresql://", "postgresql+asyncpg://"))


def test_drivers_on_a_callers_engine_are_not_kept_alive_by_it(pg_url: str) -> None:
    """A Client per request on one engine, closed but its driver not (the engine is the
    caller's): each driver's listener stayed on the engine, and so did the driver (2,000
    of them held 250 MB). Connections are still counted, per live driver."""
    import gc
    import weakref

    import sqlalchemy

    from riverboat.drivers.sqlalchemy import SqlAlchemyDriver

    engine = sqlalchemy.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"))
    gone = []
    for _ in range(50):
        driver = SqlAlchemyDriver(engine)
        gone.append(weakref.ref(driver))
        riverboat.Client(driver).close()
    del driver
    gc.collect()
    assert all(ref() is None for ref in gone)
    kept = SqlAlchemyDriver(engine)
    engine.dispose()
    before = kept.stats.connections_opened
    with engine.connect():
        pass
    assert kept.stats.connections_opened == before + 1
    engine.dispose()


@pytest.mark.parametrize("dbapi", ["asyncpg", "psycopg"])
async def test_the_sqlalchemy_listener_reaches_the_engines_database(
    pg_url: str, dbapi: str
) -> None:
    """The LISTEN connection is opened from the engine's URL: a database name with a
    space (psycopg refused SQLAlchemy's rendering of it) and a dialect's own query option
    (prepared_statement_cache_size: asyncpg sent it to the server as a setting) failed
    every LISTEN, and the workers fell back to polling."""
    import psycopg
    import sqlalchemy
    from sqlalchemy.ext.asyncio import create_async_engine

    from riverboat.drivers.sqlalchemy import AsyncSqlAlchemyDriver

    name = f"sp ace {dbapi}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        base = sqlalchemy.engine.make_url(pg_url)
        url = base.set(
            drivername=f"postgresql+{dbapi}",
            database=name,
            query={"prepared_statement_cache_size": "0"} if dbapi == "asyncpg" else {},
        )
        engine = create_async_engine(url)
        driver = AsyncSqlAlchemyDriver(engine)
        try:
            listener = await driver.listener()
            await listener.close()
        finally:
            await driver.close()
            await engine.dispose()
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_thread_watchdog_firing_and_cancel_exclude_each_other() -> None:
    """Outside an event loop the deadline is a timer thread. A cancel that came while it
    fired returned at once, and the call's connection went back to the pool as the
    timer shut its socket: the next statement on it failed ("server closed the
    connection"). cancel() now waits for a firing timer and says it fired."""
    import threading

    from riverboat.drivers.base import Watchdog

    aborting, release = threading.Event(), threading.Event()

    def slow_abort() -> None:
        aborting.set()
        assert release.wait(10)

    fired = Watchdog(0.0, slow_abort, "slow")
    assert aborting.wait(10)  # the timer is inside abort
    outcome: list[bool] = []
    canceller = threading.Thread(target=lambda: outcome.append(fired.cancel()))
    canceller.start()
    canceller.join(0.2)
    assert canceller.is_alive() and outcome == []  # waits for the firing timer
    release.set()
    canceller.join(10)
    assert outcome == [True] and fired.missed

    aborted: list[int] = []
    quiet = Watchdog(60.0, lambda: aborted.append(1), "quiet")
    assert quiet.cancel() is False and not quiet.missed and aborted == []
