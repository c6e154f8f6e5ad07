"""Periodic jobs: enqueued by the leader only, once per tick however many clients."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from riverboat import (
    NEVER,
    ConcurrencyLimit,
    InsertManyParams,
    InsertOpts,
    InvalidInputError,
    MissingDependencyError,
    PeriodicJob,
    QueueConfig,
    RetryPolicy,
)
from riverboat.drivers.psycopg import AsyncPsycopgDriver
from riverboat.runtime.maintenance import MaintenanceContext
from riverboat.runtime.maintenance.periodic import PeriodicJobEnqueuer
from tests.clocks import FAR_FROM_TICKS
from tests.leadership._helpers import (
    LeaderWatch,
    TickArgs,
    default_workers,
    elector_of,
    fast_maintenance,
    make_client,
    sql,
    wait_any_leader,
)
from tests.waiting import wait_until_async


def _ticks(pg_url: str, schema: str) -> list[tuple[Any, ...]]:
    return sql(
        pg_url,
        schema,
        "SELECT scheduled_at, metadata FROM river_job WHERE kind = 'periodic_tick' ORDER BY id",
    )


async def test_one_second_schedule_enqueues_once_per_tick_across_three_clients(
    pg_url: str, pg_schema: str
) -> None:
    # The same schedule spelled two ways: River's "@every 1s" reads as the interval, so
    # the clients declare one schedule (a difference would read as a change of it).
    spelled = {"p1": timedelta(seconds=1), "p2": "@every 1s", "p3": "@every 1000ms"}
    watch = LeaderWatch()
    clients = []
    for client_id in ("p1", "p2", "p3"):
        periodic = [PeriodicJob(spelled[client_id], lambda: TickArgs(n=1), id="every_second")]
        client = make_client(pg_url, pg_schema, client_id, periodic_jobs=periodic)
        await client.start()
        watch.add(client)
        clients.append(client)
    try:
        leader = await wait_any_leader(clients, 5)
        await wait_until_async(lambda: len(_ticks(pg_url, pg_schema)) >= 2, timeout=5)
        # Hand leadership over mid-schedule; the next leader carries on.
        await leader.stop()
        await leader.close()
        clients.remove(leader)
        await wait_any_leader(clients, 2)
        count = len(_ticks(pg_url, pg_schema))
        await wait_until_async(lambda: len(_ticks(pg_url, pg_schema)) >= count + 2, timeout=5)
    finally:
        for client in clients:
            await client.stop()
            await client.close()
    rows = _ticks(pg_url, pg_schema)
    per_tick = Counter(scheduled_at for scheduled_at, _ in rows)
    assert per_tick and max(per_tick.values()) == 1, per_tick
    for scheduled_at, metadata in rows:
        assert scheduled_at.microsecond == 0  # epoch-aligned whole seconds
        assert metadata == {"periodic": True, "river:periodic_job_id": "every_second"}
    assert watch.max_concurrent == 1


def _enqueuer(driver: AsyncPsycopgDriver, client_id: str, jobs: list[PeriodicJob]) -> Any:
    """An enqueuer whose clock stays at FAR_FROM_TICKS (tests/clocks.py)."""
    ctx = MaintenanceContext(
        driver=driver,
        client_id=client_id,
        config=fast_maintenance(),
        workers=default_workers(),
        retry_policy=RetryPolicy(),
        job_timeout=60.0,
    )
    ctx.clock.set(lambda: FAR_FROM_TICKS)
    return PeriodicJobEnqueuer(ctx, jobs)


async def test_two_leaders_on_the_same_tick_insert_it_once(
    apg_driver: AsyncPsycopgDriver, pg_url: str, pg_schema: str
) -> None:
    # What a leadership change mid-tick amounts to: two enqueuers firing the same tick.
    jobs = [
        PeriodicJob(60, lambda: TickArgs(n=2)),  # no id: unique over kind + args
        PeriodicJob("*/5 * * * *", lambda: (TickArgs(n=3), InsertOpts(priority=2)), id="cron"),
    ]
    first = _enqueuer(apg_driver, "old-leader", jobs)
    second = _enqueuer(apg_driver, "new-leader", jobs)
    tick = FAR_FROM_TICKS - timedelta(seconds=1)
    for enqueuer in (first, second):
        await enqueuer.on_start()
        await enqueuer.run_once()  # the stored times read: nothing due yet
        for entry in enqueuer._entries:
            entry.next_run_at = tick
    await asyncio.gather(first.run_once(), second.run_once())
    assert first.inserted + second.inserted == 2
    assert first.skipped_duplicates + second.skipped_duplicates == 2
    rows = sql(pg_url, pg_schema, "SELECT scheduled_at, priority, state::text FROM river_job")
    assert sorted(r[1] for r in rows) == [1, 2]
    assert {r[0] for r in rows} == {tick}
    assert {r[2] for r in rows} == {"available"}  # River keeps periodic runs available


class _Failing:
    """A custom schedule whose next() fails as ``how`` says until ``fixed``."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.fixed = False
        self.calls = 0

    def next(self, after: datetime) -> datetime:
        self.calls += 1
        if self.fixed:
            return after + timedelta(hours=1)
        if self.how == "raises":
            raise ConnectionError("the calendar service is down")
        if self.how == "exits":
            sys.exit(2)
        if self.how == "stuck":
            return after  # ">=" where next() must be ">": asked again at once, forever
        if self.how == "past":
            return datetime(2026, 1, 1, tzinfo=UTC)
        return datetime.now()  # naive: refused


@pytest.mark.parametrize("how", ["raises", "exits", "naive", "stuck", "past"])
async def test_a_failing_custom_schedule_stops_only_its_own_runs(
    apg_driver: AsyncPsycopgDriver, pg_url: str, pg_schema: str, how: str
) -> None:
    """A custom schedule's next() that raises (sys.exit too), returns a naive datetime
    or a time not after the one it was given has no runs until it is asked again
    (SCHEDULE_RETRY later); the other periodic jobs run on. It stopped every periodic
    job: each run of the service failed on it. One that did not advance was asked again
    at once, thousands of times a second."""
    import riverboat.runtime.maintenance.periodic as periodic

    failing = _Failing(how)
    jobs = [
        PeriodicJob(60, lambda: TickArgs(n=1), id="steady"),
        PeriodicJob(failing, lambda: TickArgs(n=2), id="custom"),
    ]
    enqueuer = _enqueuer(apg_driver, "leader", jobs)
    await enqueuer.on_start()
    await enqueuer.run_once()  # the stored times read
    steady, custom = enqueuer._entries
    assert custom.next_run_at is None and custom.schedule_retry_at is not None
    asked = failing.calls
    steady.next_run_at = FAR_FROM_TICKS - timedelta(seconds=1)
    await enqueuer.run_once()
    assert enqueuer.inserted == 1
    assert failing.calls == asked  # not asked again before its retry time
    # Mended, and its retry time come: asked again, and runs at its next tick.
    failing.fixed = True
    custom.schedule_retry_at = now = FAR_FROM_TICKS - timedelta(seconds=1)
    assert enqueuer.next_delay() == 0.0
    await enqueuer.run_once()
    assert enqueuer.inserted == 1 and custom.schedule_retry_at is None
    assert custom.next_run_at is not None and custom.next_run_at > now + timedelta(minutes=59)
    custom.next_run_at = now
    await enqueuer.run_once()
    assert enqueuer.inserted == 2
    rows = sql(pg_url, pg_schema, "SELECT args->>'n' FROM river_job ORDER BY id")
    assert [r[0] for r in rows] == ["1", "2"]
    assert periodic.SCHEDULE_RETRY >= timedelta(seconds=1)


async def test_a_constructor_that_hangs_skips_only_its_own_runs(
    apg_driver: AsyncPsycopgDriver, pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync constructor that doesn't return (a request with no timeout) has
    CONSTRUCTOR_TIMEOUT, then its run is skipped and the others' go on; it is not
    called again while its thread still runs. On the runtime's loop it held up the
    whole client; then the run's limit (30 s) failed every periodic job's run with it."""
    import riverboat.runtime.maintenance.periodic as periodic

    monkeypatch.setattr(periodic, "CONSTRUCTOR_TIMEOUT", 0.2)
    release = threading.Event()
    calls: list[int] = []

    def hangs() -> TickArgs:
        calls.append(1)
        release.wait(30)
        return TickArgs(n=2)

    jobs = [
        PeriodicJob(60, lambda: TickArgs(n=1), id="steady"),
        PeriodicJob(60, hangs, id="hangs"),
    ]
    enqueuer = _enqueuer(apg_driver, "leader", jobs)
    await enqueuer.on_start()
    await enqueuer.run_once()  # the stored times read
    steady, hung = enqueuer._entries
    due = FAR_FROM_TICKS - timedelta(seconds=1)
    steady.next_run_at = hung.next_run_at = due
    await enqueuer.run_once()  # hangs waits out its timeout; steady is inserted
    assert (enqueuer.inserted, calls) == (1, [1])
    # A later tick (the same one would be the same unique run).
    steady.next_run_at = hung.next_run_at = due + timedelta(milliseconds=500)
    await enqueuer.run_once()  # its thread still runs: not called again
    assert (enqueuer.inserted, calls) == (2, [1])
    release.set()
    await wait_until_async(lambda: not enqueuer._constructing, timeout=5, what="the thread")
    hung.next_run_at = due
    await enqueuer.run_once()
    assert (enqueuer.inserted, calls) == (3, [1, 1])
    rows = sql(pg_url, pg_schema, "SELECT args->>'n' FROM river_job ORDER BY id")
    assert [r[0] for r in rows] == ["1", "1", "2"]


async def _lead_until_the_first_run(client: Any) -> None:
    """Start ``client``, let it lead until its periodic service's first successful
    run, then stop and close it."""
    await client.start()
    try:
        await asyncio.wait_for(elector_of(client).leader.wait(), 5)
        assert client.runtime.maintainer is not None
        svc = client.runtime.maintainer.services["periodic"]
        await svc.wait_for(lambda s: s.successes >= 1)
    finally:
        await client.stop()
        await client.close()


async def test_run_on_start_and_skipping_constructor(pg_url: str, pg_schema: str) -> None:
    calls: list[int] = []

    def maybe() -> TickArgs | None:
        calls.append(1)
        return None  # skip every run

    # NEVER, not an hourly schedule: an hour beginning within DUE_MARGIN of the first run
    # added that hour's tick to the run on start (two "boot" rows, maybe() called twice).
    periodic = [
        PeriodicJob(NEVER, lambda: TickArgs(n=9), run_on_start=True, id="boot"),
        PeriodicJob(NEVER, maybe, run_on_start=True, id="never"),
    ]
    client = make_client(pg_url, pg_schema, "starter", periodic_jobs=periodic)
    await _lead_until_the_first_run(client)
    rows = _ticks(pg_url, pg_schema)
    assert [m for _, m in rows] == [{"periodic": True, "river:periodic_job_id": "boot"}]
    assert calls == [1]


async def test_a_constructor_calling_sys_exit_skips_its_run(pg_url: str, pg_schema: str) -> None:
    """sys.exit() in a constructor is its failure, logged, as any error: the other
    periodic job runs, and the client stops normally (re-raised, SystemExit ended the
    event loop the services run on)."""

    def exits() -> TickArgs:
        sys.exit(1)

    periodic = [  # NEVER: only the runs on start (see above)
        PeriodicJob(NEVER, exits, run_on_start=True, id="exits"),
        PeriodicJob(NEVER, lambda: TickArgs(n=9), run_on_start=True, id="boot"),
    ]
    client = make_client(pg_url, pg_schema, "exiter", periodic_jobs=periodic)
    await _lead_until_the_first_run(client)
    rows = _ticks(pg_url, pg_schema)
    assert [m for _, m in rows] == [{"periodic": True, "river:periodic_job_id": "boot"}]


async def test_a_run_without_its_queues_partition_key_is_refused(
    pg_url: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A queue whose limits are partitioned by an args key refuses a client's insert
    without it; a periodic run of the same args went in silently, into the partition of
    null shared by every such job. Now its run is skipped and said so, as for any
    refused run, and the other periodic jobs run."""
    queue = QueueConfig(
        max_workers=5, concurrency=ConcurrencyLimit(global_limit=1, by_args=["customer_id"])
    )
    periodic = [
        PeriodicJob(
            NEVER, lambda: InsertManyParams({"n": 1}, kind="billing"), run_on_start=True, id="bare"
        ),
        PeriodicJob(
            NEVER,
            lambda: InsertManyParams({"customer_id": 7}, kind="billing"),
            run_on_start=True,
            id="keyed",
        ),
    ]
    client = make_client(
        pg_url, pg_schema, "partitioned", queues={"default": queue}, periodic_jobs=periodic
    )
    await _lead_until_the_first_run(client)
    rows = sql(pg_url, pg_schema, "SELECT metadata FROM river_job WHERE kind = 'billing'")
    assert [m["river:periodic_job_id"] for (m,) in rows] == ["keyed"]
    assert "periodic job 'bare': its run at" in caplog.text and "customer_id" in caplog.text


def test_schedules_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    start = datetime(2024, 1, 1, 12, 0, 0, 400000, tzinfo=UTC)
    every = PeriodicJob(timedelta(minutes=15), lambda: None)
    assert every.next_after(start) == datetime(2024, 1, 1, 12, 15, tzinfo=UTC)
    cron = PeriodicJob("0 * * * *", lambda: None)
    assert cron.next_after(start) == datetime(2024, 1, 1, 13, 0, tzinfo=UTC)
    seconds = PeriodicJob("*/2 * * * * *", lambda: None)  # robfig: seconds first
    assert seconds.next_after(start) == datetime(2024, 1, 1, 12, 0, 2, tzinfo=UTC)
    with pytest.raises(InvalidInputError):
        PeriodicJob("not cron", lambda: None)
    with pytest.raises(InvalidInputError):
        PeriodicJob(timedelta(0), lambda: None)
    with pytest.raises(InvalidInputError):
        PeriodicJob(1, lambda: None, id="has space")
    monkeypatch.setitem(sys.modules, "croniter", None)
    with pytest.raises(MissingDependencyError) as err:
        PeriodicJob("0 * * * *", lambda: None)
    assert "riverboat[cron]" in str(err.value)
