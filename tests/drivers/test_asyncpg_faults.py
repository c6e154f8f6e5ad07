"""The asyncpg driver while the server ends its connections (``pg_terminate_backend``
every 100 ms under eight tasks inserting). asyncpg raised ``InternalClientError`` for a
statement sent on a connection just ended and never took that connection back into its
pool: riverboat passed the error on untranslated, the pool's slots ran out one by one,
every later call waited for a connection for ever, and ``close()`` never returned."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter

import psycopg
import pytest

from riverboat import AsyncClient, DriverError

pytestmark = pytest.mark.asyncio

pytest.importorskip("asyncpg")


async def test_terminated_connections_are_replaced_and_close_returns(
    pg_url: str, pg_schema: str
) -> None:
    from riverboat.drivers.asyncpg import AsyncpgDriver

    app = f"rb_asyncpg_{uuid.uuid4().hex[:8]}"
    driver = AsyncpgDriver(f"{pg_url}?application_name={app}", schema=pg_schema, max_pool_size=4)
    client = AsyncClient(driver, skip_unknown_job_check=True)
    errors: Counter[str] = Counter()
    inserted = 0
    stop_killing = threading.Event()
    killed = threading.Event()

    def kill_backends() -> None:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            while not stop_killing.wait(0.1):
                rows = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = %s",
                    (app,),
                ).fetchall()
                if any(ok for (ok,) in rows):
                    killed.set()

    async def insert_until(done: asyncio.Event) -> None:
        nonlocal inserted
        while not done.is_set():
            try:
                await client.insert({"x": 1}, kind="fault")
                inserted += 1
            except DriverError as exc:
                errors[type(exc.__cause__).__name__] += 1

    killer = threading.Thread(target=kill_backends)
    done = asyncio.Event()
    tasks = [asyncio.create_task(insert_until(done)) for _ in range(8)]
    killer.start()
    try:
        await asyncio.to_thread(killed.wait, 30)
        assert killed.is_set()
        # Faults for a while (their length is the scenario, not a wait for an event).
        await asyncio.sleep(2.0)
    finally:
        stop_killing.set()
        await asyncio.to_thread(killer.join, 30)
        done.set()
        # Every task ends: none waits on a pool whose slots leaked.
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    assert sum(errors.values()) > 0  # the faults reached the statements
    assert inserted > 0
    # Afterwards the pool serves every slot again: as many inserts at once as slots
    # (an error other than DriverError, untranslated, failed the gather above).
    await asyncio.wait_for(
        asyncio.gather(*(client.insert({"x": 2}, kind="fault") for _ in range(4))), 30
    )
    await asyncio.wait_for(client.close(), 30)
    await asyncio.wait_for(driver.close(), 30)
