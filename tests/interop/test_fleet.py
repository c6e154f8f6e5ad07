"""A mixed fleet: a River worker process and a riverboat worker process on the same
queue, jobs inserted by both, each job worked exactly once, one leader at a time, and
leadership handed over in both directions when the leader stops, and from riverboat to
River when riverboat is killed.

The default run takes a few phases of seconds; the one-minute version with continuous
inserts (and River killed while leading, which waits out River's 15 s leader TTL) is
behind ``--long``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from riverboat import Client, InsertManyParams
from tests.interop import helpers
from tests.interop.river_go import REPO, GoProcess, RiverGo, Target
from tests.reliability._support import OutputReader
from tests.waiting import wait_until

APP = "tests.interop._fleet_app:client"
UNFINISHED = ["available", "running", "retryable", "scheduled", "pending"]


class Fleet:
    """The processes of one test and what they ran."""

    def __init__(self, river: RiverGo, target: Target, out: Path) -> None:
        self.river = river
        self.target = target
        self.out = out
        self.go_processes: list[GoProcess] = []
        self.rb_processes: list[tuple[subprocess.Popen[bytes], OutputReader]] = []
        self.inserted: set[int] = set()

    def start_go(self, client_id: str) -> GoProcess:
        worker = self.river.worker(f"--id={client_id}", "--kinds=fleet_job", "--max-workers=10")
        self.go_processes.append(worker)
        return worker

    def start_riverboat(self, client_id: str) -> tuple[subprocess.Popen[bytes], OutputReader]:
        env = {
            **os.environ,
            "IO_URL": self.target.url,
            "IO_SCHEMA": self.target.schema or "",
            "IO_CLIENT_ID": client_id,
            "IO_OUT": str(self.out),
            "PYTHONPATH": str(REPO),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "riverboat.cli", "worker", APP],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        reader = OutputReader(proc)
        self.rb_processes.append((proc, reader))
        return proc, reader

    def insert_both(self, client: Client, count: int) -> None:
        """``count`` jobs from each side, with a short sleep each."""
        args = [{"do": "sleep", "sleep_ms": 5, "n": i} for i in range(count)]
        spec = [{"kind": "fleet_job", "args": a} for a in args]
        for result in self.river.insert("insert_many", spec)["results"]:
            self.inserted.add(result["job"]["id"])
        params = [InsertManyParams(a, kind="fleet_job") for a in args]
        for rb_result in client.insert_many(params):
            self.inserted.add(rb_result.job.id)

    def wait_drained(self, client: Client, timeout: float = 30) -> None:
        wait_until(
            lambda: not client.job_list(kinds=["fleet_job"], states=UNFINISHED, limit=1).jobs,
            timeout=timeout,
            what="every fleet job finished",
        )

    def runs(self) -> Counter[int]:
        """Executions per job ID, from River's "done" events and riverboat's records."""
        counts: Counter[int] = Counter()
        for go in self.go_processes:
            counts.update(e["id"] for e in go.events_of("done"))
        for path in self.out.glob("exec.*"):
            counts.update(int(line.split()[0]) for line in path.read_text().splitlines())
        return counts

    def close(self) -> None:
        for go in self.go_processes:
            if go.proc.poll() is None:
                go.kill()
        for proc, reader in self.rb_processes:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join()


# How long before it was killed River may have claimed the jobs it left running.
HELD_WINDOW = timedelta(seconds=5)


def leader_id(target: Target) -> str | None:
    """The ``river_leader`` row's leader (None without a row), as either side sees it."""
    if target.dialect == "postgres":
        import psycopg

        with psycopg.connect(target.url, autocommit=True) as conn:
            row = conn.execute(f'SELECT leader_id FROM "{target.schema}".river_leader').fetchone()
    else:
        from riverboat.drivers._sqlite_module import sqlite_module

        conn = sqlite_module().connect(target.url.removeprefix("sqlite:///"))
        try:
            row = conn.execute("SELECT leader_id FROM river_leader").fetchone()
        finally:
            conn.close()
    return None if row is None else str(row[0])


def wait_leader(target: Target, wanted: str, timeout: float = 30) -> None:
    wait_until(lambda: leader_id(target) == wanted, timeout=timeout, what=f"{wanted} leading")


def check_exactly_once(fleet: Fleet, client: Client) -> None:
    runs = fleet.runs()
    twice = {job_id: n for job_id, n in runs.items() if n > 1}
    assert not twice, f"jobs run more than once: {twice}"
    assert set(runs) == fleet.inserted
    jobs = client.job_list(kinds=["fleet_job"], limit=10_000).jobs
    assert {job.id for job in jobs} == fleet.inserted
    assert {(job.state, job.attempt) for job in jobs} == {("completed", 1)}


def both_sides_worked(fleet: Fleet) -> tuple[int, int]:
    go = sum(len(g.events_of("done")) for g in fleet.go_processes)
    rb = sum(len(p.read_text().splitlines()) for p in fleet.out.glob("exec.*"))
    return go, rb


def test_mixed_fleet_works_each_job_once_and_hands_leadership_over(
    river: RiverGo, target: Target, tmp_path: Path
) -> None:
    fleet = Fleet(river, target, tmp_path)
    try:
        with helpers.client(target) as client:
            # River leads first; riverboat joins as a follower.
            fleet.start_go("go-a")
            wait_leader(target, "go-a")
            _, rb_a = fleet.start_riverboat("rb-a")
            rb_a.wait_for(lambda line: "worker rb-a started" in line, 30)
            fleet.insert_both(client, 100)
            fleet.wait_drained(client)
            go_runs, rb_runs = both_sides_worked(fleet)
            assert go_runs and rb_runs, "both workers should have taken jobs"
            assert leader_id(target) == "go-a"

            # River stops softly: it resigns and riverboat takes over.
            fleet.go_processes[0].stop()
            rb_a.wait_for(lambda line: line == "LEADER rb-a", 20)
            assert leader_id(target) == "rb-a"

            # A new River worker follows; riverboat is killed while leading and River
            # takes over once riverboat's 2 s leader row expires.
            fleet.start_go("go-b")
            fleet.insert_both(client, 50)
            fleet.wait_drained(client)
            assert leader_id(target) == "rb-a"
            fleet.rb_processes[0][0].send_signal(signal.SIGKILL)
            wait_leader(target, "go-b", timeout=30)

            # riverboat comes back as a follower; River stops and riverboat leads again.
            _, rb_b = fleet.start_riverboat("rb-b")
            fleet.insert_both(client, 50)
            fleet.wait_drained(client)
            fleet.go_processes[1].stop()
            rb_b.wait_for(lambda line: line == "LEADER rb-b", 20)

            # A third River worker follows; riverboat stops softly and River leads.
            fleet.start_go("go-c")
            fleet.insert_both(client, 50)
            fleet.wait_drained(client)
            rb_b_proc = fleet.rb_processes[1][0]
            rb_b_proc.send_signal(signal.SIGTERM)
            assert rb_b_proc.wait(30) == 0
            wait_leader(target, "go-c", timeout=30)
            check_exactly_once(fleet, client)
    finally:
        fleet.close()


@pytest.mark.long
def test_mixed_fleet_for_a_minute(river: RiverGo, target: Target, tmp_path: Path) -> None:
    """Both sides insert continuously for a minute while a River and a riverboat worker
    work; River is killed while leading (riverboat takes over once River's 15 s leader
    TTL has passed) and a new River worker joins; no job is worked twice."""
    fleet = Fleet(river, target, tmp_path)
    try:
        with helpers.client(target) as client:
            fleet.start_go("go-1")
            wait_leader(target, "go-1")
            fleet.start_riverboat("rb-1")
            started = time.monotonic()
            killed = restarted = False
            while time.monotonic() - started < 60:
                fleet.insert_both(client, 10)
                if not killed and time.monotonic() - started > 10:
                    killed_at = datetime.now(UTC)
                    fleet.go_processes[0].kill()
                    killed = True
                if killed and not restarted and leader_id(target) == "rb-1":
                    fleet.start_go("go-2")
                    restarted = True
                time.sleep(0.25)  # paces the inserts; nothing to wait for
            assert restarted, "riverboat never took over from the killed River leader"

            # Jobs the killed River held stay running until a rescuer's hour has passed:
            # everything else finishes.
            def unfinished() -> set[int]:
                jobs = client.job_list(kinds=["fleet_job"], states=UNFINISHED, limit=10_000).jobs
                return {j.id for j in jobs if j.state != "running" or j.attempted_by != ["go-1"]}

            wait_until(lambda: not unfinished(), timeout=60, what="every live job finished")
            runs = fleet.runs()
            assert not {i: n for i, n in runs.items() if n > 1}, "a job ran twice"
            jobs = client.job_list(kinds=["fleet_job"], limit=10_000).jobs
            assert {j.id for j in jobs} == fleet.inserted
            held = [j for j in jobs if j.state == "running"]
            assert all(j.attempted_by == ["go-1"] for j in held)
            # What River had claimed in its last moments: the jobs it was running (10 at
            # most) and those it had finished whose completions its batch completer had
            # not written yet (it flushes every 50 ms, so how many depends on the moment;
            # 20 seen). Nothing older: every earlier outcome of River's was written.
            assert all(
                j.attempted_at is not None and j.attempted_at >= killed_at - HELD_WINDOW
                for j in held
            ), [(j.id, j.attempted_at, killed_at) for j in held]
    finally:
        fleet.close()
