"""Leader election between real clients on one schema."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from riverboat import AsyncClient
from tests.leadership._helpers import (
    FAST_ELECTOR,
    LeaderWatch,
    elector_of,
    leader_row,
    make_client,
    sql,
    wait_any_leader,
)
from tests.waiting import wait_until_async

ROOT = Path(__file__).resolve().parents[2]


async def _start_all(
    pg_url: str, schema: str, ids: list[str], watch: LeaderWatch
) -> list[AsyncClient]:
    clients = []
    for client_id in ids:
        client = make_client(pg_url, schema, client_id)
        await client.start()
        watch.add(client)
        clients.append(client)
    for client in clients:
        assert client.runtime.notifier is not None
        await asyncio.wait_for(client.runtime.notifier.connected.wait(), 5)
    return clients


async def _stop_all(clients: list[AsyncClient]) -> None:
    for client in clients:
        await client.stop()
        await client.close()


async def test_three_clients_one_leader_and_fast_handover_on_stop(
    pg_url: str, pg_schema: str
) -> None:
    watch = LeaderWatch()
    clients = await _start_all(pg_url, pg_schema, ["c1", "c2", "c3"], watch)
    try:
        leader = await wait_any_leader(clients, 5)
        elector = elector_of(leader)
        # Let the leader renew its term a few times while the others keep trying.
        await wait_until_async(lambda: elector.stats.reelections >= 3, timeout=5)
        assert [c.id for c in clients if elector_of(c).is_leader] == [leader.id]
        row = leader_row(pg_url, pg_schema)
        assert row is not None and row[0] == leader.id
        for other in clients:
            if other is not leader:
                assert elector_of(other).stats.elect_attempts >= 1
                assert elector_of(other).stats.elections_won == 0

        # Stop the leader: it resigns with a notification and a follower takes over
        # at once, not after the 0.3 s poll (let alone the 2 s TTL).
        followers = [c for c in clients if c is not leader]
        started = time.monotonic()
        await leader.stop()
        successor = await wait_any_leader(followers, 1.0)
        handover = time.monotonic() - started
        assert handover < 1.0
        assert elector_of(leader).stats.resignations == 1
        row = leader_row(pg_url, pg_schema)
        assert row is not None and row[0] == successor.id
        assert watch.max_concurrent == 1
        await leader.close()
        clients.remove(leader)
    finally:
        await _stop_all(clients)
    assert watch.max_concurrent == 1
    assert leader_row(pg_url, pg_schema) is None  # the last one resigned too


async def test_killed_leader_hands_over_after_its_ttl(pg_url: str, pg_schema: str) -> None:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'src'}")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.leadership._leader_proc",
        pg_url,
        pg_schema,
        "doomed",
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    clients: list[AsyncClient] = []
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        assert line.strip() == b"LEADER"
        watch = LeaderWatch()
        clients = await _start_all(pg_url, pg_schema, ["f1", "f2"], watch)
        await wait_until_async(
            lambda: all(elector_of(c).stats.elect_attempts >= 2 for c in clients), timeout=5
        )
        assert watch.gains == []  # the process leads; nobody else does

        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        killed_at = time.monotonic()
        row = leader_row(pg_url, pg_schema)
        assert row is not None and row[0] == "doomed"  # no resignation happened
        successor = await wait_any_leader(clients, FAST_ELECTOR.ttl + 3)
        waited = time.monotonic() - killed_at
        new_row = leader_row(pg_url, pg_schema)
        assert new_row is not None and new_row[0] == successor.id
        # Nobody took over before the dead leader's term expired in the database.
        assert new_row[1] >= row[2]
        assert waited <= FAST_ELECTOR.ttl + FAST_ELECTOR.elect_interval + 1.5
        assert watch.max_concurrent == 1
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await _stop_all(clients)


async def test_one_statement_per_acquisition_reelection_and_resignation(
    pg_url: str, pg_schema: str
) -> None:
    client = make_client(pg_url, pg_schema, "solo")
    await client.start()
    elector = elector_of(client)
    by_query = client.driver.stats.by_query
    try:
        await asyncio.wait_for(elector.leader.wait(), 5)
        assert elector.stats.elections_won == 1
        acquisition = {k: v for k, v in by_query.items() if k.startswith("leader_")}
        assert acquisition == {"leader_attempt_elect": 1}
        await wait_until_async(lambda: elector.stats.reelections >= 3, timeout=5)
        reelections = elector.stats.reelections
        assert by_query.get("leader_attempt_reelect", 0) in (reelections, reelections + 1)
        assert elector.stats.by_operation["reelect"] == by_query["leader_attempt_reelect"]
    finally:
        await client.stop()
        await client.close()
    assert by_query["leader_resign"] == 1
    assert elector.stats.resignations == 1
    assert by_query["leader_attempt_reelect"] == elector.stats.reelections
    assert by_query["leader_attempt_elect"] == elector.stats.elect_attempts == 1


async def test_request_resign_makes_the_leader_resign_and_rerun(
    pg_url: str, pg_schema: str
) -> None:
    watch = LeaderWatch()
    clients = await _start_all(pg_url, pg_schema, ["r1", "r2"], watch)
    try:
        leader = await wait_any_leader(clients, 5)
        sql(
            pg_url,
            pg_schema,
            "SELECT pg_notify(%s, %s)",
            f"{pg_schema}.river_leadership",
            '{"action":"request_resign","leader_id":""}',
        )
        await wait_until_async(lambda: elector_of(leader).stats.resignations == 1, timeout=5)
        await wait_any_leader(clients, 2)  # someone (maybe the same one) leads again
        assert watch.max_concurrent == 1
    finally:
        await _stop_all(clients)


async def test_unreachable_leader_steps_down_before_its_term_expires(
    pg_url: str, pg_schema: str
) -> None:
    watch = LeaderWatch()
    clients = await _start_all(pg_url, pg_schema, ["cut", "other"], watch)
    try:
        leader = await wait_any_leader(clients, 5)
        other = next(c for c in clients if c is not leader)
        await wait_until_async(lambda: elector_of(leader).stats.reelections >= 1, timeout=5)
        # Cut the leader off from the database: its leadership statements never return.
        real_fetch = leader.driver.fetch
        cut = asyncio.Event()

        async def partitioned(stmt: Any) -> Any:
            if stmt.query.name.startswith("leader_"):
                await cut.wait()
            return await real_fetch(stmt)

        leader.driver.fetch = partitioned  # type: ignore[method-assign]
        await wait_until_async(lambda: not elector_of(leader).is_leader, timeout=FAST_ELECTOR.ttl)
        # The last renewal's start plus the TTL: when the term expires in the database at
        # the latest (the elector trusts it until safety_margin before that). Read after
        # the step-down: a renewal in flight at the cut may still have moved it.
        expires = elector_of(leader)._trusted_until + FAST_ELECTOR.safety_margin
        await wait_any_leader([other], FAST_ELECTOR.ttl + 2)
        took_over = time.monotonic()
        # When the transition callback ran, not when a poll noticed it (a poll's interval
        # and a loaded machine's event loop delays made the earlier bound, read from the
        # poll, fail by 20 ms): before the term expired, by up to the safety margin.
        leader_id = elector_of(leader).client_id
        (stepped_down,) = [at for client_id, at in watch.losses if client_id == leader_id]
        assert stepped_down < expires
        assert stepped_down < took_over
        assert elector_of(leader).stats.step_downs == 1
        assert watch.max_concurrent == 1
        cut.set()
        leader.driver.fetch = real_fetch  # type: ignore[method-assign]
    finally:
        await _stop_all(clients)
