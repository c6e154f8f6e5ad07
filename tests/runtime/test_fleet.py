"""Fleet operations through riverboat's registry of live workers: list the workers,
scale a queue's max_workers and stop/start a queue on every worker or one, from the
client API and the CLI. Two real clients in this process; Postgres and SQLite."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import riverboat
from riverboat import InvalidInputError, NotFoundError, QueueConfig, Workers
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
    return db.cli("workers", *args)


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
        # Stopped, and no claim of fleet_a's still under way (see the start below).
        await wait_until_async(
            lambda: _true(stopped.operator_stopped and not stopped._fetching), timeout=10
        )
        jobs = [(await admin.insert({}, kind="fleet_noop")).job.id for _ in range(6)]
        await wait_until_async(lambda: _all_completed(admin, jobs), timeout=20, what="done")
        for job_id in jobs:
            row = await admin.job_get(job_id)
            assert row.attempted_by == ["fleet_b"]

        # start again: fleet_a claims again (fleet_b stopped so that only it can)
        await admin.workers_stop("default", worker_id="fleet_b")
        await admin.workers_start("default", worker_id="fleet_a")
        await wait_until_async(lambda: _true(not stopped.operator_stopped), timeout=10)
        # Stopped, and no claim of fleet_b's still under way: one that began before the
        # stop arrived (on SQLite, waiting for the write lock) would take the next job.
        b_default = b.runtime.producers["default"]
        await wait_until_async(
            lambda: _true(b_default.operator_stopped and not b_default._fetching), timeout=10
        )
        more = (await admin.insert({}, kind="fleet_noop")).job.id
        await wait_until_async(lambda: _all_completed(admin, [more]), timeout=20, what="done")
        assert (await admin.job_get(more)).attempted_by == ["fleet_a"]

        # the CLI sees the same fleet (once fleet_b's registry row says it stopped) and
        # sends the same requests
        await wait_until_async(
            lambda: _reported_stopped(admin, "fleet_b", "default"), timeout=10, what="stop"
        )
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


async def _reported_stopped(admin: riverboat.AsyncClient, worker: str, queue: str) -> bool:
    for w in await admin.workers_list():
        if w.id == worker:
            return any(q.name == queue and q.stopped for q in w.queues)
    return False


async def _all_completed(admin: riverboat.AsyncClient, ids: list[int]) -> bool:
    for job_id in ids:
        if (await admin.job_get(job_id)).state.value != "completed":
            return False
    return True


async def test_jobs_of_clients_outside_the_registry_keep_rivers_rescue_rule(
    any_db: Db,  # noqa: F811
) -> None:
    """A Go River client writes no heartbeat: its stuck job is rescued by River's rule
    (``rescue_stuck_jobs_after``) while riverboat clients are live in the registry."""
    from riverboat import MaintenanceConfig

    admin = riverboat.AsyncClient(any_db.url, schema=any_db.schema)
    job = (await admin.insert({}, kind="fleet_noop")).job
    if any_db.dialect == "postgres":
        any_db.execute(
            "UPDATE river_job SET state = 'running', attempt = 1, attempted_by = '{go-client}',"
            " attempted_at = now() - interval '1 hour' WHERE id = %s",
            job.id,
        )
    else:
        any_db.execute(
            "UPDATE river_job SET state = 'running', attempt = 1,"
            " attempted_by = jsonb('[\"go-client\"]'),"
            " attempted_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '-3600 seconds') WHERE id = %s",
            job.id,
        )
    worker = riverboat.AsyncClient(
        any_db.url,
        schema=any_db.schema,
        id="fleet_leader",
        queues={"default": QueueConfig(max_workers=2)},
        workers=WORKERS,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        heartbeat_interval=0.1,
        dead_after=2.0,
        job_timeout=1.0,
        maintenance=MaintenanceConfig(
            start_jitter=0.0, rescuer_interval=0.1, rescue_stuck_jobs_after=60.0
        ),
    )
    await worker.start()
    try:
        await wait_until_async(lambda: _all_completed(admin, [job.id]), timeout=30, what="done")
        row = await admin.job_get(job.id)
        assert row.attempted_by == ["go-client", "fleet_leader"]
        assert [e.error for e in row.errors] == ["Stuck job rescued by JobRescuer"]
    finally:
        await worker.stop()
        await worker.close()
        await admin.close()


async def test_without_riverboats_line_a_client_runs_as_rivers_do(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A database migrated by River alone (no ``riverboat`` line): one warning, no
    registry, jobs are worked."""
    import logging

    from riverboat.drivers.sqlite import SqliteDriver
    from riverboat.migrations import Migrator

    url = f"sqlite:///{tmp_path / 'river-only.sqlite3'}"
    with SqliteDriver(url) as driver:
        Migrator(driver).up()  # River's main line only
    caplog.set_level(logging.WARNING, "riverboat")
    worker = riverboat.AsyncClient(
        url,
        queues={"default": QueueConfig(max_workers=1)},
        workers=WORKERS,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    )
    job = (await worker.insert({}, kind="fleet_noop")).job
    await worker.start()
    try:
        await wait_until_async(lambda: _all_completed(worker, [job.id]), timeout=30)
        assert worker.runtime.registry is not None and not worker.runtime.registry.enabled
    finally:
        await worker.stop()
        await worker.close()
    warned = [r for r in caplog.records if "migration line is not applied" in r.getMessage()]
    assert len(warned) == 1


async def test_a_client_waits_while_another_process_holds_its_id(
    any_db: Db,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two processes under one client id: the second to start says so and claims
    nothing while the first holds the id (they used to share one registry row, each
    counted as the other); once the first stops, the second joins at its next heartbeat
    and works jobs. Here the first's row is made to name another process, as a twin's
    would."""
    first = _client(any_db, "twin")
    second = _client(any_db, "twin")
    await first.start()
    try:
        any_db.execute("UPDATE riverboat_client SET pid = 1 WHERE id = 'twin'")
        await second.start()
        registry = second.runtime.registry
        assert registry is not None and registry.lost and not registry.may_claim()
        assert second.runtime.producers["default"].fetches == 0
        # A client that waits and stops leaves the holder's row alone (it deleted it by
        # id: the holder then lost its place, its jobs' outcomes dropped).
        third = _client(any_db, "twin")
        await third.start()
        await third.stop()
        await third.close()
        assert any_db.execute("SELECT pid FROM riverboat_client WHERE id = 'twin'") == [(1,)]
        beats = registry.heartbeats
        await first.stop()
        await wait_until_async(lambda: not registry.lost, timeout=30, what="second joins")
        assert registry.heartbeats > beats
        job = (await second.insert({}, kind="fleet_noop")).job
        await wait_until_async(lambda: _all_completed(second, [job.id]), timeout=30)
    finally:
        await first.stop()
        await first.close()
        await second.stop()
        await second.close()
    assert "client id 'twin' is already in the registry" in caplog.text
    assert "pid 1, lease still valid" in caplog.text


async def test_a_client_that_lost_its_lease_and_stops_leaves_no_row(
    any_db: Db,  # noqa: F811
) -> None:
    """A client whose lease ran out keeps its row when it stops (the row's jobs are to
    be rescued first), but rescues it and removes it itself then: without riverboat's
    leader (beside a Go River leader, or with leader_election off) nothing else did,
    and the dead row stayed in the registry for good."""
    client = riverboat.AsyncClient(
        any_db.url,
        schema=any_db.schema,
        id="solo",
        queues={"default": QueueConfig(max_workers=1)},
        workers=WORKERS,
        leader_election=False,
        heartbeat_interval=0.5,
        dead_after=60.0,
    )
    await client.start()
    try:
        registry = client.runtime.registry
        assert registry is not None
        # Run out (SQLite renews a lease that ran out unless a rescue condemned it).
        past = (
            "'1970-01-01 00:00:00.000'"
            if any_db.dialect == "sqlite"
            else "now() - interval '1 minute'"
        )
        any_db.execute(f"UPDATE riverboat_client SET expires_at = {past} WHERE id = 'solo'")
        await wait_until_async(lambda: registry.lost, timeout=30, what="the lease lost")
    finally:
        await client.stop()
        await client.close()
    assert any_db.execute("SELECT id FROM riverboat_client WHERE id = 'solo'") == []
