"""What a client logs during a database outage (issue #25.9): one WARNING per path when
it is found dead, a summary per ``summary_every`` while it stays dead, one WARNING when
it answers again; not a line per failed poll (before: ~1.7 lines a second per worker).

Postgres only: the outage is a real TCP proxy that stops forwarding every connection,
new ones too, then lets new ones through again.
"""

from __future__ import annotations

import asyncio
import logging
import time

import psycopg
import pytest

import riverboat
from riverboat import QueueConfig, Workers
from tests.reliability._support import FreezingProxy
from tests.waiting import wait_until_async

# A healthy claim must not miss the short deadline: run apart from the busy suite
# (tests/conftest.py SERIAL).
pytestmark = [pytest.mark.asyncio, pytest.mark.serial]


async def test_an_outage_is_logged_in_a_few_lines(
    pg_url: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    proxy = FreezingProxy(str(info.get("host", "127.0.0.1")), int(info.get("port") or 5432))
    proxy.start()
    client = riverboat.AsyncClient(
        proxy.url(pg_url),
        schema=pg_schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=Workers(),
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    )
    client.runtime.config.db_call_timeout = 0.4
    caplog.set_level(logging.INFO, "riverboat")
    await client.start()
    producer = client.runtime.producers["default"]
    producer.health.summary_every = 1.0
    try:
        await wait_until_async(lambda: producer.fetches > 0, timeout=10, what="a first claim")
        proxy.freeze(new_too=True)
        began = time.monotonic()
        await wait_until_async(
            lambda: producer.health.failures >= 8, timeout=30, what="eight failed claims"
        )
        proxy.thaw()
        await wait_until_async(
            lambda: not producer.health.dead, timeout=30, what="the producer answered again"
        )
        outage = time.monotonic() - began
        failures = producer.fetch_errors
    finally:
        await asyncio.wait_for(client.stop(), 30)
        await client.close()
        proxy.close()
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "riverboat.producer" and r.levelno >= logging.WARNING
    ]
    print(f"{failures} failed claims in a {outage:.1f}s outage, {len(lines)} lines:")
    print("\n".join(lines))
    assert "database calls failing" in lines[0]
    assert "database calls work again" in lines[-1]
    assert all("still failing" in line for line in lines[1:-1])
    # One line when found dead, one per second after (summary_every), one at recovery.
    assert len(lines) <= outage / producer.health.summary_every + 3
    assert len(lines) < failures
