"""Fleet operations through riverboat's registry of live workers: list the workers,
scale a queue's max_workers and stop/start a queue on every worker or one, from the
client API and the CLI. Two real clients in this process; Postgres and SQLite."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import riverboat
from riverboat import NotFoundError, QueueConfig, Workers
from riverboat.errors import InvalidInputError
from tests.runtime.dbs import Db, any_db  # noqa: F401  (the fixture)
from tests.waiting import wait_until_async

pytestmark = pytest.mark.asyncio

WORKERS = Workers()


@WORKERS.register("fleet_noop")
async def fleet_noop(job: Any) -> None:
    return None


def _client(db: Db, client_id: str) -> riverboat.AsyncClient:
    return riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        id=client_id,
        queues={"default": QueueConfig(max_workers=2), "other": QueueConfig(max_workers=1)},
        workers=WORKERS,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        heartbeat_interval=0.1,
        dead_after=2.0,
    )


def _cli(db: Db, *args: str) -> subprocess.CompletedProcess[str]:
    schema = ["--schema", db.schema] if db.schema else []
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "riverboat.cli",
            "workers",
            *args,
            "--database-url",
            db.url,
            *schema,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_list_scale_stop_and_start_across_the_fleet(any_db: Db) -> None:  # noqa: F811
    a, b = _client(any_db, "fleet_a"), _client(any_db, "fleet_b")
    admin = riverboat.AsyncClient(any_db.url, schema=any_db.schema)
    await a.start()
    await b.start()
    try:
        listed = await admin.workers_list()
        assert [w.id for w in listed if w.id.startswith("fleet_")] == ["fleet_a", "fleet_b"]
        worker = listed[0]
        assert worker.alive and worker.pid > 0 and worker.host
        assert [(q.name, q.max_workers) for q in worker.queues] == [("default", 2), ("other", 1)]

        # scale on every worker of the queue, applied at their next heartbeat
        assert await admin.workers_scale("default", 5) == ["fleet_a", "fleet_b"]
        for producer in (a.runtime.producers["default"], b.runtime.producers["default"]):
            await wait_until_async(_max_workers_is(producer, 5), timeout=10)
        assert a.runtime.producers["other"].max_workers == 1
        await wait_until_async(
            lambda: _reported(admin, "fleet_a", "default", 5), timeout=10, what="reported"
        )

        # stop on one worker: only the other claims
        assert await admin.workers_stop("default", worker_id="fleet_a") == ["fleet_a"]
        stopped = a.runtime.producers["default"]
        await wait_until_async(lambda: _true(stopped.operator_stopped), timeout=10)
        jobs = [(await admin.insert({}, kind="fleet_noop")).job.id for _ in range(6)]
        await wait_until_async(lambda: _all_completed(admin, jobs), timeout=20, what="done")
        for job_id in jobs:
            row = await admin.job_get(job_id)
            assert row.attempted_by == ["fleet_b"]

        # start again: fleet_a claims again (fleet_b stopped so that only it can)
        await admin.workers_stop("default", worker_id="fleet_b")
        await admin.workers_start("default", worker_id="fleet_a")
        await wait_until_async(lambda: _true(not stopped.operator_stopped), timeout=10)
        await wait_until_async(
            lambda: _true(b.runtime.producers["default"].operator_stopped), timeout=10
        )
        more = (await admin.insert({}, kind="fleet_noop")).job.id
        await wait_until_async(lambda: _all_completed(admin, [more]), timeout=20, what="done")
        assert (await admin.job_get(more)).attempted_by == ["fleet_a"]

        # the CLI sees the same fleet and sends the same requests
        listing = await asyncio.to_thread(_cli, any_db)
        assert listing.returncode == 0, listing.stderr
        assert "fleet_a" in listing.stdout and "default 0/5 stopped" in listing.stdout
        scaled = await asyncio.to_thread(_cli, any_db, "scale", "other", "3", "--worker", "fleet_b")
        assert scaled.returncode == 0, scaled.stderr
        assert "on 1 worker(s)" in scaled.stdout and "fleet_b" in scaled.stdout
        other = b.runtime.producers["other"]
        await wait_until_async(lambda: _true(other.max_workers == 3), timeout=10)

        with pytest.raises(NotFoundError, match="no live worker works queue 'nope'"):
            await admin.workers_stop("nope")
        with pytest.raises(InvalidInputError, match="max_workers"):
            await admin.workers_scale("default", 0)
    finally:
        await a.stop()
        await b.stop()
        await admin.close()
        await a.close()
        await b.close()
    # A clean stop removes the client from the registry.
    async with riverboat.AsyncClient(any_db.url, schema=any_db.schema) as reader:
        assert [w for w in await reader.workers_list() if w.id.startswith("fleet_")] == []


def _max_workers_is(producer: Any, n: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return bool(producer.max_workers == n)

    return check


async def _true(value: bool) -> bool:
    return value


async def _reported(admin: riverboat.AsyncClient, worker: str, queue: str, n: int) -> bool:
    for w in await admin.workers_list():
        if w.id == worker:
            return any(q.name == queue and q.max_workers == n for q in w.queues)
    return False


async def _all_completed(admin: riverboat.AsyncClient, ids: list[int]) -> bool:
    for job_id in ids:
        if (await admin.job_get(job_id)).state.value != "completed":
            return False
    return True
