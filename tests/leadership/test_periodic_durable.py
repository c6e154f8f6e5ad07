"""Durable periodic jobs across process deaths, on Postgres and SQLite: worker processes
share a periodic job that ticks every second; the leader is killed (SIGKILL), then
stopped cleanly (a leader change), then every process stops and a new one starts after
ticks were missed (a restart). From the database's own record (river_job and
riverboat_periodic_job) every tick from the first to the last was inserted exactly once."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from riverboat.dialect._sqlite_common import parse_timestamp
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.waiting import wait_until_async

ROOT = Path(__file__).resolve().parents[2]
SECOND = timedelta(seconds=1)


def _aware(value: object) -> datetime:
    if isinstance(value, datetime):
        return value
    parsed = parse_timestamp(value)
    assert parsed is not None
    return parsed


class Fleet:
    """The worker processes of one test, by name."""

    def __init__(self, db: Db) -> None:
        self.db = db
        self.procs: dict[str, asyncio.subprocess.Process] = {}

    async def start(self, name: str) -> None:
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'src'}")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.leadership._periodic_proc",
            self.db.url,
            self.db.schema or "",
            name,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env=env,
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        assert line.strip() == b"STARTED", line
        self.procs[name] = proc

    async def end(self, name: str, sig: int) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(sig)
        await asyncio.wait_for(proc.wait(), 20)

    async def end_all(self) -> None:
        for name in list(self.procs):
            await self.end(name, signal.SIGTERM)

    def kill_all_now(self) -> None:
        for proc in self.procs.values():
            if proc.returncode is None:
                proc.kill()


def _leader(db: Db) -> str | None:
    rows = db.execute("SELECT leader_id FROM river_leader")
    return str(rows[0][0]) if rows else None


def _ticks(db: Db) -> list[datetime]:
    rows = db.execute("SELECT scheduled_at FROM river_job WHERE kind = 'periodic_tick'")
    return sorted(_aware(r[0]) for r in rows)


def _stored(db: Db) -> tuple[datetime | None, datetime | None]:
    rows = db.execute(
        "SELECT last_run_at, next_run_at FROM riverboat_periodic_job WHERE id = %s",
        "every_second",
    )
    if not rows:
        return None, None
    last, next_ = rows[0]
    return (_aware(last) if last else None, _aware(next_) if next_ else None)


async def _more_ticks(db: Db, count: int) -> None:
    before = len(_ticks(db))
    await wait_until_async(lambda: len(_ticks(db)) >= before + count, timeout=15)


async def _new_leader(db: Db, not_: str | None) -> str:
    found = await wait_until_async(
        lambda: (lambda now: now if now is not None and now != not_ else None)(_leader(db)),
        timeout=15,
        what="a new leader",
    )
    return str(found)


@pytest.mark.asyncio
async def test_ticks_survive_kill_leader_change_and_restart(any_db: Db) -> None:  # noqa: F811
    db = any_db
    fleet = Fleet(db)
    try:
        await asyncio.gather(fleet.start("w1"), fleet.start("w2"))
        first = await _new_leader(db, None)
        await _more_ticks(db, 2)

        # 1. The leader dies without resigning: the other takes over after its term.
        await fleet.end(first, signal.SIGKILL)
        second = await _new_leader(db, first)
        await _more_ticks(db, 2)

        # 2. A leader change: the leader stops cleanly, a newcomer takes over.
        await fleet.start("w3")
        await fleet.end(second, signal.SIGTERM)
        await _new_leader(db, second)
        await _more_ticks(db, 2)

        # 3. A restart after downtime: nobody runs while ticks pass, then one starts.
        await fleet.end_all()
        _, stopped_at_next = _stored(db)
        assert stopped_at_next is not None
        await wait_until_async(
            lambda: datetime.now(UTC) > stopped_at_next + 2 * SECOND,
            timeout=10,
            what="two ticks missed",
        )
        await fleet.start("w4")
        await wait_until_async(
            lambda: (lambda t: t and t[-1] > stopped_at_next + 3 * SECOND)(_ticks(db)),
            timeout=15,
            what="ticks after the restart",
        )
        await fleet.end_all()
    finally:
        fleet.kill_all_now()

    ticks = _ticks(db)
    assert len(ticks) == len(set(ticks)), "a tick was inserted twice"
    gaps = [(a, b) for a, b in itertools.pairwise(ticks) if b - a != SECOND]
    assert not gaps, f"ticks skipped between {gaps}"
    assert ticks[0].microsecond == 0
    last_run, next_run = _stored(db)
    assert last_run is not None and next_run is not None
    # The record says what the jobs say: the last tick stored is the last inserted, or
    # (a clean stop between the two writes) the one before it.
    assert last_run in ticks[-2:]
    assert next_run == last_run + SECOND
