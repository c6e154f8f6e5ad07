"""Durable periodic jobs, one enqueuer at a time on Postgres and SQLite: the stored
times a new leader carries on from, each catch-up policy after downtime (and the bound
of ``all``), a changed schedule, a stale leader's late write, and bad input refused
before anything is written."""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import riverboat
from riverboat import MaintenanceConfig, PeriodicJob, RetryPolicy, Workers
from riverboat._periodic import CATCH_UP_LIMIT
from riverboat._url import async_driver_from_url
from riverboat.dialect._periodic_common import PeriodicJobWrite
from riverboat.dialect._sqlite_common import parse_timestamp
from riverboat.errors import InvalidInputError
from riverboat.runtime.maintenance import MaintenanceContext
from riverboat.runtime.maintenance.periodic import PeriodicJobEnqueuer
from riverboat.runtime.producer import QueueConfig
from tests.runtime.dbs import Db, any_db  # noqa: F401

MINUTE = timedelta(minutes=1)


@pytest.fixture
async def driver(any_db: Db) -> AsyncIterator[Any]:  # noqa: F811
    drv = async_driver_from_url(any_db.url, schema=any_db.schema)
    try:
        yield drv
    finally:
        await drv.close()


def _mid_minute() -> datetime:
    """Now, moved to half past its minute: no every-minute tick falls within the
    enqueuer's due margin of it."""
    return datetime.now(UTC).replace(second=30, microsecond=0)


def _enqueuer(
    driver: Any, jobs: list[PeriodicJob], now: datetime | None = None
) -> PeriodicJobEnqueuer:
    ctx = MaintenanceContext(
        driver=driver,
        client_id="leader",
        config=MaintenanceConfig(start_jitter=0.0),
        workers=Workers(),
        retry_policy=RetryPolicy(),
        job_timeout=60.0,
    )
    # The scheduler's now, fixed (half past the minute unless given): a term whose start
    # and first run straddle a tick, or come within the due margin of one, would
    # otherwise also run that tick (seen at 12:55:59.9 and at 9:48:59).
    fixed = _mid_minute() if now is None else now
    ctx.clock.set(lambda: fixed)
    return PeriodicJobEnqueuer(ctx, jobs)


async def _term(
    driver: Any, jobs: list[PeriodicJob], now: datetime | None = None
) -> PeriodicJobEnqueuer:
    """One leadership term's first run: stored times read, due runs inserted."""
    enqueuer = _enqueuer(driver, jobs, now)
    await enqueuer.on_start()
    await enqueuer.run_once()
    return enqueuer


def _aware(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return parse_timestamp(value)


def _runs(db: Db, kind: str) -> list[datetime]:
    rows = db.execute("SELECT scheduled_at FROM river_job WHERE kind = %s", kind)
    return sorted(t for t in (_aware(r[0]) for r in rows) if t is not None)


async def _stored(driver: Any) -> dict[str, Any]:
    dialect = driver.dialect
    return {
        r.id: r
        for r in map(dialect.decode_periodic_job, await driver.fetch(dialect.periodic_job_list()))
    }


async def _store(driver: Any, job: PeriodicJob, next_run_at: datetime) -> None:
    write = PeriodicJobWrite(job.id or "", job.schedule_text, job.catch_up, next_run_at, None)
    await driver.execute(driver.dialect.periodic_job_save([write]))


def _every_minute(catch_up: str, kind: str) -> PeriodicJob:
    return PeriodicJob(
        timedelta(minutes=1),
        lambda: riverboat.InsertManyParams({"n": 1}, kind=kind),
        id=kind,
        catch_up=catch_up,
    )


@pytest.mark.asyncio
async def test_a_new_job_is_stored_and_the_next_term_carries_on(any_db: Db, driver: Any) -> None:  # noqa: F811
    job = _every_minute("all", "minutely")
    first = await _term(driver, [job])
    row = (await _stored(driver))["minutely"]
    assert row.schedule == "@every 60s" and row.catch_up == "all" and row.last_run_at is None
    assert row.next_run_at == first._entries[0].next_run_at
    # The next leader reads the stored tick rather than computing its own.
    await _store(driver, job, row.next_run_at + 5 * MINUTE)
    second = await _term(driver, [job])
    assert second._entries[0].next_run_at == row.next_run_at + 5 * MINUTE
    assert _runs(any_db, "minutely") == []


@pytest.mark.asyncio
@pytest.mark.parametrize("catch_up", ["all", "one", "none"])
async def test_catch_up_after_downtime(any_db: Db, driver: Any, catch_up: str) -> None:  # noqa: F811
    kind = f"missed_{catch_up}"
    job = _every_minute(catch_up, kind)
    now = _mid_minute()
    last_tick = job.next_after(now - MINUTE)  # the latest tick at or before now
    assert last_tick is not None and last_tick <= now
    missed = [last_tick - n * MINUTE for n in range(9, -1, -1)]  # 10 ticks
    await _store(driver, job, missed[0])
    await _term(driver, [job], now)
    runs = _runs(any_db, kind)
    expected = {"all": missed, "one": missed[-1:], "none": []}[catch_up]
    assert runs == expected
    row = (await _stored(driver))[kind]
    assert row.next_run_at == last_tick + MINUTE
    assert row.last_run_at == (expected[-1] if expected else None)


@pytest.mark.asyncio
async def test_catch_up_all_is_bounded(
    any_db: Db,  # noqa: F811
    driver: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = PeriodicJob(
        "* * * * * *",  # every second: an hour down misses 3,600 ticks
        lambda: riverboat.InsertManyParams({}, kind="busy"),
        id="busy",
    )
    now = datetime.now(UTC).replace(microsecond=0)
    await _store(driver, job, now - timedelta(hours=1))
    with caplog.at_level(logging.WARNING, logger="riverboat.maintenance"):
        enqueuer = await _term(driver, [job], now)
    runs = _runs(any_db, "busy")
    assert len(runs) == CATCH_UP_LIMIT
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(runs))
    assert runs[-1] >= now  # the latest ones
    assert "only the latest 100 are inserted" in caplog.text
    assert enqueuer._entries[0].next_run_at == runs[-1] + timedelta(seconds=1)


@pytest.mark.asyncio
async def test_a_changed_schedule_starts_from_now(any_db: Db, driver: Any) -> None:  # noqa: F811
    old = PeriodicJob("0 * * * *", lambda: None, id="reschedule")
    await _store(driver, old, datetime.now(UTC) - timedelta(hours=5))
    new = PeriodicJob(
        "CRON_TZ=Europe/Paris 30 9 * * *",
        lambda: riverboat.InsertManyParams({}, kind="rescheduled"),
        id="reschedule",
    )
    now = _mid_minute()
    enqueuer = await _term(driver, [new], now)
    assert _runs(any_db, "rescheduled") == []  # nothing caught up under the old schedule
    row = (await _stored(driver))["reschedule"]
    assert row.schedule == "CRON_TZ=Europe/Paris 30 9 * * *"
    assert row.next_run_at == enqueuer._entries[0].next_run_at
    # After the enqueuer's now, not the process's: run just before 09:30 in Paris, the
    # tick computed from the fixed now had passed by the time of this line.
    assert row.next_run_at is not None and row.next_run_at > now


@pytest.mark.asyncio
async def test_a_stale_leader_cannot_move_the_next_run_back(driver: Any) -> None:
    job = _every_minute("all", "stale")
    later = datetime(2030, 1, 1, tzinfo=UTC)
    await _store(driver, job, later)
    await _store(driver, job, later - MINUTE)
    assert (await _stored(driver))["stale"].next_run_at == later
    forgotten = await driver.fetch(driver.dialect.periodic_job_delete(["stale", "unknown"]))
    assert [r[0] for r in forgotten] == ["stale"]
    assert await _stored(driver) == {}


def test_bad_input_is_refused_before_anything_is_written(any_db: Db) -> None:  # noqa: F811
    make = lambda: None  # noqa: E731
    with pytest.raises(InvalidInputError, match="catch-up policy"):
        PeriodicJob(60, make, id="job_a", catch_up="sometimes")
    with pytest.raises(InvalidInputError, match="needs an id"):
        PeriodicJob(60, make, catch_up="none")
    with pytest.raises(InvalidInputError, match="not a known time zone"):
        PeriodicJob("0 9 * * *", make, id="job_a", tz="Mars/Olympus_Mons")
    with pytest.raises(InvalidInputError, match="not a known time zone"):
        PeriodicJob("CRON_TZ=Nowhere/Town 0 9 * * *", make, id="job_a")
    with pytest.raises(InvalidInputError, match="not a cron expression"):
        PeriodicJob("61 * * * *", make, id="job_a")
    with pytest.raises(InvalidInputError, match="duplicate periodic job id"):
        riverboat.Client(
            any_db.url,
            schema=any_db.schema,
            queues={"default": QueueConfig()},
            workers=Workers(),
            periodic_jobs=[PeriodicJob(60, make, id="job_a"), PeriodicJob(30, make, id="job_a")],
        )
    assert any_db.execute("SELECT count(*) FROM riverboat_periodic_job") == [(0,)]
