"""The psycopg drivers' connection handling: a bad URL fails at once with the server's
own message, a pool timeout says why, and the async pool bounds its waits, checks idle
connections and retires old ones."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC

import psycopg
import pytest

import riverboat
from riverboat import DriverError
from riverboat._sql import Query, Statement
from riverboat.drivers import psycopg as psycopg_driver
from riverboat.drivers.psycopg import AsyncPsycopgDriver, PsycopgDriver
from tests.waiting import wait_until

BACKEND_PID = Statement(Query("backend_pid", "SELECT pg_backend_pid()"), {})


def _with_database(pg_url: str, name: str) -> str:
    return pg_url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def scratch_db(pg_url: str) -> Iterator[str]:
    """A database of its own, which a test may drop."""
    name = "scratch_" + uuid.uuid4().hex[:10]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_sync_driver_fails_at_once_with_the_servers_error(pg_url: str) -> None:
    url = _with_database(pg_url, "no_such_database")
    with riverboat.Client(url) as client, pytest.raises(DriverError) as info:
        client.job_list()
    message = str(info.value)
    # The server's own words, not the pool's "couldn't get a connection after 30 sec".
    assert 'database "no_such_database" does not exist' in message
    assert "PoolTimeout" not in message


def test_sync_pool_timeout_says_why(pg_url: str, scratch_db: str) -> None:
    driver = PsycopgDriver(_with_database(pg_url, scratch_db), pool_timeout=0.5)
    try:
        assert driver.fetch(driver.dialect.stmt("ping")) == [(1,)]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{scratch_db}" WITH (FORCE)')
        messages = []
        for _ in range(3):  # the dead pooled connection fails first, then no new one comes
            with pytest.raises(DriverError) as info:
                driver.fetch(driver.dialect.stmt("ping"))
            messages.append(str(info.value))
        assert "PoolTimeout" in messages[-1]
        assert f'database "{scratch_db}" does not exist' in messages[-1]
    finally:
        driver.close()


async def test_async_pool_waits_at_most_pool_timeout(pg_url: str) -> None:
    driver = AsyncPsycopgDriver(pg_url, max_pool_size=1, pool_timeout=0.2)
    try:
        async with driver.transaction():  # holds the only connection
            with pytest.raises(DriverError, match=r"no connection free after 0\.2 s"):
                await driver.fetch(driver.dialect.stmt("ping"))
        assert await driver.fetch(driver.dialect.stmt("ping")) == [(1,)]
    finally:
        await driver.close()


async def test_async_pool_checks_an_idle_connection_before_use(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(psycopg_driver, "CHECK_IDLE_AFTER", 0.0)
    driver = AsyncPsycopgDriver(pg_url, max_pool_size=1)
    try:
        pid = (await driver.fetch(BACKEND_PID))[0][0]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        # The check finds the idle connection dead and opens another: no error.
        assert (await driver.fetch(BACKEND_PID))[0][0] != pid
        assert driver.stats.connections_opened == 2
    finally:
        await driver.close()


def _terminate(pg_url: str, pid: int) -> None:
    """End backend ``pid`` and wait until the server no longer lists it."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_until(
            lambda: (
                not conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            ),
            what=f"backend {pid} gone",
        )


@pytest.mark.parametrize("idle_after", [0.0, None])
def test_sync_pool_checks_an_idle_connection_before_use(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, idle_after: float | None
) -> None:
    """The sync driver's pool (psycopg_pool) checks a connection idle for
    CHECK_IDLE_AFTER before handing it out, as the async pool does: a connection the
    server ended while it sat in the pool costs no DriverError (it cost one per pooled
    connection, after a server restart). One used just before (the hot path) is not
    checked, and its next statement fails as it would have."""
    if idle_after is not None:
        monkeypatch.setattr(psycopg_driver, "CHECK_IDLE_AFTER", idle_after)
    else:
        monkeypatch.setattr(psycopg_driver, "CHECK_IDLE_AFTER", 3600.0)
    driver = PsycopgDriver(pg_url, max_pool_size=1)
    try:
        pid = driver.fetch(BACKEND_PID)[0][0]
        _terminate(pg_url, pid)
        if idle_after is None:
            with pytest.raises(DriverError):
                driver.fetch(BACKEND_PID)
        assert driver.fetch(BACKEND_PID)[0][0] != pid
    finally:
        driver.close()


async def test_async_pool_retires_connections_past_their_lifetime(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(psycopg_driver, "MAX_LIFETIME", 0.0)
    driver = AsyncPsycopgDriver(pg_url, max_pool_size=1)
    try:
        pids = {(await driver.fetch(BACKEND_PID))[0][0] for _ in range(3)}
        assert len(pids) == 3 and driver.stats.connections_opened == 3
    finally:
        await driver.close()


async def test_async_transaction_translates_a_failed_commit(pg_url: str, pg_schema: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            f'CREATE TABLE "{pg_schema}".deferred (n int UNIQUE DEFERRABLE INITIALLY DEFERRED)'
        )
    driver = AsyncPsycopgDriver(pg_url, schema=pg_schema)
    try:
        with pytest.raises(DriverError, match="UniqueViolation"):
            async with driver.transaction() as tx:
                conn = tx._conn
                await conn.execute(f'INSERT INTO "{pg_schema}".deferred VALUES (1), (1)')
    finally:
        await driver.close()


SESSION = Statement(
    Query(
        "session_settings",
        "SELECT current_setting('TimeZone'), current_setting('plan_cache_mode'), now() AS moment",
    ),
    {},
)


def _server_zone(pg_url: str) -> str:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('TimeZone')").fetchone()
    assert row is not None
    return str(row[0])


def test_own_connections_run_in_utc_with_generic_plans(pg_url: str, pg_schema: str) -> None:
    """Timestamps load as datetime.timezone.utc, without psycopg's per-value conversion
    into a ZoneInfo; the instant is the same as on a connection in the server's zone."""
    driver = PsycopgDriver(pg_url, schema=pg_schema)
    try:
        ((zone, plans, moment),) = driver.fetch(SESSION)
        (job,) = riverboat.Client(driver).insert_many(
            [riverboat.InsertManyParams({}, kind="tz_probe")]
        )
    finally:
        driver.close()
    assert (zone, plans) == ("UTC", "force_generic_plan")
    assert moment.tzinfo is UTC and job.job.created_at.tzinfo is UTC


async def test_async_own_connections_run_in_utc(pg_url: str, pg_schema: str) -> None:
    driver = AsyncPsycopgDriver(pg_url, schema=pg_schema)
    try:
        ((zone, plans, moment),) = await driver.fetch(SESSION)
        client = riverboat.AsyncClient(driver)
        (job,) = await client.insert_many([riverboat.InsertManyParams({}, kind="tz_probe")])
        stored = await client.job_get(job.job.id)
    finally:
        await driver.close()
    assert (zone, plans) == ("UTC", "force_generic_plan")
    assert moment.tzinfo is UTC and stored.scheduled_at.tzinfo is UTC


def test_settings_are_left_alone_without_prepare_or_on_the_callers_connection(
    pg_url: str, pg_schema: str
) -> None:
    """prepare=False (PgBouncer in transaction pooling) and a connection the caller
    hands over keep the session as it is: a SET there would reach other sessions."""
    server_zone = _server_zone(pg_url)
    unprepared = PsycopgDriver(pg_url, schema=pg_schema, prepare=False)
    try:
        ((zone, plans, _moment),) = unprepared.fetch(SESSION)
    finally:
        unprepared.close()
    assert (zone, plans) == (server_zone, "auto")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        ((zone, plans, _moment),) = PsycopgDriver(conn, schema=pg_schema).fetch(SESSION)
    assert (zone, plans) == (server_zone, "auto")
