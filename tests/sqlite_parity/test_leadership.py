"""Leader election and the leader's maintenance services on one SQLite file: the
statements on their own, then real clients (one leader among three, a handover through
the outbox resignation, scheduler, rescuer, cleaners, periodic jobs)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from riverboat import AsyncClient, InsertOpts, PeriodicJob
from riverboat.dialect.postgres import PostgresDialect
from riverboat.drivers.sqlite import AsyncSqliteDriver
from riverboat.runtime.elector import ElectorConfig
from riverboat.runtime.maintenance import MaintenanceConfig, MaintenanceContext, Service
from riverboat.runtime.maintenance.notification_cleaner import NotificationCleaner
from riverboat.runtime.maintenance.rescuer import RESCUE_ERROR
from riverboat.runtime.retry import RetryPolicy
from riverboat.runtime.worker import Workers
from tests.leadership._helpers import (
    LeaderWatch,
    TickArgs,
    default_workers,
    elector_of,
    fast_maintenance,
    make_client,
    wait_any_leader,
)
from tests.sqlite_parity.helpers import outbox, query
from tests.waiting import wait_until_async


def client_on(url: str, client_id: str, **kwargs: Any) -> AsyncClient:
    """The leadership tests' client, on a SQLite file (no schema)."""
    return make_client(url, None, client_id, **kwargs)  # type: ignore[arg-type]


# -- statements -----------------------------------------------------------------------


async def test_elect_reelect_resign(sqlite_url: str) -> None:
    driver = AsyncSqliteDriver(sqlite_url)
    d = driver.dialect
    try:
        term = d.decode_leader(
            (await driver.fetch(d.leader_attempt_elect(leader_id="a", ttl=15)))[0]
        )
        assert term.leader_id == "a"
        assert (term.expires_at - term.elected_at).total_seconds() == 15
        assert await driver.fetch(d.leader_attempt_elect(leader_id="b", ttl=15)) == []
        assert await driver.fetch(d.leader_attempt_elect(leader_id="a", ttl=15)) == []
        renewed = await driver.fetch(
            d.leader_attempt_reelect(leader_id="a", elected_at=term.elected_at, ttl=15)
        )
        assert d.decode_leader(renewed[0]).expires_at >= term.expires_at
        for other in ("b",):
            assert (
                await driver.fetch(
                    d.leader_attempt_reelect(leader_id=other, elected_at=term.elected_at, ttl=15)
                )
                == []
            )
            assert (
                await driver.fetch(d.leader_resign(leader_id=other, elected_at=term.elected_at))
                == []
            )
        wrong_term = term.elected_at + timedelta(milliseconds=1)
        assert await driver.fetch(d.leader_resign(leader_id="a", elected_at=wrong_term)) == []
        assert outbox(sqlite_url, "river_leadership") == []
        assert await driver.fetch(d.leader_resign(leader_id="a", elected_at=term.elected_at)) == [
            ("a",)
        ]
        assert await driver.fetch(d.leader_get_elected()) == []
        assert outbox(sqlite_url, "river_leadership") == [{"leader_id": "a", "action": "resigned"}]
    finally:
        await driver.close()


async def test_expired_term_is_replaced_in_one_statement_and_go_spelled_terms_match(
    sqlite_url: str,
) -> None:
    driver = AsyncSqliteDriver(sqlite_url)
    d = driver.dialect
    try:
        old = d.decode_leader(
            (await driver.fetch(d.leader_attempt_elect(leader_id="a", ttl=-1)))[0]
        )
        assert (
            await driver.fetch(
                d.leader_attempt_reelect(leader_id="a", elected_at=old.elected_at, ttl=15)
            )
            == []
        )
        before = driver.stats.statements
        rows = await driver.fetch(d.leader_attempt_elect(leader_id="b", ttl=15))
        assert driver.stats.statements - before == 1 and rows[0][0] == "b"
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
    finally:
        await driver.close()


async def test_job_schedule_promotes_discards_conflicts_and_notifies(sqlite_url: str) -> None:
    # 213 = every default unique state but retryable.
    query(
        sqlite_url,
        """INSERT INTO river_job (kind, queue, state, scheduled_at, unique_key, unique_states)
           VALUES ('kk', 'q1', 'scheduled', datetime('now', 'subsec', '-1 seconds'), NULL, NULL),
                  ('kk', 'q2', 'retryable', datetime('now', 'subsec', '-1 seconds'), x'01', 213),
                  ('kk', 'q2', 'available', datetime('now', 'subsec'), x'01', 213),
                  ('kk', 'q3', 'scheduled', datetime('now', 'subsec', '+1 hours'), NULL, NULL),
                  ('kk', 'q4', 'scheduled', datetime('now', 'subsec', '+2 seconds'), NULL, NULL),
                  ('kk', 'q5', 'scheduled', datetime('now', 'subsec', '-1 seconds'), x'02', 1),
                  ('kk', 'q5', 'scheduled', datetime('now', 'subsec', '-2 seconds'), x'02', 1)""",
    )
    driver = AsyncSqliteDriver(sqlite_url)
    try:
        rows = await driver.fetch(driver.dialect.job_schedule(max=100))
    finally:
        await driver.close()
    # q4 is promoted early (look-ahead) but not announced; of q5's two rows the earlier
    # one wins and the other is discarded.
    assert [(q, bool(discard)) for _, q, discard in rows] == [
        ("q1", False),
        ("q2", True),
        ("q4", False),
        ("q5", True),
        ("q5", False),
    ]
    assert sorted(p["queue"] for p in outbox(sqlite_url, "river_insert")) == ["q1", "q5"]
    states = query(sqlite_url, "SELECT queue, state, json(metadata) FROM river_job ORDER BY id")
    assert [s[1] for s in states] == [
        "available", "discarded", "available", "scheduled", "available", "discarded", "available"
    ]  # fmt: skip
    assert json.loads(states[1][2]) == {"unique_key_conflict": "scheduler_discarded"}


async def test_cleaner_queue_cleaner_and_notification_delete(sqlite_url: str) -> None:
    query(
        sqlite_url,
        """INSERT INTO river_job (kind, queue, state, finalized_at) VALUES
             ('kk', 'a', 'completed', datetime('now', '-2 days')),
             ('kk', 'a', 'completed', datetime('now', '-1 hours')),
             ('kk', 'a', 'cancelled', datetime('now', '-30 days')),
             ('kk', 'kept', 'discarded', datetime('now', '-30 days')),
             ('kk', 'a', 'discarded', datetime('now', '-8 days'))""",
    )
    query(
        sqlite_url,
        """INSERT INTO river_queue (name, updated_at)
           VALUES ('old', datetime('now', '-25 hours')), ('fresh', datetime('now', 'subsec'))""",
    )
    driver = AsyncSqliteDriver(sqlite_url)
    d = driver.dialect
    try:
        stmt = d.job_delete_before(
            cancelled_retention=None,  # kept forever
            completed_retention=86400,
            discarded_retention=7 * 86400,
            max=100,
            queues_excluded=["kept"],
        )
        assert await driver.execute(stmt) == 2
        rows = await driver.fetch(d.queue_delete_expired(retention=86400, max=10))
        assert rows == [("old",)]
    finally:
        await driver.close()
    assert query(sqlite_url, "SELECT queue, state FROM river_job ORDER BY id") == [
        ("a", "completed"), ("a", "cancelled"), ("kept", "discarded")
    ]  # fmt: skip
    assert query(sqlite_url, "SELECT name FROM river_queue") == [("fresh",)]


# -- real clients ---------------------------------------------------------------------


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


def _service(client: AsyncClient, name: str) -> Service:
    maintainer = client.runtime.maintainer
    assert maintainer is not None
    found: Service = maintainer.services[name]
    return found


async def test_scheduler_promotes_a_scheduled_job_and_it_runs(sqlite_url: str) -> None:
    client = client_on(sqlite_url, "sched", maintenance=fast_maintenance(scheduler_interval=0.2))
    await client.start()
    try:
        job = (
            await client.insert(
                TickArgs(n=1),
                InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(seconds=0.5)),
            )
        ).job
        assert job.state.value == "scheduled"

        async def done() -> bool:
            return (await client.job_get(job.id)).state.value == "completed"

        await wait_until_async(done, timeout=5)
        assert _service(client, "scheduler").stats.successes >= 1
    finally:
        await client.stop()
        await client.close()


async def test_rescuer_and_cleaners_on_the_leader(sqlite_url: str) -> None:
    def running(
        kind: str, metadata: dict[str, Any], attempt: int = 1, max_attempts: int = 25
    ) -> int:
        rows = query(
            sqlite_url,
            """INSERT INTO river_job (kind, queue, state, attempt, max_attempts, attempted_at,
                                      metadata, scheduled_at)
               VALUES (?, 'elsewhere', 'running', ?, ?, datetime('now', '-2 hours'), jsonb(?),
                       datetime('now', '-2 hours'))
               RETURNING id""",
            kind, attempt, max_attempts, json.dumps(metadata),
        )  # fmt: skip
        return int(rows[0][0])

    ids = {
        "retry": running("noop", {"river:rescue_count": 2}),
        "cancel": running("noop", {"cancel_attempted_at": "2024-01-01T00:00:00Z"}),
        "unknown": running("nobody_works_this", {}),
        "exhausted": running("noop", {}, attempt=3, max_attempts=3),
    }
    query(
        sqlite_url,
        """INSERT INTO river_job (kind, state, finalized_at)
           VALUES ('kk', 'completed', datetime('now', '-2 days')),
                  ('kk', 'completed', datetime('now', 'subsec'))""",
    )
    query(
        sqlite_url,
        """INSERT INTO river_notification (topic, payload, created_at)
           VALUES ('river_insert', '{}', datetime('now', '-10 minutes')),
                  ('river_insert', '{}', datetime('now', 'subsec'))""",
    )
    client = client_on(
        sqlite_url,
        "rescuer",
        maintenance=fast_maintenance(rescuer_interval=0.2, rescue_stuck_jobs_after=3600),
    )
    await client.start()
    try:
        await asyncio.wait_for(elector_of(client).leader.wait(), 5)
        for name in ("rescuer", "cleaner", "notification_cleaner"):
            await asyncio.wait_for(_service(client, name).wait_for(lambda s: s.successes >= 1), 5)
    finally:
        await client.stop()
        await client.close()
    rows = {
        r[0]: r[1:]
        for r in query(
            sqlite_url, "SELECT id, state, attempt, json(metadata), json(errors) FROM river_job"
        )
    }
    state, attempt, metadata, errors = rows[ids["retry"]]
    assert (state, attempt) == ("retryable", 1)
    assert json.loads(metadata)["river:rescue_count"] == 3
    assert [e["error"] for e in json.loads(errors)] == [RESCUE_ERROR]
    assert rows[ids["cancel"]][0] == "cancelled"
    assert rows[ids["unknown"]][0] == "discarded"
    assert rows[ids["exhausted"]][0] == "discarded"
    # The cleaner kept the fresh completed job only; the outbox lost its old row.
    assert [r[0] for r in rows.values()].count("completed") == 1
    assert query(
        sqlite_url,
        "SELECT count(*) FROM river_notification WHERE created_at < datetime('now', '-5 minutes')",
    ) == [(0,)]


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


async def test_periodic_job_once_per_tick_across_two_clients(sqlite_url: str) -> None:
    periodic = [PeriodicJob(timedelta(seconds=0.5), lambda: TickArgs(n=1), id="half_second")]
    clients = []
    for client_id in ("p1", "p2"):
        client = client_on(sqlite_url, client_id, periodic_jobs=periodic, workers=default_workers())
        await client.start()
        clients.append(client)

    def ticks() -> list[Any]:
        return query(sqlite_url, "SELECT scheduled_at FROM river_job WHERE kind = 'periodic_tick'")

    try:
        await wait_any_leader(clients, 5)
        await wait_until_async(lambda: len(ticks()) >= 4, timeout=5)
    finally:
        for client in clients:
            await client.stop()
            await client.close()
    stamps = [row[0] for row in ticks()]
    assert len(stamps) == len(set(stamps)), "one job per tick"
