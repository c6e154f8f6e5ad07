"""Bounded shutdown with hung jobs (issue #13.2), through real worker processes, on
Postgres and SQLite.

* ``--soft-stop-timeout`` (River's SoftStopTimeout): SIGTERM waits that long for running
  jobs, then hands them back as River 0.44 does (``available``, the attempt restored,
  errors unchanged) and the process exits although a sync job's thread never returns.
* A second SIGTERM is a hard stop, and it too works with a sync job that never returns.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.reliability._support import (
    OutputReader,
    counts_by_state,
    insert_jobs,
    is_sqlite,
    job_table,
    spawn_worker,
    sql,
)
from tests.waiting import wait_until

EARLIER_ERROR = {
    "at": "2026-01-02T03:04:05.678Z",
    "attempt": 1,
    "error": "an earlier attempt's error",
    "trace": "",
}


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    return request.getfixturevalue("sqlite_url"), None


def _as_if_tried_once(url: str, schema: str | None) -> None:
    """Every job looks like one that failed once: attempt 1 with one error."""
    error = json.dumps(EARLIER_ERROR)
    if is_sqlite(url):
        from riverboat.drivers._sqlite_module import sqlite_module

        conn = sqlite_module().connect(url.removeprefix("sqlite:///"), timeout=10)
        try:
            conn.execute(
                "UPDATE river_job SET attempt = 1, errors = jsonb(json_array(json(?)))", (error,)
            )
            conn.commit()
        finally:
            conn.close()
        return
    sql(url, schema, "UPDATE river_job SET attempt = 1, errors = ARRAY[%s::jsonb]", error)


def _hung_jobs(url: str, schema: str | None) -> list[int]:
    # Sync jobs only: the app's 1 s job timeout cuts async ones off before the signal.
    ids = insert_jobs(url, schema, "rel_sync", [{"sleep": 3600} for _ in range(5)])
    _as_if_tried_once(url, schema)
    return ids


def _assert_handed_back(url: str, schema: str | None, ids: list[int]) -> None:
    table = job_table(url, schema)
    for job_id in ids:
        state, attempt, errors = table[job_id]
        assert (state, attempt) == ("available", 1), (job_id, table[job_id])
        assert [e["error"] for e in errors] == [EARLIER_ERROR["error"]], (job_id, errors)


def test_soft_stop_timeout_hands_hung_jobs_back_and_exits(
    tmp_path: Path, db: tuple[str, str | None]
) -> None:
    url, schema = db
    ids = _hung_jobs(url, schema)
    limit = 1.5
    proc = spawn_worker(tmp_path, url, schema, "--soft-stop-timeout", str(limit))
    out = OutputReader(proc)
    wait_until(
        lambda: counts_by_state(url, schema) == {"running": 5}, timeout=30, what="hung jobs running"
    )
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(limit + 15) == 0, out.text()
    took = time.monotonic() - signalled
    out.join()
    print(f"exited {took:.2f}s after SIGTERM with soft_stop_timeout={limit}s")
    assert limit <= took < limit + 5, out.text()
    _assert_handed_back(url, schema, ids)
    text = out.text()
    assert "soft stop timeout of 1.5s passed with 5 jobs still running" in text
    # "stopped" is the last word, and says the threads it left behind.
    assert "stopped; 5 sync job threads still running were left behind" in out.lines[-1], text


def test_second_sigterm_stops_hard_with_a_hung_sync_job(
    tmp_path: Path, db: tuple[str, str | None]
) -> None:
    url, schema = db
    ids = _hung_jobs(url, schema)
    proc = spawn_worker(tmp_path, url, schema)  # the default soft stop timeout: 25 s
    out = OutputReader(proc)
    wait_until(
        lambda: counts_by_state(url, schema) == {"running": 5}, timeout=30, what="hung jobs running"
    )
    proc.send_signal(signal.SIGTERM)
    out.wait_for(lambda line: "waiting for running jobs (up to 25s" in line, 10)
    assert counts_by_state(url, schema) == {"running": 5}
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0, out.text()
    took = time.monotonic() - signalled
    out.join()
    print(f"exited {took:.2f}s after the second SIGTERM")
    assert took < 5, out.text()
    _assert_handed_back(url, schema, ids)
    assert "left behind" in out.lines[-1], out.text()
