"""Periodic jobs added, changed and removed at runtime on a client that is not the
leader are run, rescheduled and stopped by the leader, from riverboat_periodic_job;
two clients in this process, on Postgres and SQLite."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import riverboat
from riverboat import (
    AsyncClient,
    InsertManyParams,
    InsertOpts,
    PeriodicJob,
    QueueConfig,
    UniqueOpts,
)
from riverboat.dialect._sqlite_common import parse_timestamp
from tests.leadership._helpers import default_workers, elector_of, fast_maintenance, wait_any_leader
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.waiting import wait_until_async


def _client(db: Db, client_id: str) -> AsyncClient:
    return riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        id=client_id,
        queues={"default": QueueConfig(max_workers=2)},
        workers=default_workers(),
        maintenance=fast_maintenance(),
    )


def _runs(db: Db) -> list[tuple[datetime, dict[str, Any]]]:
    args = "args" if db.dialect == "postgres" else "json(args)"
    rows = db.execute(f"SELECT scheduled_at, {args} FROM river_job WHERE kind = 'noop' ORDER BY id")
    out = []
    for at, args in rows:
        when = at if isinstance(at, datetime) else parse_timestamp(at)
        assert when is not None
        out.append((when, args if isinstance(args, dict) else json.loads(args)))
    return out


def _make(version: int) -> Any:
    return lambda: InsertManyParams({"version": version}, kind="noop")


@pytest.mark.asyncio
async def test_runtime_changes_on_a_follower_reach_the_leader(any_db: Db) -> None:  # noqa: F811
    clients = [_client(any_db, "fleet_one"), _client(any_db, "fleet_two")]
    for client in clients:
        await client.start()
    try:
        leader = await wait_any_leader(clients, 10)
        follower = next(c for c in clients if c is not leader)
        assert not elector_of(follower).is_leader
        assert leader.runtime.maintainer is not None
        service = leader.runtime.maintainer.services["periodic"]

        # Added on the follower: the leader inserts it every second from its template.
        follower.periodic_jobs.add(PeriodicJob("* * * * * *", _make(1), id="from_follower"))
        await wait_until_async(lambda: len(_runs(any_db)) >= 2, timeout=10, what="two runs")

        # Changed on the follower (removed, added again): every other second, new args.
        follower.periodic_jobs.remove_by_id("from_follower")
        follower.periodic_jobs.add(PeriodicJob("*/2 * * * * *", _make(2), id="from_follower"))
        await wait_until_async(
            lambda: [a for _, a in _runs(any_db)].count({"version": 2}) >= 2,
            timeout=10,
            what="two runs of the new schedule",
        )

        # Removed on the follower: once the leader has read that, it inserts no more.
        follower.periodic_jobs.remove_by_id("from_follower")

        async def removal_stored() -> bool:
            records = await follower.periodic_job_list()
            return bool(records) and records[0].removed_at is not None

        await wait_until_async(removal_stored, timeout=10, what="the removal stored")
        runs_seen = service.stats.successes
        await service.wait_for(lambda stats: stats.successes >= runs_seen + 2)
        settled = len(_runs(any_db))
        runs_seen = service.stats.successes
        await service.wait_for(lambda stats: stats.successes >= runs_seen + 2)
        assert len(_runs(any_db)) == settled
    finally:
        for client in clients:
            await client.stop()
            await client.close()

    runs = _runs(any_db)
    new = [at for at, args in runs if args == {"version": 2}]
    assert new and all(at.second % 2 == 0 for at in new)
    assert all(at.tzinfo is not None and at <= datetime.now(UTC) for at, _ in runs)
    ticks = [at for at, _ in runs]
    assert len(ticks) == len(set(ticks))  # no tick twice


@pytest.mark.asyncio
async def test_a_job_added_on_the_leader_outlives_it(any_db: Db) -> None:  # noqa: F811
    # Added at runtime on the leader, which then stops: the other client, whose code
    # lacks the job, takes over and runs it from its template, every tick once.
    clients = [_client(any_db, "outlive_one"), _client(any_db, "outlive_two")]
    for client in clients:
        await client.start()
    try:
        leader = await wait_any_leader(clients, 10)
        leader.periodic_jobs.add(PeriodicJob("* * * * * *", _make(7), id="from_leader"))
        await wait_until_async(lambda: len(_runs(any_db)) >= 2, timeout=10, what="two runs")
        await leader.stop()
        await leader.close()
        clients.remove(leader)
        successor = await wait_any_leader(clients, 10)
        assert not any(
            job.id == "from_leader" for job in successor.periodic_jobs.snapshot().values()
        )
        before = len(_runs(any_db))
        await wait_until_async(
            lambda: len(_runs(any_db)) >= before + 3, timeout=10, what="runs by the successor"
        )
    finally:
        for client in clients:
            await client.stop()
            await client.close()
    ticks = sorted(at for at, _ in _runs(any_db))
    assert all(args == {"version": 7} for _, args in _runs(any_db))
    assert len(ticks) == len(set(ticks)), "a tick was inserted twice"
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(ticks)), ticks


@pytest.mark.asyncio
async def test_a_template_keeps_the_unique_options_of_its_runs(any_db: Db) -> None:  # noqa: F811
    """A job added at runtime whose constructor makes its runs unique (here by args and
    queue, so one run at a time whatever the tick) keeps that on a leader that lacks its
    code: its template carries the options and the args as encoded, and the leader's
    runs have the key the adding client's own insert has. (Before, the template dropped
    them: the leader made its runs unique per tick only, one more every second; and on
    Postgres the args' 1e21, read back from jsonb as an integer past int64, had every
    run refused.)"""
    args = {"report": "daily", "big": 1e21, "nested": {"b": 1, "a": [1.5, "x"]}}
    opts = InsertOpts(unique_opts=UniqueOpts(by_args=True, by_queue=True))
    clients = [_client(any_db, "unique_one"), _client(any_db, "unique_two")]
    for client in clients:
        await client.start()
    try:
        leader = await wait_any_leader(clients, 10)
        follower = next(c for c in clients if c is not leader)
        assert leader.runtime.maintainer is not None
        service = leader.runtime.maintainer.services["periodic"]
        follower.periodic_jobs.add(
            PeriodicJob(
                "* * * * * *", lambda: InsertManyParams(args, opts, kind="noop"), id="unique_run"
            )
        )
        await wait_until_async(lambda: len(_runs(any_db)) >= 1, timeout=10, what="a first run")
        # Three more runs of the enqueuer, at least two ticks: each finds the first run.
        runs_seen = service.stats.successes
        await service.wait_for(lambda stats: stats.successes >= runs_seen + 3)
        runs = _runs(any_db)
        assert len(runs) == 1, runs
        again = await follower.insert(args, opts, kind="noop")
        assert again.unique_skipped_as_duplicate, "the leader's run has another unique key"
        records = await follower.periodic_job_list()
        template = records[0].template
        assert template is not None and template["unique_opts"]["by_args"] is True
    finally:
        for client in clients:
            await client.stop()
            await client.close()


class _Hourly:
    def next(self, after: datetime) -> datetime:
        return after.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("schedule", "make", "why"),
    [
        (60, lambda: None, "its constructor returned None"),
        (_Hourly(), _make(1), "a custom schedule"),
    ],
)
async def test_a_job_added_without_a_template_says_so(
    sqlite_url: str, caplog: pytest.LogCaptureFixture, schedule: Any, make: Any, why: str
) -> None:
    """A job added at runtime whose template can't be made was declared without one, and
    a leader without its code never ran it, without a word: now a WARNING says why."""
    client = riverboat.AsyncClient(
        sqlite_url,
        id="no_template",
        queues={"default": QueueConfig(max_workers=1)},
        workers=default_workers(),
        maintenance=fast_maintenance(),
    )
    await client.start()
    try:
        with caplog.at_level("WARNING", logger="riverboat"):
            client.periodic_jobs.add(PeriodicJob(schedule, make, id="templateless"))

            async def declared() -> bool:
                return any(r.id == "templateless" for r in await client.periodic_job_list())

            await wait_until_async(declared, timeout=10, what="the declaration")
        records = {r.id: r for r in await client.periodic_job_list()}
        assert records["templateless"].template is None
        said = [r.getMessage() for r in caplog.records if "templateless" in r.getMessage()]
        assert said and why in said[0] and "only clients with its code run it" in said[0], said
    finally:
        await client.stop()
        await client.close()
