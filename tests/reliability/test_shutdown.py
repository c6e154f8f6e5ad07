"""Scenario 7: stopping a worker process with signals (Postgres and SQLite).

* One SIGTERM during a burst: fetching stops, running jobs finish, every outcome is
  flushed, exit 0; nothing stays ``running``; every job whose body ran is ``completed``
  and the rest are still ``available`` for the next worker.
* A second SIGTERM while long jobs run: they are interrupted (``available`` again, the
  attempt rolled back), what already finished is still flushed, exit 0, nothing
  ``running``.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.reliability._support import (
    OutputReader,
    counts_by_state,
    executions,
    insert_jobs,
    job_table,
    spawn_worker,
)
from tests.waiting import wait_until


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    return request.getfixturevalue("sqlite_url"), None


def test_sigterm_finishes_running_jobs_and_flushes(
    tmp_path: Path, db: tuple[str, str | None]
) -> None:
    url, schema = db
    ids = insert_jobs(url, schema, "rel_work", [{"sleep": 0.3} for _ in range(400)])
    proc = spawn_worker(tmp_path, url, schema, RB_MAX_WORKERS="20", RB_FLUSH_DELAY="0.3")
    out = OutputReader(proc)
    wait_until(
        lambda: counts_by_state(url, schema).get("completed", 0) >= 20, timeout=30, what="a burst"
    )
    wait_until(
        lambda: counts_by_state(url, schema).get("running", 0) >= 10,
        timeout=10,
        what="jobs running",
    )
    running_at_signal = counts_by_state(url, schema).get("running", 0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, out.text()
    out.join()
    counts = counts_by_state(url, schema)
    ran = executions(tmp_path)
    table = job_table(url, schema)
    completed = {j for j, (state, _, _) in table.items() if state == "completed"}
    print(f"SIGTERM with {running_at_signal} running: {counts}, {len(ran)} bodies ran")
    assert "running" not in counts, counts
    assert set(counts) <= {"completed", "available"}
    assert completed == set(ran), "every finished job was flushed, and only those"
    assert all(n == 1 for n in ran.values())
    assert sum(counts.values()) == len(ids)


def test_second_sigterm_interrupts_and_still_flushes(
    tmp_path: Path, db: tuple[str, str | None]
) -> None:
    url, schema = db
    quick = insert_jobs(url, schema, "rel_work", [{"sleep": 0} for _ in range(50)])
    slow = insert_jobs(url, schema, "rel_work", [{"sleep": 60} for _ in range(10)])
    proc = spawn_worker(tmp_path, url, schema, RB_MAX_WORKERS="20", RB_FLUSH_DELAY="0.3")
    out = OutputReader(proc)
    wait_until(
        lambda: counts_by_state(url, schema) == {"completed": 50, "running": 10},
        timeout=30,
        what="slow running",
    )
    proc.send_signal(signal.SIGTERM)
    out.wait_for(lambda line: "waiting for running jobs" in line, 10)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, out.text()
    out.join()
    table = job_table(url, schema)
    counts = counts_by_state(url, schema)
    print(f"second SIGTERM: {counts}")
    assert "running" not in counts
    assert all(table[j][0] == "completed" for j in quick)
    for j in slow:
        state, attempt, errors = table[j]
        assert (state, attempt, errors) == ("available", 0, []), (j, table[j])
    assert set(executions(tmp_path)) == set(quick)
