"""LISTEN/NOTIFY round trips, for drivers whose capabilities say ``listen``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from riverboat.drivers.base import Notification
from tests.drivers.harness import Harness, needs


@asynccontextmanager
async def listener_of(h: Harness) -> AsyncIterator[Any]:
    """The driver's listener; a sync driver's comes from its async twin."""
    driver = h.driver if h.is_async else h.driver.async_driver()
    listener = await driver.listener()
    try:
        yield listener
    finally:
        await listener.close()
        if driver is not h.driver:
            await driver.close()


async def next_note(listener: Any, timeout: float = 5.0) -> Notification:
    notes = listener.notifications()
    try:
        async with asyncio.timeout(timeout):
            note: Notification = await anext(notes)
            return note
    finally:
        await notes.aclose()


async def test_notify_round_trip(h: Harness) -> None:
    needs(h, "listen")
    channel = f"{h.env.schema}.conf_topic"
    async with listener_of(h) as listener:
        await listener.listen(channel)
        await h.fetch(
            h.driver, h.driver.dialect.stmt("pg_notify", channel=channel, payload='{"n": 1}')
        )
        note = await next_note(listener)
        assert note == Notification(channel, '{"n": 1}')
        await listener.unlisten(channel)
        await h.fetch(
            h.driver, h.driver.dialect.stmt("pg_notify", channel=channel, payload='{"n": 2}')
        )
        await listener.listen(channel)
        await h.fetch(
            h.driver, h.driver.dialect.stmt("pg_notify", channel=channel, payload='{"n": 3}')
        )
        # n=2 was sent while not listening, so the next one is n=3.
        assert (await next_note(listener)).payload == '{"n": 3}'


async def test_insert_notifies_its_queue(h: Harness) -> None:
    needs(h, "listen")
    channel = f"{h.env.schema}.river_insert"
    async with listener_of(h) as listener:
        await listener.listen(channel)
        client = h.client()
        await h.call(client.insert, {"x": 1}, kind="conf_notify")
        note = await next_note(listener)
        assert note.channel == channel
        assert json.loads(note.payload) == {"queue": "default"}
