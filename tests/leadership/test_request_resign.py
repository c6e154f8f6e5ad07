"""``leader_request_resign()``: any client asks the current leader to step down; it
resigns and the election runs again at once. On Postgres (NOTIFY) and SQLite (outbox)."""

from __future__ import annotations

import asyncio

import pytest

import riverboat
from tests.leadership._helpers import elector_of, fast_maintenance, wait_any_leader
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.waiting import wait_until_async


@pytest.mark.asyncio
async def test_request_resign_from_another_client(any_db: Db) -> None:  # noqa: F811
    db = any_db
    clients = [
        riverboat.AsyncClient(
            db.url,
            schema=db.schema,
            id=f"node{i}",
            queues={"default": riverboat.QueueConfig()},
            workers=riverboat.Workers(),
            maintenance=fast_maintenance(),
        )
        for i in (1, 2)
    ]
    for client in clients:
        await client.start()
    try:
        leader = await wait_any_leader(clients, 10)
        # A request sent before the leader LISTENs is lost (as River's is): wait for it.
        assert leader.runtime.notifier is not None
        await asyncio.wait_for(leader.runtime.notifier.connected.wait(), 10)
        before = elector_of(leader).stats.resignations
        async with riverboat.AsyncClient(db.url, schema=db.schema) as admin:  # insert-only
            await admin.leader_request_resign()
        await wait_until_async(lambda: elector_of(leader).stats.resignations > before, timeout=10)
        await wait_any_leader(clients, 10)  # someone leads again
    finally:
        for client in clients:
            await client.stop()
            await client.close()


def test_sync_client_spelling(any_db: Db) -> None:  # noqa: F811
    """The sync client sends the same request; with nobody leading it is harmless."""
    db = any_db
    with riverboat.Client(db.url, schema=db.schema) as client:
        client.leader_request_resign()
