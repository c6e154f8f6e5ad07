"""Scenario 1: SIGKILL a worker process at random points, again and again.

A kill can land before a claim commits (the jobs stay available), mid-job (claimed,
running, body not finished), or after a job returned but before the completer flushed
its outcome (the completer holds outcomes for ``RB_FLUSH_DELAY`` = 0.4 s here, so that
window is wide). After the last kill a worker with a short ``rescue_stuck_jobs_after``
finishes the queue. What must hold:

* every job ends ``completed``, exactly one row each (no job lost);
* a job's body ran more than once only if its completion was not written when a
  worker died: re-runs ⊆ the jobs left ``running`` right after some kill;
* each of those left-``running`` jobs went through the rescuer and carries its
  ``"Stuck job rescued by JobRescuer"`` error entry; every other job ran once, on its
  first attempt, with no error.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from tests.reliability._support import (
    OutputReader,
    counts_by_state,
    executions,
    insert_jobs,
    is_sqlite,
    job_table,
    query,
    reruns,
    running_ids,
    spawn_worker,
    stop_process,
)
from tests.waiting import wait_until

JOBS = 2000
# The killed workers' Postgres sessions, by name (libpq reads PGAPPNAME).
KILLED_APP = "riverboat_killed_worker"
KILLS = 6
RESCUE_ERROR = "Stuck job rescued by JobRescuer"


def _crash_rounds(tmp_path: Path, url: str, schema: str | None, seed: int) -> None:
    rng = random.Random(seed)
    out = tmp_path / "out"
    out.mkdir()
    ids = insert_jobs(url, schema, "rel_work", [{"sleep": 0.02} for _ in range(JOBS)])
    unwritten: set[int] = set()  # jobs whose completion was not written at some kill
    report = []
    env = {
        "RB_FLUSH_DELAY": "0.4",
        "RB_FLUSH_THRESHOLD": "100000",
        "RB_RESCUE_AFTER": "2",
        "RB_MAX_WORKERS": "10",
    }
    for kill in range(KILLS):
        proc = spawn_worker(out, url, schema, **env, PGAPPNAME=KILLED_APP)
        reader = OutputReader(proc)
        try:
            reader.wait_for(lambda line: "started: queues" in line, 30)
            before = executions(out)
            still_stuck = running_ids(url, schema)  # left by earlier kills, not yet rescued
            # The random kill point: how long the worker runs before SIGKILL.
            delay = rng.uniform(0.05, 1.2)
            time.sleep(delay)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            reader.join()
        if not is_sqlite(url):
            # A statement the server was running for the dead worker (a claim) still
            # commits before its session notices the closed socket; read the rows after.
            wait_until(
                lambda: not _sessions_of(url, KILLED_APP),
                timeout=30,
                what="the killed worker's sessions ended",
            )
        left_running = running_ids(url, schema)
        after = executions(out)
        new = left_running - still_stuck
        returned_unflushed = {j for j in new if after[j] > before[j]}
        unwritten |= left_running
        report.append(
            f"kill {kill + 1} after {delay:.2f}s: {len(new)} newly left running "
            f"({len(returned_unflushed)} had returned, outcome unflushed; "
            f"{len(new) - len(returned_unflushed)} claimed, not finished)"
        )

    # A last worker finishes the queue; its rescuer retries what the kills left running.
    proc = spawn_worker(
        out, url, schema, "--log-level", "WARNING", **{**env, "RB_FLUSH_DELAY": "0.05"}
    )
    reader = OutputReader(proc)
    try:
        wait_until(
            lambda: counts_by_state(url, schema) == {"completed": JOBS},
            timeout=60,
            what="all jobs completed",
        )
    finally:
        code = stop_process(proc)
        reader.join()
    assert code == 0, reader.text()

    table = job_table(url, schema)
    counts = executions(out)
    assert sorted(table) == sorted(ids), "no job row lost or added"
    assert all(state == "completed" for state, _, _ in table.values())
    assert set(counts) == set(ids), "every completed job's body ran"
    rerun = reruns(counts)
    assert rerun <= unwritten, f"re-run although its completion was written: {rerun - unwritten}"
    for job_id in ids:
        _state, attempt, errors = table[job_id]
        messages = [e.get("error") for e in errors]
        if job_id in unwritten:
            assert RESCUE_ERROR in messages, (job_id, errors)
            assert attempt >= 2
        else:
            assert (attempt, messages, counts[job_id]) == (1, [], 1), job_id
    for line in report:
        print(line)
    print(
        f"jobs {JOBS}, kills {KILLS}, left running by kills {len(unwritten)}, "
        f"rescued and re-run {len(rerun)} (body had run before the kill), lost 0"
    )


def _sessions_of(url: str, application: str) -> int:
    sessions = query(
        url,
        None,
        f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{application}'",
    )
    return int(sessions[0][0])


def test_sigkill_at_random_points_postgres(
    tmp_path: Path, pg_url: str, pg_schema: str, test_seed: int
) -> None:
    import psycopg  # noqa: F401  (the Postgres variant needs the driver)

    _crash_rounds(tmp_path, pg_url, pg_schema, seed=test_seed)


def test_sigkill_at_random_points_sqlite(tmp_path: Path, sqlite_url: str, test_seed: int) -> None:
    _crash_rounds(tmp_path, sqlite_url, None, seed=test_seed)


pytestmark = pytest.mark.timeout(120)
