"""The river_notification outbox, SQLite's stand-in for LISTEN/NOTIFY (so SQLite only):
the listener's polling, and pause/resume/cancel reaching a worker in another process
(``riverboat worker``) through it. tests/drivers/test_listen runs the round trip on
every driver that can listen."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import riverboat
from riverboat import JobState
from riverboat.drivers.base import Notification
from riverboat.drivers.sqlite import AsyncSqliteDriver, SqliteDriver
from riverboat.migrations import Migrator
from tests.sqlite.helpers import query
from tests.waiting import wait_until


async def test_listener_starts_after_the_newest_row_and_reads_batches(sqlite_url: str) -> None:
    query(
        sqlite_url, "INSERT INTO river_notification (topic, payload) VALUES ('river_insert', '{}')"
    )
    driver = AsyncSqliteDriver(sqlite_url)
    listener = await driver.listener()
    try:
        await listener.listen(".river_insert")  # the notifier's channel with no schema
        await listener.listen(".river_control")
        assert await listener.poll() == []  # the older row is not replayed
        query(
            sqlite_url,
            """INSERT INTO river_notification (topic, payload)
               SELECT CASE WHEN value % 2 THEN 'river_insert' ELSE 'other_topic' END,
                      '{"n": ' || value || '}'
               FROM json_each((WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL
                                       SELECT i + 1 FROM n WHERE i < 250)
                               SELECT json_group_array(i) FROM n))""",
        )
        notes: list[Notification] = []
        gen = listener.notifications()
        while len(notes) < 125:
            notes.append(await anext(gen))
        await gen.aclose()
        assert [n.payload for n in notes] == [f'{{"n": {i}}}' for i in range(1, 251, 2)]
        assert {n.channel for n in notes} == {".river_insert"}
        assert listener.stats.by_query["notification_get_after"] <= 4  # batches, not rows
        assert driver.stats.statements == 0  # polls don't count as the driver's work
        await listener.unlisten(".river_insert")
        query(
            sqlite_url,
            "INSERT INTO river_notification (topic, payload) VALUES ('river_insert', '{}')",
        )
        assert await listener.poll() == []
    finally:
        await listener.close()
        await driver.close()


async def test_attached_schema_channels(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'main.sqlite3'}"
    with SqliteDriver(url, schema="jobs") as sync:
        Migrator(sync).up()
    driver = AsyncSqliteDriver(url, schema="jobs")
    listener = await driver.listener()
    try:
        await listener.listen("jobs.river_control")
        client = riverboat.AsyncClient(driver)
        await driver.fetch(driver.dialect.queue_create_or_set_updated_at("q"))
        await client.queue_pause("q")
        assert await listener.poll() == [
            Notification("jobs.river_control", '{"action":"pause","queue":"q"}')
        ]
    finally:
        await listener.close()
        await driver.close()


WORKER_MODULE = """
import asyncio, os
import riverboat
from riverboat import QueueConfig
from riverboat import Workers

workers = Workers()

@workers.register("quick")
async def quick(job):
    return None

@workers.register("hang")
async def hang(job):
    await asyncio.Event().wait()  # only a cancellation ends it

def client():
    # A long poll interval: only notifications make this producer fetch promptly.
    return riverboat.AsyncClient(
        os.environ["RB_TEST_URL"],
        queues={"default": QueueConfig(max_workers=5)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=30.0,
    )
"""


@pytest.fixture
def worker(tmp_path: Path, sqlite_url: str) -> Iterator[subprocess.Popen[bytes]]:
    (tmp_path / "rb_parity_worker.py").write_text(textwrap.dedent(WORKER_MODULE))
    env = {**os.environ, "RB_TEST_URL": sqlite_url, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "riverboat.cli", "worker", "rb_parity_worker:client"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a stuck worker
            proc.kill()
            proc.communicate()


def _state(sqlite_url: str, job_id: int) -> str:
    rows: list[Any] = query(sqlite_url, "SELECT state FROM river_job WHERE id = ?", job_id)
    return str(rows[0][0])


def test_pause_resume_and_cancel_reach_a_worker_in_another_process(
    sqlite_url: str, worker: subprocess.Popen[bytes]
) -> None:
    # No rate limit on this client's insert notifications (River's is per fetch cooldown).
    client = riverboat.Client(SqliteDriver(sqlite_url), fetch_cooldown=0.001)

    def insert(kind: str) -> int:
        job_id: int = client.insert({}, kind=kind).job.id
        return job_id

    def reaches(job_id: int, state: str, timeout: float) -> None:
        wait_until(lambda: _state(sqlite_url, job_id) == state, timeout=timeout, what=state)

    with client:
        # The worker is up once its producer registered the queue and a job inserted
        # after that ran.
        wait_until(
            lambda: query(sqlite_url, "SELECT 1 FROM river_queue WHERE name = 'default'"),
            timeout=20,
            what="the worker's queue row",
        )
        reaches(insert("quick"), "completed", 20)
        # With a 30 s poll interval, a job done within 5 s was fetched on its insert's
        # outbox row.
        reaches(insert("quick"), "completed", 5)

        hanging = insert("hang")
        reaches(hanging, "running", 5)
        client.queue_pause("default")
        held = insert("quick")  # its insert notification wakes a paused producer
        out = client.job_cancel(hanging)
        assert out.state == JobState.RUNNING  # the owning producer finishes the cancellation
        reaches(hanging, "cancelled", 5)
        # The worker reads the outbox in order: the cancellation it acted on came after
        # the pause and the insert, so it had handled both and left the job alone.
        assert _state(sqlite_url, held) == "available"
        client.queue_resume("default")
        reaches(held, "completed", 5)
    assert worker.poll() is None
