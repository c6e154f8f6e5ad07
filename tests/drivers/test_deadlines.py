"""Per-call deadlines, TCP keepalives and lock timeouts of the Postgres drivers (issue
#25.2), through a real TCP proxy that stops forwarding without closing (a silent peer).

A call that misses its deadline raises DeadlineExceededError at the deadline (not when
TCP gives up), its connection is never handed out again, and the next call works on a
fresh connection; the LISTEN connection is checked while quiet and a silent one fails
the iteration; a statement that meets another session's row lock fails after the
driver's lock_timeout on a connection that stays usable.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from riverboat import DriverError
from riverboat.drivers.asyncpg import AsyncpgDriver
from riverboat.drivers.base import TcpSettings, call_deadline
from riverboat.drivers.psycopg import AsyncPsycopgDriver, PsycopgDriver
from riverboat.errors import DeadlineExceededError
from tests.reliability._support import FreezingProxy

pytestmark = pytest.mark.asyncio

DRIVERS = ["psycopg", "asyncpg"]


def _driver(kind: str, url: str, schema: str, **kwargs: Any) -> Any:
    if kind == "psycopg":
        return AsyncPsycopgDriver(url, schema=schema, **kwargs)
    return AsyncpgDriver(url, schema=schema, **kwargs)


@pytest.fixture
def proxy(pg_url: str) -> Any:
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    proxy = FreezingProxy(str(info.get("host", "127.0.0.1")), int(info.get("port") or 5432))
    proxy.start()
    yield proxy
    proxy.close()


@pytest.fixture
async def job_id(pg_url: str, pg_schema: str) -> AsyncIterator[int]:
    import riverboat

    async with riverboat.AsyncClient(pg_url, schema=pg_schema) as client:
        yield (await client.insert({}, kind="deadline")).job.id


@pytest.mark.parametrize("kind", DRIVERS)
async def test_a_silent_connection_misses_its_deadline_and_is_never_reused(
    kind: str, proxy: FreezingProxy, pg_url: str, pg_schema: str, job_id: int
) -> None:
    driver = _driver(kind, proxy.url(pg_url), pg_schema)
    stmt = driver.dialect.job_get_by_id_many([job_id])
    try:
        assert len(await driver.fetch(stmt)) == 1
        opened = driver.stats.connections_opened
        assert proxy.freeze() >= 1
        loop = asyncio.get_running_loop()
        began = loop.time()
        with call_deadline(0.5), pytest.raises(DeadlineExceededError, match=r"within 0\.5s"):
            await driver.fetch(stmt)
        missed_after = loop.time() - began
        # The frozen connection is gone: the next call opens a fresh one and answers.
        with call_deadline(5.0):
            assert len(await driver.fetch(stmt)) == 1
        assert driver.stats.connections_opened > opened
    finally:
        await driver.close()
    print(f"{kind}: deadline of 0.5 s missed after {missed_after:.2f}s")
    assert missed_after < 5.0  # not TCP's minutes; the exact figure is printed


@pytest.mark.parametrize("kind", DRIVERS)
async def test_a_silent_listen_connection_fails_its_health_check(
    kind: str, proxy: FreezingProxy, pg_url: str, pg_schema: str
) -> None:
    driver = _driver(kind, proxy.url(pg_url), pg_schema)
    listener = await driver.listener()
    try:
        await listener.listen(f"{pg_schema}.deadline_topic")
        proxy.freeze()
        with call_deadline(0.3), pytest.raises(DriverError, match="health check"):
            async with asyncio.timeout(10):
                async for _ in listener.notifications():
                    pass
    finally:
        await listener.close()
        await driver.close()


@pytest.mark.parametrize("kind", DRIVERS)
async def test_a_foreign_row_lock_fails_the_statement_not_the_connection(
    kind: str, pg_url: str, pg_schema: str
) -> None:
    driver = _driver(kind, pg_url, pg_schema, lock_timeout=0.2)
    touch = driver.dialect.queue_create_or_set_updated_at("locked_queue")
    holder = await psycopg.AsyncConnection.connect(pg_url)
    try:
        await driver.fetch(touch)
        await holder.execute(
            f'SELECT * FROM "{pg_schema}".river_queue WHERE name = %s FOR UPDATE',
            ["locked_queue"],
        )
        with call_deadline(5.0), pytest.raises(DriverError, match="lock timeout"):
            await driver.fetch(touch)
        await holder.rollback()
        with call_deadline(5.0):
            assert len(await driver.fetch(touch)) == 1  # the same pool, still healthy
    finally:
        await holder.close()
        await driver.close()


async def test_psycopg_connections_get_keepalives_and_a_tcp_user_timeout(
    pg_url: str, pg_schema: str
) -> None:
    sync = PsycopgDriver(pg_url, schema=pg_schema)
    driver = sync.async_driver()
    try:
        await driver.fetch(driver.dialect.stmt("ping"))
        assert driver._pool is not None
        params = driver._pool._idle[0].conn.info.get_parameters()
        sync.fetch(sync.dialect.stmt("ping"))
        with sync._pool.connection() as conn:
            sync_params = conn.info.get_parameters()
    finally:
        await driver.close()
        sync.close()
    for got in (params, sync_params):
        assert got["keepalives"] == "1"
        assert got["keepalives_idle"] == "15"
        assert got["tcp_user_timeout"] == "30000"
    # A parameter the URL names wins over the default.
    custom = AsyncPsycopgDriver(pg_url + "?keepalives_idle=60", tcp=TcpSettings(keepalives_count=9))
    try:
        await custom.fetch(custom.dialect.stmt("ping"))
        assert custom._pool is not None
        got = custom._pool._idle[0].conn.info.get_parameters()
    finally:
        await custom.close()
    assert got["keepalives_idle"] == "60"
    assert got["keepalives_count"] == "9"


async def test_asyncpg_sockets_get_keepalives_and_a_tcp_user_timeout(
    pg_url: str, pg_schema: str
) -> None:
    driver = AsyncpgDriver(pg_url, schema=pg_schema)
    try:
        async with driver._lease() as conn:
            sock = conn._con._transport.get_extra_info("socket")
            keepalive = sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
            idle = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
            user_timeout = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
    finally:
        await driver.close()
    assert (keepalive, idle, user_timeout) == (1, 15, 30000)
