"""A heartbeat lists every job whose outcome this client has not written yet (Postgres).

The leader's rescuer leaves a live client's running job alone while that client's last
heartbeat lists it; a job that a heartbeat written after the claim did not list is taken
for one whose claim reply was lost, and rescued by River's rule once past the horizon.
The heartbeat listed running jobs and the completer's buffer only, not the outcomes of a
write under way (taken out of the buffer: a write that fails across a heartbeat, as when
connections are cut, is retried from there) nor those held for another session's row
lock: such a job could be rescued and run again though it had run here."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import psycopg
import pytest

import riverboat
from riverboat import Job, QueueConfig, Workers
from tests.runtime.helpers import make_client
from tests.waiting import wait_until_async


@pytest.mark.parametrize("lock", ["table", "row"])
async def test_a_heartbeat_lists_an_outcome_being_written_or_held_by_a_lock(
    pg_url: str, pg_schema: str, lock: Literal["table", "row"]
) -> None:
    started, finish = asyncio.Event(), asyncio.Event()
    workers = Workers()

    @workers.register("held")
    async def held(job: Job[Any]) -> None:
        started.set()
        await finish.wait()

    client = make_client(
        pg_url,
        workers,
        schema=pg_schema,
        queues={"default": QueueConfig(max_workers=1)},
        # Only the heartbeat the test sends counts.
        heartbeat_interval=60,
        dead_after=120,
    )
    job_id = (await client.insert({}, kind="held")).job.id
    other = await psycopg.AsyncConnection.connect(pg_url)
    try:
        await other.execute(f'SET search_path TO "{pg_schema}"')
        await client.start()
        try:
            registry = client.runtime.registry
            completer = client.runtime.completer
            assert registry is not None and registry.enabled and completer is not None
            async with asyncio.timeout(10):
                await started.wait()
            if lock == "table":
                # The completion's UPDATE waits for the lock: a write under way.
                await other.execute("LOCK TABLE river_job IN EXCLUSIVE MODE")
            else:
                # The completion skips the locked row and holds the outcome for a retry.
                await other.execute("SELECT id FROM river_job WHERE id = %s FOR UPDATE", [job_id])
            finish.set()
            if lock == "table":
                await wait_until_async(
                    lambda: _completion_waits_for_a_lock(pg_url),
                    timeout=10,
                    what="the completion waiting for the table lock",
                )
            else:
                await wait_until_async(
                    lambda: completer.lock_skips > 0,
                    timeout=10,
                    what="the completion skipping the locked row",
                )
            await registry.beat()
            listed = await _listed(pg_url, pg_schema, client)
            await other.rollback()  # the lock goes; the outcome is written
            await wait_until_async(
                lambda: _state(client, job_id), timeout=10, what="the job completed"
            )
        finally:
            await other.rollback()
            await client.stop()
    finally:
        await other.close()
        await client.close()
    assert job_id in listed, "the heartbeat lists the job whose outcome is not written yet"


async def _completion_waits_for_a_lock(url: str) -> bool:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        # The completer's statement (job_complete_many), not a claim that waits too.
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE '%river_job%' AND query LIKE '%state = ''completed''%'"
        )
        row = await cur.fetchone()
    return row is not None and row[0] > 0


async def _listed(url: str, schema: str, client: riverboat.AsyncClient) -> list[int]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            f'SELECT job_ids FROM "{schema}".riverboat_client WHERE id = %s', [client.id]
        )
        row = await cur.fetchone()
    assert row is not None, "the client is registered"
    return [int(job_id) for job_id in row[0]]


async def _state(client: riverboat.AsyncClient, job_id: int) -> bool:
    return (await client.job_get(job_id)).state.value == "completed"
