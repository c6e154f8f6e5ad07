"""LISTEN/NOTIFY round trips, for drivers whose capabilities say ``listen``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from riverboat import DriverError
from riverboat._sql import Query, Statement
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


def channel_of(h: Harness, topic: str) -> str:
    # The notifier's channels are "<schema>.<topic>"; SQLite's outbox matches the topic.
    return f"{h.env.schema or 'main'}.{topic}"


def notify(h: Harness, topic: str, payload: str) -> Any:
    dialect = h.driver.dialect
    if dialect.name == "postgres":
        return dialect.stmt("pg_notify", channel=channel_of(h, topic), payload=payload)
    return dialect.notification_insert_many([(topic, payload)])


async def test_notify_round_trip(h: Harness) -> None:
    needs(h, "listen")
    channel = channel_of(h, "conf_topic")
    async with listener_of(h) as listener:
        await listener.listen(channel)
        await h.fetch(h.driver, notify(h, "conf_topic", '{"n": 1}'))
        note = await next_note(listener)
        assert note == Notification(channel, '{"n": 1}')
        if h.driver.dialect.name != "postgres":
            return  # an outbox poller may still see rows sent between unlisten and listen
        await listener.unlisten(channel)
        await h.fetch(h.driver, notify(h, "conf_topic", '{"n": 2}'))
        await listener.listen(channel)
        await h.fetch(h.driver, notify(h, "conf_topic", '{"n": 3}'))
        # n=2 was sent while not listening, so the next one is n=3.
        assert (await next_note(listener)).payload == '{"n": 3}'


async def test_insert_notifies_its_queue(h: Harness) -> None:
    needs(h, "listen")
    channel = channel_of(h, "river_insert")
    async with listener_of(h) as listener:
        await listener.listen(channel)
        client = h.client()
        await h.call(client.insert, {"x": 1}, kind="conf_notify")
        note = await next_note(listener)
        assert note.channel == channel
        assert json.loads(note.payload) == {"queue": "default"}


async def test_lost_connection_raises_driver_error(h: Harness) -> None:
    """The notifier reconnects on DriverError: a listener whose connection dies must
    raise it rather than hang or end silently."""
    needs(h, "listen")
    if h.driver.dialect.name != "postgres":
        pytest.skip("only Postgres listeners hold a server connection")
    channel = channel_of(h, "conf_lost")
    async with listener_of(h) as listener:
        await listener.listen(channel)
        kill = Statement(
            Query(
                "conf_kill",
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN %conf_lost%' AND pid <> pg_backend_pid()",
            ),
            {},
        )
        assert [tuple(r) for r in await h.fetch(h.driver, kill)] == [(True,)]
        with pytest.raises(DriverError):
            await next_note(listener)
