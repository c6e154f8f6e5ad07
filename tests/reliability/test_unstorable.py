"""Scenario 22 (issue #25): one outcome the database refuses, or one row another session
holds locked, must not hold back every other outcome.

* The completer is given real outcomes of claimed jobs, among them three the database
  refuses (an error entry with the ``\\u0000`` escape that Postgres' jsonb rejects, staged
  metadata with a lone surrogate no driver can send, an error entry that is not JSON).
  Every other outcome is written at once; each refused one is written with its error
  text replaced (or failed by id), one WARNING line naming its id; nothing stays
  ``running`` (Postgres and SQLite).
* A running job's row is held with ``SELECT ... FOR UPDATE`` from another connection
  (Postgres): the other jobs' outcomes are written while the lock is held, the locked
  one right after it is released, and a WARNING says which job waited.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import riverboat
from riverboat import AttemptError, EventKind, Job, JobRow, JobState, QueueConfig, Workers
from riverboat.dialect.base import JobStateUpdate
from riverboat.runtime.completer import Completer, PendingCompletion
from tests.reliability._support import (
    OutputReader,
    counts_by_state,
    insert_jobs,
    is_sqlite,
    job_table,
    query,
    spawn_worker,
    sql,
    stop_process,
)
from tests.waiting import wait_until, wait_until_async


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    return request.getfixturevalue("sqlite_url"), None


@pytest.fixture(params=["postgres", "asyncpg", "sqlite"])
def completer_db(request: pytest.FixtureRequest) -> tuple[str, str, str | None]:
    """(the client's URL, a URL to read rows with, schema): psycopg, asyncpg, SQLite."""
    if request.param == "sqlite":
        url = request.getfixturevalue("sqlite_url")
        return url, url, None
    url = request.getfixturevalue("pg_url")
    schema = request.getfixturevalue("pg_schema")
    if request.param == "asyncpg":
        pytest.importorskip("asyncpg")
        return url.replace("postgresql://", "postgresql+asyncpg://", 1), url, schema
    return url, url, schema


def _error(job: JobRow, text: str) -> str:
    return AttemptError(datetime.now(UTC), job.attempt, text).to_json()


async def test_refused_outcomes_are_isolated_and_the_rest_written(
    completer_db: tuple[str, str, str | None], caplog: pytest.LogCaptureFixture
) -> None:
    client_url, url, schema = completer_db
    client = riverboat.AsyncClient(client_url, schema=schema)
    try:
        await client.insert_many(
            [riverboat.InsertManyParams({"n": i}, kind="outcome") for i in range(40)]
        )
        dialect = client.driver.dialect
        rows = await client.driver.fetch(
            dialect.job_get_available(queue="default", max_to_lock=40, client_id="test")
        )
        jobs = sorted(dialect.decode_jobs(rows), key=lambda j: j.id)
        assert len(jobs) == 40
        later = datetime.now(UTC) + timedelta(hours=1)
        updates: list[JobStateUpdate] = []
        for i, job in enumerate(jobs):
            if i % 4 == 0:
                update = JobStateUpdate(job.id, JobState.COMPLETED, finalized=True)
            elif i % 4 == 1:
                update = JobStateUpdate(
                    job.id, JobState.RETRYABLE, error=_error(job, "boom"), scheduled_at=later
                )
            elif i % 4 == 2:
                update = JobStateUpdate(
                    job.id, JobState.COMPLETED, finalized=True, metadata_updates='{"out": 1}'
                )
            else:
                update = JobStateUpdate(
                    job.id, JobState.CANCELLED, error=_error(job, "stop"), finalized=True
                )
            updates.append(update)
        # Three outcomes no encoder riverboat ships would produce, as a buggy or
        # third-party one could: raw text the database (or the driver) refuses.
        nul = jobs[5]
        updates[5] = JobStateUpdate(
            nul.id,
            JobState.RETRYABLE,
            error=json.dumps({"at": "2026-01-01T00:00:00Z", "attempt": 1, "error": "a\x00b"}),
            scheduled_at=later,
        )
        surrogate = jobs[18]
        updates[18] = JobStateUpdate(
            surrogate.id, JobState.COMPLETED, finalized=True, metadata_updates='{"x": "\ud800"}'
        )
        not_json = jobs[31]
        updates[31] = JobStateUpdate(
            not_json.id, JobState.DISCARDED, error='{"error": "cut sho', finalized=True
        )
        refused = {surrogate.id, not_json.id} | (set() if is_sqlite(url) else {nul.id})
        expected = {update.id: update.state.value for update in updates}

        completer = Completer(client.driver, batch_threshold=1000, flush_delay=0.05)
        caplog.set_level(logging.DEBUG, "riverboat.completer")
        completer.start()
        for job, update in zip(jobs, updates, strict=True):
            await completer.add(
                PendingCompletion(update, job, EventKind.JOB_COMPLETED, 0.0, 0.0, time.monotonic())
            )
        began = time.monotonic()
        await asyncio.wait_for(completer.wait_drained(), 20)
        await asyncio.wait_for(completer.stop(), 5)
        took = time.monotonic() - began
    finally:
        await client.close()

    table = job_table(url, schema)
    assert all(state != "running" for state, _, _ in table.values()), table
    for job_id, state in expected.items():
        assert table[job_id][0] == state, (job_id, table[job_id])
    for job_id in refused:
        errors = table[job_id][2]
        if job_id != surrogate.id:  # a completion keeps no error entry
            assert "could not store this attempt's outcome" in errors[-1]["error"], errors
    if is_sqlite(url):  # SQLite stores the NUL as it came
        assert table[nul.id][2][-1]["error"] == "a\x00b"
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name == "riverboat.completer" and r.levelno >= logging.WARNING
    ]
    print(f"written in {took:.2f}s; {completer.poisoned} refused; log:", *warnings, sep="\n  ")
    assert completer.poisoned == len(refused)
    assert len(warnings) == len(refused), warnings
    for job_id in refused:
        assert sum(f"job {job_id} " in w for w in warnings) == 1, warnings
    # The database's full message (DETAIL, CONTEXT) goes to DEBUG only.
    assert not any("DETAIL" in w or "\n" in w for w in warnings)


async def _events_until_quiet(sub: Any, quiet: float = 0.3) -> list[Any]:
    """Every event the subscription has, or gets until ``quiet`` s pass without one."""
    events = []
    while True:
        try:
            events.append(await asyncio.wait_for(sub.get(), quiet))
        except TimeoutError:
            return events


@pytest.mark.parametrize("with_events", [False, True], ids=["no-events", "events"])
async def test_a_locked_row_does_not_hold_back_the_other_outcomes(
    pg_url: str, pg_schema: str, caplog: pytest.LogCaptureFixture, with_events: bool
) -> None:
    workers = Workers()
    release = asyncio.Event()

    @workers.register("held")
    async def held(job: Job[Any]) -> None:
        await release.wait()

    @workers.register("quick")
    async def quick(job: Job[Any]) -> None:
        if job.args["fail"]:
            raise RuntimeError("fails once")

    client = riverboat.AsyncClient(
        pg_url,
        schema=pg_schema,
        queues={"default": QueueConfig(max_workers=10)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        soft_stop_timeout=5,
    )
    caplog.set_level(logging.INFO, "riverboat")
    locker = await psycopg.AsyncConnection.connect(pg_url)
    # With a subscriber, the completer's statements return rows (events need them).
    sub = client.subscribe(EventKind.JOB_COMPLETED, EventKind.JOB_FAILED) if with_events else None
    await client.start()
    try:
        held_id = (await client.insert({}, kind="held")).job.id
        await wait_until_async(
            lambda: asyncio.to_thread(
                sql,
                pg_url,
                pg_schema,
                "SELECT 1 FROM river_job WHERE id = %s AND state = 'running'",
                held_id,
            ),
            timeout=10,
            what="the held job running",
        )
        # Another session locks the running job's row and keeps its transaction open.
        await locker.execute(f'SET search_path TO "{pg_schema}"')
        await locker.execute("SELECT id FROM river_job WHERE id = %s FOR UPDATE", (held_id,))
        release.set()  # the held job returns: its outcome meets the lock
        inserted = await client.insert_many(
            [riverboat.InsertManyParams({"fail": i % 2 == 0}, kind="quick") for i in range(40)]
        )
        quick_ids = [r.job.id for r in inserted]

        def others_written() -> bool:
            rows = sql(
                pg_url,
                pg_schema,
                "SELECT count(*) FROM river_job WHERE id = ANY(%s) AND state <> 'running' "
                "AND (state = 'completed' OR attempt >= 1 AND errors IS NOT NULL)",
                quick_ids,
            )
            return bool(rows[0][0] == len(quick_ids))

        await wait_until_async(
            lambda: asyncio.to_thread(others_written),
            timeout=15,
            what="the other outcomes written while the lock is held",
        )
        await wait_until_async(
            lambda: "its row is locked by another session" in caplog.text,
            timeout=5,
            what="the lock warning",
        )
        assert sql(
            pg_url, pg_schema, "SELECT state::text FROM river_job WHERE id = %s", held_id
        ) == [("running",)]
        before = await _events_until_quiet(sub) if sub is not None else []
        await locker.rollback()  # the lock is released
        await wait_until_async(
            lambda: asyncio.to_thread(
                sql,
                pg_url,
                pg_schema,
                "SELECT 1 FROM river_job WHERE id = %s AND state = 'completed'",
                held_id,
            ),
            timeout=10,
            what="the locked job's outcome written after the release",
        )
        after = await _events_until_quiet(sub) if sub is not None else []
        began = time.monotonic()
        await asyncio.wait_for(client.stop(), 10)
        stop_took = time.monotonic() - began
    finally:
        await locker.close()
        await client.stop()
        await client.close()
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "riverboat.completer" and r.levelno >= logging.INFO
    ]
    print(f"stop took {stop_took:.2f}s; completer log:", *lines, sep="\n  ")
    assert stop_took < 5
    if with_events:
        # The others' events came while the lock was held, the held job's once, after.
        assert set(quick_ids) <= {e.job.id for e in before}
        assert held_id not in {e.job.id for e in before}
        held_events = [e.kind for e in after if e.job.id == held_id]
        assert held_events == [EventKind.JOB_COMPLETED]
    assert sum(f"job {held_id} (held): its row is locked" in line for line in lines) == 1
    assert any(
        f"job {held_id}: outcome written after its row lock was released" in line for line in lines
    )
    assert not sql(pg_url, pg_schema, "SELECT id FROM river_job WHERE state = 'running'")
    assert query(pg_url, pg_schema, "SELECT count(*) FROM river_job")[0][0] == 41


VIAS = ("raise", "output", "metadata", "log", "cancel")


def test_unstorable_text_never_stalls_a_worker(tmp_path: Path, db: tuple[str, str | None]) -> None:
    """A real ``riverboat worker``: jobs put a NUL and a lone surrogate in an exception
    message (and so its traceback), recorded output, staged metadata (with a snooze), a
    riverlog line and a cancel reason, among 100 plain jobs. Everything is written with
    U+FFFD in their place, at once; nothing stays running; SIGTERM stops the worker
    promptly; the log has no database error."""
    url, schema = db
    plain = insert_jobs(url, schema, "rel_work", [{} for _ in range(100)])
    odd = insert_jobs(url, schema, "rel_unstorable", [{"via": v} for v in VIAS for _ in range(10)])
    proc = spawn_worker(tmp_path, url, schema, RB_RIVERLOG="1", RB_FLUSH_DELAY="0.2")
    out = OutputReader(proc)
    try:
        wait_until(
            lambda: set(counts_by_state(url, schema)) <= {"completed", "cancelled"},
            timeout=30,
            what="every job completed or cancelled",
        )
        began = time.monotonic()
        code = stop_process(proc, timeout=30)
        stop_took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        out.join()
    print(f"stopped in {stop_took:.2f}s (exit {code}); worker log:\n{out.text()}")
    assert code == 0
    assert stop_took < 10
    assert counts_by_state(url, schema) == {"completed": 140, "cancelled": 10}
    metadata_sql = (
        "SELECT id, json(metadata) FROM river_job"
        if is_sqlite(url)
        else "SELECT id, metadata::text FROM river_job"
    )
    metadata = {row[0]: json.loads(row[1]) for row in query(url, schema, metadata_sql)}
    table = job_table(url, schema)
    by_via = dict(zip(odd, (v for v in VIAS for _ in range(10)), strict=True))
    for job_id, via in by_via.items():
        state, attempt, errors = table[job_id]
        meta = metadata[job_id]
        if via == "raise":
            assert (state, attempt) == ("completed", 2)
            assert "nul here:\ufffd end, surrogate here:\ufffd end" in errors[0]["error"]
            assert "\ufffd" in errors[0]["trace"]
        elif via == "output":
            assert meta["output"] == {"text": "nul here:\ufffd end, surrogate here:\ufffd end"}
        elif via == "metadata":
            assert meta["snoozes"] == 1
            assert meta["note"] == {
                "nul here:\ufffd end, surrogate here:\ufffd end": (
                    "nul here:\ufffd end, surrogate here:\ufffd end"
                )
            }
        elif via == "log":
            assert "nul here:\ufffd end, surrogate here:\ufffd end" in meta["river:log"][0]["log"]
        else:
            assert state == "cancelled"
            assert (
                errors[-1]["error"] == ("JobCancel: nul here:\ufffd end, surrogate here:\ufffd end")
                or "nul here:\ufffd end" in errors[-1]["error"]
            ), errors
    assert all(table[i][0] == "completed" for i in plain)
    # Nothing reached the database that it refused: no retry of a batch, no DETAIL lines.
    assert not [line for line in out.lines if "completer:" in line or "DETAIL" in line]
    # The failure lines name the error with U+FFFD too: a NUL makes a log file "binary".
    failures = [line for line in out.lines if "attempt 1/25 failed" in line]
    assert len(failures) == 10 and all("nul here:\ufffd end" in line for line in failures)
