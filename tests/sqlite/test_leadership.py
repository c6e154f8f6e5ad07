"""Leadership on SQLite where it differs from Postgres: terms that River's Go driver
spelled as text, the resignation waking followers through the river_notification
outbox (SQLite's LISTEN/NOTIFY), and the outbox's own cleaner. What both databases do
alike runs on every driver in tests/drivers (test_leadership, test_maintenance); the
Postgres handover over NOTIFY is in tests/leadership/test_election."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from riverboat import AsyncClient, ElectorConfig, MaintenanceConfig, RetryPolicy, Workers
from riverboat.dialect.postgres import PostgresDialect
from riverboat.drivers.sqlite import AsyncSqliteDriver
from riverboat.runtime.maintenance import MaintenanceContext
from riverboat.runtime.maintenance.notification_cleaner import NotificationCleaner
from tests.leadership._helpers import (
    LeaderWatch,
    elector_of,
    fast_maintenance,
    make_client,
    wait_any_leader,
)
from tests.sqlite.helpers import query
from tests.waiting import wait_until_async


def client_on(url: str, client_id: str, **kwargs: Any) -> AsyncClient:
    """The leadership tests' client, on a SQLite file (no schema)."""
    return make_client(url, None, client_id, **kwargs)  # type: ignore[arg-type]


async def test_go_spelled_terms_match_by_value(sqlite_url: str) -> None:
    driver = AsyncSqliteDriver(sqlite_url)
    d = driver.dialect
    try:
        await driver.fetch(d.leader_attempt_elect(leader_id="b", ttl=15))
        # A term written the way River's Go driver spells times (trailing zeros dropped)
        # is still recognised by value.
        query(
            sqlite_url,
            """UPDATE river_leader SET elected_at = '2026-01-02 03:04:05.5',
                   expires_at = datetime('now', 'subsec', '+15 seconds')""",
        )
        go_term = datetime(2026, 1, 2, 3, 4, 5, 500_000, tzinfo=UTC)
        rows = await driver.fetch(
            d.leader_attempt_reelect(leader_id="b", elected_at=go_term, ttl=15)
        )
        assert len(rows) == 1
        rows = await driver.fetch(d.leader_resign(leader_id="b", elected_at=go_term))
        assert [tuple(r) for r in rows] == [("b",)]
    finally:
        await driver.close()


async def test_three_clients_one_leader_and_handover_through_the_outbox(sqlite_url: str) -> None:
    # Followers poll only every 5 s, so a sub-second handover can only come from the
    # resignation's outbox row waking them.
    slow = ElectorConfig(
        elect_interval=5.0, elect_jitter=0.1, ttl=8.0, reelect_interval=0.3, safety_margin=0.5
    )
    watch = LeaderWatch()
    clients: list[AsyncClient] = []
    for client_id in ("c1", "c2", "c3"):
        client = client_on(sqlite_url, client_id, maintenance=fast_maintenance(elector=slow))
        await client.start()
        watch.add(client)
        clients.append(client)
    try:
        for client in clients:
            assert client.runtime.notifier is not None
            await asyncio.wait_for(client.runtime.notifier.connected.wait(), 5)
        leader = await wait_any_leader(clients, 5)
        elector = elector_of(leader)
        await wait_until_async(lambda: elector.stats.reelections >= 3, timeout=5)
        assert [c.id for c in clients if elector_of(c).is_leader] == [leader.id]
        assert query(sqlite_url, "SELECT leader_id FROM river_leader") == [(leader.id,)]
        followers = [c for c in clients if c is not leader]
        started = time.monotonic()
        await leader.stop()
        successor = await wait_any_leader(followers, 2.0)
        assert time.monotonic() - started < 1.0
        assert elector.stats.resignations == 1
        assert query(sqlite_url, "SELECT leader_id FROM river_leader") == [(successor.id,)]
        assert watch.max_concurrent == 1
        assert successor.runtime.maintainer is not None
        services = successor.runtime.maintainer.services
        assert set(services) >= {
            "scheduler",
            "rescuer",
            "cleaner",
            "queue_cleaner",
            "notification_cleaner",
        }
    finally:
        for client in clients:
            await client.stop()
            await client.close()


async def test_notification_cleaner_retention_and_batches(sqlite_url: str) -> None:
    query(
        sqlite_url,
        """INSERT INTO river_notification (topic, payload, created_at)
           SELECT 'river_insert', '{}', datetime('now', '-6 minutes') FROM river_job
           UNION ALL SELECT 'river_insert', '{}', datetime('now', '-4 minutes')""",
    )
    query(
        sqlite_url,
        """WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 25)
           INSERT INTO river_notification (topic, payload, created_at)
           SELECT 'river_control', '{}', datetime('now', '-6 minutes') FROM n""",
    )
    driver = AsyncSqliteDriver(sqlite_url)
    try:
        ctx = MaintenanceContext(
            driver=driver,
            client_id="x",
            config=MaintenanceConfig(
                batch_size=10, batch_pause_min=0, batch_pause_max=0, start_jitter=0
            ),
            workers=Workers(),
            retry_policy=RetryPolicy(),
            job_timeout=None,
        )
        cleaner = NotificationCleaner(ctx)
        assert (cleaner.interval, cleaner.retention) == (60.0, 300.0)
        stop = asyncio.Event()
        task = asyncio.create_task(cleaner.run(stop))
        await asyncio.wait_for(cleaner.wait_for(lambda s: s.successes >= 1), 5)
        stop.set()
        await task
    finally:
        await driver.close()
    assert cleaner.deleted == 25
    assert query(sqlite_url, "SELECT count(*) FROM river_notification") == [(1,)]
    assert not hasattr(PostgresDialect(), "notification_delete_before")  # SQLite only
