"""NOTIFY channel names (riverboat/_channels.py): a schema as long as River allows (46
characters) made ``<schema>.riverboat_finalized`` longer than Postgres's 63-byte names,
every completion's notification was refused, and waiters only polled."""

from __future__ import annotations

import asyncio
import json
import logging

import psycopg
import pytest
from psycopg import sql

import riverboat
from riverboat import Job, QueueConfig, Workers
from riverboat._channels import CHANNEL_MAX, channel_name
from riverboat.dialect.base import SCHEMA_MAX
from riverboat.testing import create_migrated_postgres_schema, drop_postgres_schema
from riverboat.wait import FINALIZED_TOPIC, FinalizedSignals
from tests.waiting import wait_until_async


def _schema_of_length(pg_url: str, length: int) -> str:
    schema = create_migrated_postgres_schema(pg_url, "s" * (length - 12))  # + 12 hex
    assert len(schema) == length
    return schema


@pytest.mark.parametrize("length", [43, 44, SCHEMA_MAX])
def test_the_finalized_channel_fits_and_the_statement_names_it(pg_url: str, length: int) -> None:
    """The statement that notifies and the listener that waits name the same channel:
    the topic's own name up to 43 characters of schema (what earlier releases listen
    on), its short one past that."""
    from riverboat.drivers.psycopg import AsyncPsycopgDriver

    schema = _schema_of_length(pg_url, length)
    try:
        channel = channel_name(schema, FINALIZED_TOPIC)
        assert len(channel.encode()) <= CHANNEL_MAX
        assert channel.endswith(".riverboat_finalized") == (length <= 43)
        with psycopg.connect(pg_url, autocommit=True) as listening:
            listening.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

            async def finalize() -> int:
                driver = AsyncPsycopgDriver(pg_url, schema=schema)
                try:
                    signals = FinalizedSignals(driver)
                    signals.heard({"job_id": 7, "timeout": 60})
                    await signals.after_finalized([(7, None)])
                    return signals.notified
                finally:
                    await driver.close()

            assert asyncio.run(finalize()) == 1
            heard = list(listening.notifies(timeout=10, stop_after=1))
        assert [json.loads(note.payload)["job_ids"] for note in heard] == [[7]]
    finally:
        drop_postgres_schema(pg_url, schema)


@pytest.mark.parametrize("configured", [True, False], ids=["schema", "search_path"])
async def test_job_wait_in_the_longest_schema_is_told(
    pg_url: str, caplog: pytest.LogCaptureFixture, configured: bool
) -> None:
    """As a user runs it: a client in a schema of 46 characters works a job that a
    job_wait waits for; the runtime's notification goes out (it was refused at every
    completion, with a warning each) and the wait ends with the job completed. The
    schema given to the client, or only the connection's search path (the statement
    then names the channel from current_schema(), the listener from asking it)."""
    schema = _schema_of_length(pg_url, SCHEMA_MAX)
    workers = Workers()
    gate = asyncio.Event()

    @workers.register("long_schema")
    async def work(job: Job[dict[str, int]]) -> None:
        await gate.wait()  # until the wait below is heard: it then needs the notification

    url = pg_url
    if not configured:
        joiner = "&" if "?" in pg_url else "?"
        url = f"{pg_url}{joiner}options=-csearch_path%3D{schema}"
    client = riverboat.AsyncClient(
        url,
        schema=schema if configured else None,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
    )
    try:
        with caplog.at_level(logging.WARNING, logger="riverboat"):
            await client.start()
            job = (await client.insert({"n": 1}, kind="long_schema")).job
            waiting = asyncio.create_task(client.job_wait(job.id, timeout=30))
            runtime = client.runtime
            assert runtime is not None and runtime.finalized_signals is not None
            signals = runtime.finalized_signals
            await wait_until_async(
                lambda: signals.awaits(job_id=job.id), what="the wait's announcement heard"
            )
            gate.set()
            done = await waiting
            assert done.state == "completed"
            # The in-process waiter is woken first (riverboat.wait's LOCAL); the
            # notification for waiters elsewhere goes out right after.
            await wait_until_async(lambda: signals.notified >= 1, what="the notification")
            await client.stop()
        warned = [r.getMessage() for r in caplog.records if "notif" in r.getMessage()]
        assert not warned, warned
    finally:
        await client.close()
        drop_postgres_schema(pg_url, schema)
