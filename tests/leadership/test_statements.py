"""The leadership and maintenance statements on their own, against real Postgres,
including River's Go elector's own transaction on the same table."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg

from riverboat.drivers.psycopg import AsyncPsycopgDriver
from tests.leadership._helpers import leader_row, sql

# River's Go elector (riverpgxv5 LeaderDeleteExpired + LeaderAttemptElect), which runs
# both in one transaction.
GO_DELETE_EXPIRED = "DELETE FROM river_leader WHERE expires_at < now()"
GO_ATTEMPT_ELECT = """
INSERT INTO river_leader (leader_id, elected_at, expires_at)
VALUES (%s, now(), now() + make_interval(secs => %s))
ON CONFLICT (name) DO NOTHING
RETURNING *
"""


async def test_elect_reelect_resign(apg_driver: AsyncPsycopgDriver) -> None:
    d = apg_driver.dialect
    rows = await apg_driver.fetch(d.leader_attempt_elect(leader_id="a", ttl=15))
    term = d.decode_leader(rows[0])
    assert term.leader_id == "a"
    assert (term.expires_at - term.elected_at).total_seconds() == 15
    # Held: neither another client nor the holder itself gets it through elect.
    assert await apg_driver.fetch(d.leader_attempt_elect(leader_id="b", ttl=15)) == []
    assert await apg_driver.fetch(d.leader_attempt_elect(leader_id="a", ttl=15)) == []
    renewed = await apg_driver.fetch(
        d.leader_attempt_reelect(leader_id="a", elected_at=term.elected_at, ttl=15)
    )
    assert d.decode_leader(renewed[0]).expires_at >= term.expires_at
    # Another term (or another client) can't renew or resign it.
    assert (
        await apg_driver.fetch(
            d.leader_attempt_reelect(leader_id="b", elected_at=term.elected_at, ttl=15)
        )
        == []
    )
    assert await apg_driver.fetch(d.leader_resign(leader_id="b", elected_at=term.elected_at)) == []
    assert await apg_driver.fetch(d.leader_resign(leader_id="a", elected_at=term.elected_at)) == [
        ("a",)
    ]
    assert await apg_driver.fetch(d.leader_get_elected()) == []


async def test_elect_replaces_an_expired_term_in_one_statement(
    apg_driver: AsyncPsycopgDriver,
) -> None:
    d = apg_driver.dialect
    old = d.decode_leader(
        (await apg_driver.fetch(d.leader_attempt_elect(leader_id="a", ttl=-1)))[0]
    )
    # a's term has expired: it can't renew it, and b takes over with one statement.
    assert (
        await apg_driver.fetch(
            d.leader_attempt_reelect(leader_id="a", elected_at=old.elected_at, ttl=15)
        )
        == []
    )
    before = apg_driver.stats.statements
    rows = await apg_driver.fetch(d.leader_attempt_elect(leader_id="b", ttl=15))
    assert apg_driver.stats.statements - before == 1
    assert rows[0][0] == "b"


async def test_resign_notifies_river_leadership(
    apg_driver: AsyncPsycopgDriver, pg_url: str, pg_schema: str
) -> None:
    d = apg_driver.dialect
    term = d.decode_leader(
        (await apg_driver.fetch(d.leader_attempt_elect(leader_id="a", ttl=15)))[0]
    )
    listener = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        await listener.execute(f'LISTEN "{pg_schema}.river_leadership"')
        await apg_driver.fetch(d.leader_resign(leader_id="a", elected_at=term.elected_at))
        gen = listener.notifies()
        note = await asyncio.wait_for(anext(gen), 5)
        await gen.aclose()
    finally:
        await listener.close()
    assert json.loads(note.payload) == {"leader_id": "a", "action": "resigned"}


def _go_elect(pg_url: str, schema: str, leader_id: str) -> list[Any]:
    with psycopg.connect(pg_url) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        with conn.transaction():
            conn.execute(GO_DELETE_EXPIRED)
            return conn.execute(GO_ATTEMPT_ELECT, (leader_id, 15.0)).fetchall()


async def test_go_elector_and_riverboat_never_both_lead(
    apg_driver: AsyncPsycopgDriver, pg_url: str, pg_schema: str
) -> None:
    d = apg_driver.dialect
    # riverboat holds the row: Go's elector gets nothing.
    term = d.decode_leader(
        (await apg_driver.fetch(d.leader_attempt_elect(leader_id="py", ttl=15)))[0]
    )
    assert _go_elect(pg_url, pg_schema, "go") == []
    await apg_driver.fetch(d.leader_resign(leader_id="py", elected_at=term.elected_at))
    # Go holds it: riverboat gets nothing.
    assert len(_go_elect(pg_url, pg_schema, "go")) == 1
    assert await apg_driver.fetch(d.leader_attempt_elect(leader_id="py", ttl=15)) == []
    sql(pg_url, pg_schema, "UPDATE river_leader SET expires_at = now() - interval '1 second'")

    # Both race for an expired row: Go's transaction has replaced it but not committed;
    # riverboat's statement waits on the row and then finds Go's row in place.
    with psycopg.connect(pg_url) as conn:
        conn.execute(f'SET search_path TO "{pg_schema}"')
        conn.execute(GO_DELETE_EXPIRED)
        assert len(conn.execute(GO_ATTEMPT_ELECT, ("go2", 15.0)).fetchall()) == 1
        attempt = asyncio.create_task(
            apg_driver.fetch(d.leader_attempt_elect(leader_id="py", ttl=15))
        )
        done, _ = await asyncio.wait([attempt], timeout=0.3)
        assert not done, "riverboat's election should wait for Go's open transaction"
        conn.commit()
    assert await attempt == []
    row = leader_row(pg_url, pg_schema)
    assert row is not None and row[0] == "go2"


async def test_job_schedule_promotes_discards_conflicts_and_notifies(
    apg_driver: AsyncPsycopgDriver, pg_url: str, pg_schema: str
) -> None:
    # 213 = every default unique state but retryable, so a retryable row with the key
    # can sit beside an available one until the scheduler promotes it.
    sql(
        pg_url,
        pg_schema,
        """INSERT INTO river_job (args, kind, queue, state, scheduled_at, unique_key,
                                  unique_states, finalized_at)
           VALUES ('{}', 'k', 'q1', 'scheduled', now() - interval '1 s', NULL, NULL, NULL),
                  ('{}', 'k', 'q2', 'retryable', now() - interval '1s', '\\x01', B'11010101', NULL),
                  ('{}', 'k', 'q2', 'available', now(), '\\x01', B'11010101', NULL),
                  ('{}', 'k', 'q3', 'scheduled', now() + interval '1 hour', NULL, NULL, NULL)""",
    )
    listener = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        await listener.execute(f'LISTEN "{pg_schema}.river_insert"')
        rows = await apg_driver.fetch(apg_driver.dialect.job_schedule(max=100))
        gen = listener.notifies()
        note = await asyncio.wait_for(anext(gen), 5)
        await gen.aclose()
    finally:
        await listener.close()
    assert [(queue, discarded) for _, queue, discarded in rows] == [("q1", False), ("q2", True)]
    assert json.loads(note.payload) == {"queue": "q1"}
    states = sql(
        pg_url, pg_schema, "SELECT queue, state::text, metadata FROM river_job ORDER BY id"
    )
    assert states[0][:2] == ("q1", "available")
    assert states[1][:2] == ("q2", "discarded")
    assert states[1][2] == {"unique_key_conflict": "scheduler_discarded"}
    assert states[3][:2] == ("q3", "scheduled")


async def test_cleaner_never_deletes_a_job_being_retried(
    apg_driver: AsyncPsycopgDriver, pg_url: str, pg_schema: str
) -> None:
    (job_id,) = sql(
        pg_url,
        pg_schema,
        """INSERT INTO river_job (args, kind, state, finalized_at)
           VALUES ('{}', 'k', 'completed', now() - interval '2 days') RETURNING id""",
    )[0]
    d = apg_driver.dialect
    stmt = d.job_delete_before(
        cancelled_retention=86400, completed_retention=86400, discarded_retention=86400, max=100
    )
    # A JobRetry holds the row (moved back to available, not yet committed).
    with psycopg.connect(pg_url) as conn:
        conn.execute(f'SET search_path TO "{pg_schema}"')
        conn.execute(
            """UPDATE river_job SET state = 'available', finalized_at = NULL,
                   scheduled_at = now() WHERE id = %s""",
            (job_id,),
        )
        assert await apg_driver.execute(stmt) == 0  # skipped, not waited on, not deleted
        conn.commit()
    assert await apg_driver.execute(stmt) == 0  # now available: never the cleaner's
    assert sql(pg_url, pg_schema, "SELECT state::text FROM river_job WHERE id = %s", job_id) == [
        ("available",)
    ]


async def test_queue_delete_expired(
    apg_driver: AsyncPsycopgDriver, pg_url: str, pg_schema: str
) -> None:
    sql(
        pg_url,
        pg_schema,
        """INSERT INTO river_queue (name, updated_at)
           VALUES ('old', now() - interval '25 hours'), ('fresh', now())""",
    )
    rows = await apg_driver.fetch(apg_driver.dialect.queue_delete_expired(retention=86400, max=10))
    assert rows == [("old",)]
    assert sql(pg_url, pg_schema, "SELECT name FROM river_queue") == [("fresh",)]


def _plan_nodes(node: Any) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) tree."""
    found: list[dict[str, Any]] = []
    if isinstance(node, list):
        for item in node:
            found.extend(_plan_nodes(item))
    elif isinstance(node, dict):
        if "Node Type" in node:
            found.append(node)
        for value in node.values():
            if isinstance(value, (list, dict)):
                found.extend(_plan_nodes(value))
    return found


async def test_cleaner_generic_plan_reads_the_finalized_index(
    apg_driver: AsyncPsycopgDriver, pg_url: str, pg_schema: str
) -> None:
    # Many recent finalized rows, none past retention: the generic plan (what the drivers
    # run) must find that out from river_job_state_and_finalized_at_index, not by walking
    # the primary key over every row (175-260 ms a run with 1,000,000 such rows).
    sql(
        pg_url,
        pg_schema,
        """INSERT INTO river_job (args, kind, state, finalized_at)
           SELECT '{}', 'k', 'completed', now() FROM generate_series(1, 20000)""",
    )
    sql(pg_url, pg_schema, "ANALYZE river_job")
    stmt = apg_driver.dialect.job_delete_before(
        cancelled_retention=86400, completed_retention=86400, discarded_retention=86400, max=1000
    )
    query, names = stmt.query.compile("dollar")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{pg_schema}"')
        conn.execute("SET plan_cache_mode = force_generic_plan")
        cur = psycopg.RawCursor(conn)
        conn.execute("BEGIN")
        cur.execute("EXPLAIN (FORMAT JSON) " + query, [stmt.params[n] for n in names])
        plan = cur.fetchone()[0]  # type: ignore[index]
        conn.execute("ROLLBACK")
    scans = [
        (node["Node Type"], node.get("Index Name"))
        for node in _plan_nodes(plan)
        if node.get("Relation Name") == "river_job"
    ]
    assert ("Seq Scan", None) not in scans, scans
    # The three sub-selects (cancelled, completed, discarded) go by the finalized index;
    # the DELETE finds the chosen ids by primary key.
    finalized = [s for s in scans if s[1] == "river_job_state_and_finalized_at_index"]
    assert len(finalized) == 3, scans
    assert await apg_driver.execute(stmt) == 0
