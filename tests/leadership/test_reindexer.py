"""The leader's reindexer on real Postgres: what it rebuilds, when, and its artifacts.

A rebuild is seen in ``pg_class.relfilenode``, which ``REINDEX`` changes. A concurrent
rebuild is held up by a transaction that keeps a ROW EXCLUSIVE lock on ``river_job``:
``REINDEX INDEX CONCURRENTLY`` creates ``<index>_ccnew`` and then waits for it, which is
how the tests get a rebuild that times out or is stopped half way, as in production.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import psycopg
import pytest

from riverboat import InvalidInputError, MaintenanceConfig, Workers
from riverboat.drivers.psycopg import AsyncPsycopgDriver
from riverboat.drivers.sqlite import AsyncSqliteDriver
from riverboat.runtime.maintenance import MaintenanceContext, build_services
from riverboat.runtime.maintenance.reindexer import (
    REINDEXER_INDEX_NAMES_DEFAULT,
    REINDEXER_TIMEOUT_DEFAULT,
    Reindexer,
    next_midnight_utc,
)
from tests.leadership._helpers import (
    fast_maintenance,
    make_client,
    wait_any_leader,
)
from tests.waiting import wait_until_async


class DueOnce:
    """A schedule whose first run is due at once and whose next one is a year away."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, moment: datetime) -> datetime:
        self.calls += 1
        return moment if self.calls == 1 else moment + timedelta(days=365)


def relfilenodes(pg_url: str, schema: str) -> dict[str, int]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            """SELECT c.relname, c.relfilenode FROM pg_class c
               JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = %s AND c.relkind = 'i'""",
            [schema],
        ).fetchall()
    return {name: node for name, node in rows}


def invalid_indexes(pg_url: str, schema: str) -> list[str]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            """SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = %s AND NOT i.indisvalid ORDER BY 1""",
            [schema],
        ).fetchall()
    return [name for (name,) in rows]


def reindex_running(pg_url: str) -> bool:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            """SELECT count(*) FROM pg_stat_activity
               WHERE query LIKE 'REINDEX INDEX CONCURRENTLY%%' AND state = 'active'"""
        ).fetchall()
    return bool(rows[0][0])


@pytest.fixture
def writer_lock(pg_url: str, pg_schema: str) -> Iterator[psycopg.Connection[Any]]:
    """An open transaction holding ROW EXCLUSIVE on river_job (a writer mid-transaction);
    committed by the test (or at the end)."""
    conn = psycopg.connect(pg_url)
    conn.execute(f'LOCK TABLE "{pg_schema}".river_job IN ROW EXCLUSIVE MODE')
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()


def _context(driver: Any, config: MaintenanceConfig | None = None) -> MaintenanceContext:
    return MaintenanceContext(
        driver=driver,
        client_id="reindexer-test",
        config=config or MaintenanceConfig(start_jitter=0.0),
        workers=Workers(),
        retry_policy=None,  # type: ignore[arg-type]
        job_timeout=None,
    )


def _due(service: Reindexer) -> Reindexer:
    service.next_run_at = datetime.now(UTC) - timedelta(seconds=1)
    return service


# -- configuration ------------------------------------------------------------------------


def test_rivers_schedule_is_midnight_utc() -> None:
    evening = datetime(2026, 12, 2, 18, 0, 5, tzinfo=UTC)
    assert next_midnight_utc(evening) == datetime(2026, 12, 3, tzinfo=UTC)
    midnight = datetime(2026, 12, 3, tzinfo=UTC)
    assert next_midnight_utc(midnight) == datetime(2026, 12, 4, tzinfo=UTC)
    tokyo = datetime(2026, 12, 3, 8, 0, tzinfo=UTC).astimezone()
    assert next_midnight_utc(tokyo) == datetime(2026, 12, 4, tzinfo=UTC)


async def test_runs_on_postgres_by_default_never_on_sqlite_and_can_be_turned_off(
    pg_url: str, pg_schema: str, tmp_path: Any
) -> None:
    driver = AsyncPsycopgDriver(pg_url, schema=pg_schema, max_pool_size=2)
    sqlite = AsyncSqliteDriver(f"sqlite:///{tmp_path / 'r.sqlite3'}")
    try:
        found = {s.name: s for s in build_services(_context(driver), [])}
        reindexer = found["reindexer"]
        assert isinstance(reindexer, Reindexer)
        assert reindexer.index_names == REINDEXER_INDEX_NAMES_DEFAULT
        assert reindexer.timeout == REINDEXER_TIMEOUT_DEFAULT == 60.0
        assert reindexer.schedule is next_midnight_utc
        off = MaintenanceConfig(reindexer_enabled=False)
        assert "reindexer" not in {s.name for s in build_services(_context(driver, off), [])}
        assert "reindexer" not in {s.name for s in build_services(_context(sqlite), [])}
        custom = MaintenanceConfig(
            reindexer_index_names=["river_job_kind"],
            reindexer_timeout=-1,
            reindexer_schedule=timedelta(hours=6),
        )
        tuned = {s.name: s for s in build_services(_context(driver, custom), [])}["reindexer"]
        assert isinstance(tuned, Reindexer)
        assert tuned.index_names == ("river_job_kind",) and tuned.timeout is None
        assert tuned.schedule(datetime(2026, 1, 1, 7, tzinfo=UTC)) == datetime(
            2026, 1, 1, 12, tzinfo=UTC
        )
    finally:
        await driver.close()
        await sqlite.close()


@pytest.mark.parametrize(
    "bad",
    [
        {"reindexer_timeout": 0},
        {"reindexer_timeout": "1m"},
        {"reindexer_index_names": "river_job_kind"},
        {"reindexer_index_names": [""]},
        {"reindexer_schedule": object()},
        {"reindexer_enabled": "no"},
    ],
)
def test_bad_settings_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError, match=r"maintenance\.reindexer|schedule"):
        MaintenanceConfig(**bad)


# -- what a run does ----------------------------------------------------------------------


async def test_only_the_leader_reindexes_at_the_scheduled_time(pg_url: str, pg_schema: str) -> None:
    before = relfilenodes(pg_url, pg_schema)
    clients = [
        make_client(
            pg_url,
            pg_schema,
            f"reindexer-{n}",
            maintenance=fast_maintenance(reindexer_schedule=DueOnce()),
        )
        for n in range(2)
    ]
    for client in clients:
        await client.start()
    leader = None
    try:
        leader = await wait_any_leader(clients, 10)
        services = {
            c: cast(Reindexer, c.runtime.maintainer.services["reindexer"])
            for c in clients
            if c.runtime.maintainer is not None
        }
        await wait_until_async(lambda: services[leader].completed_runs >= 1, timeout=30)
    finally:
        # The follower stops first: a leader that stops first resigns, and the follower
        # would win the next election during its own stop and run the (due) schedule.
        for client in sorted(clients, key=lambda c: c is leader):
            await client.stop()
            await client.close()
    follower = next(c for c in clients if c is not leader)
    assert services[follower].stats.runs == 0 and services[follower].completed_runs == 0
    assert services[leader].reindexed == list(REINDEXER_INDEX_NAMES_DEFAULT)
    after = relfilenodes(pg_url, pg_schema)
    for name in REINDEXER_INDEX_NAMES_DEFAULT:
        assert after[name] != before[name], name
    assert invalid_indexes(pg_url, pg_schema) == []


async def test_not_due_yet_does_nothing_and_an_empty_list_rebuilds_nothing(
    pg_url: str, pg_schema: str
) -> None:
    before = relfilenodes(pg_url, pg_schema)
    driver = AsyncPsycopgDriver(pg_url, schema=pg_schema, max_pool_size=2)
    try:
        early = Reindexer(_context(driver))
        await early.on_start()
        assert early.next_run_at is not None and early.next_run_at > datetime.now(UTC)
        await early.run_once()  # a wake-up before midnight
        assert early.completed_runs == 0
        empty = _due(Reindexer(_context(driver), index_names=[]))
        await empty.run_once()
        assert empty.completed_runs == 1 and empty.reindexed == []
    finally:
        await driver.close()
    assert relfilenodes(pg_url, pg_schema) == before


async def test_missing_indexes_are_skipped_with_a_warning(
    pg_url: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    driver = AsyncPsycopgDriver(pg_url, schema=pg_schema, max_pool_size=2)
    try:
        service = _due(Reindexer(_context(driver), index_names=["no_such_index", "river_job_kind"]))
        with caplog.at_level(logging.WARNING, "riverboat.maintenance"):
            await service.run_once()
    finally:
        await driver.close()
    assert service.reindexed == ["river_job_kind"]
    assert "no_such_index" in caplog.text


async def test_a_rebuild_past_its_timeout_is_cancelled_and_its_artifact_then_skipped(
    pg_url: str,
    pg_schema: str,
    writer_lock: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = relfilenodes(pg_url, pg_schema)
    driver = AsyncPsycopgDriver(pg_url, schema=pg_schema, max_pool_size=2)
    try:
        slow = _due(Reindexer(_context(driver), index_names=["river_job_kind"], timeout=0.5))
        started = time.monotonic()
        with caplog.at_level(logging.ERROR, "riverboat.maintenance"):
            await slow.run_once()
        assert time.monotonic() - started < 10
        assert slow.failed == ["river_job_kind"] and slow.reindexed == []
        assert "took longer than 0.5s" in caplog.text
        # As River does, a timeout leaves the cancelled build's artifact behind.
        assert invalid_indexes(pg_url, pg_schema) == ["river_job_kind_ccnew"]
        assert not reindex_running(pg_url)
        writer_lock.commit()

        # Artifacts of other indexes, numbered as Postgres numbers them when a name is
        # taken; a look-alike name that is not an artifact changes nothing.
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{pg_schema}"')
            conn.execute("CREATE INDEX river_job_pkey_ccold2 ON river_job (id)")
            conn.execute("CREATE INDEX river_job_unique_idx_ccnewer ON river_job (unique_key)")
        caplog.clear()
        nightly = _due(Reindexer(_context(driver)))
        with caplog.at_level(logging.WARNING, "riverboat.maintenance"):
            await nightly.run_once()
    finally:
        await driver.close()
    assert nightly.skipped == ["river_job_kind", "river_job_pkey"]
    assert nightly.reindexed == [
        n for n in REINDEXER_INDEX_NAMES_DEFAULT if n not in ("river_job_kind", "river_job_pkey")
    ]
    assert "river_job_kind_ccnew" in caplog.text and "river_job_pkey_ccold2" in caplog.text
    after = relfilenodes(pg_url, pg_schema)
    assert after["river_job_kind"] == before["river_job_kind"]
    assert after["river_job_pkey"] == before["river_job_pkey"]
    assert after["river_job_unique_idx"] != before["river_job_unique_idx"]
    assert invalid_indexes(pg_url, pg_schema) == ["river_job_kind_ccnew"]


async def test_stopping_mid_rebuild_cancels_it_and_drops_its_artifacts(
    pg_url: str, pg_schema: str, writer_lock: psycopg.Connection[Any]
) -> None:
    before = relfilenodes(pg_url, pg_schema)
    driver = AsyncPsycopgDriver(pg_url, schema=pg_schema, max_pool_size=3)
    try:
        service = Reindexer(
            _context(driver), index_names=["river_job_kind"], schedule=DueOnce(), timeout=None
        )
        stop = asyncio.Event()
        task = asyncio.create_task(service.run(stop))
        await wait_until_async(
            lambda: invalid_indexes(pg_url, pg_schema) != [], timeout=20, poll=0.1
        )
        assert reindex_running(pg_url)
        stop.set()  # the client stops, or leadership is lost, while the build waits
        # The build is cancelled on the server at once; dropping its artifact then waits
        # for the writer like any DROP INDEX CONCURRENTLY, so let the writer finish.
        await wait_until_async(lambda: not reindex_running(pg_url), timeout=10, poll=0.1)
        writer_lock.commit()
        await asyncio.wait_for(task, 30)
    finally:
        await driver.close()
    assert service.reindexed == [] and service.completed_runs == 1
    assert invalid_indexes(pg_url, pg_schema) == []
    after = relfilenodes(pg_url, pg_schema)
    assert after == before
