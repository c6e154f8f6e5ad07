"""Worker processes against one database: exactly-once under concurrency, and what a
SIGKILL leaves behind. The workers run through the real ``riverboat worker`` command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg

import riverboat
from riverboat.drivers.psycopg import PsycopgDriver
from tests.reliability._support import OutputReader
from tests.waiting import wait_until

WORKER_MODULE = """
import os, time
import riverboat
from riverboat import QueueConfig
from riverboat import Workers

workers = Workers()
OUT = os.environ["RB_TEST_OUT"]

@workers.register("count_me")
def count_me(job):
    with open(f"{OUT}.{os.getpid()}", "a") as f:
        f.write(f"{job.id}\\n")

@workers.register("wait_for_release")
def wait_for_release(job):
    # Holds its slot until the test says so: then it is running when the stop comes.
    open(f"{OUT}.started.{job.id}", "w").close()
    while not os.path.exists(f"{OUT}.release"):
        time.sleep(0.01)
    open(f"{OUT}.done.{job.id}", "w").close()

@workers.register("hang")
async def hang(job):
    import asyncio
    await asyncio.sleep(3600)

def stuck_client():
    # A factory that never returns (a network call at import, say): the process never
    # gets to install its signal handlers.
    open(f"{OUT}.stuck.{os.getpid()}", "w").close()
    while True:
        time.sleep(60)

def client():
    return riverboat.AsyncClient(
        os.environ["RB_TEST_URL"],
        schema=os.environ["RB_TEST_SCHEMA"] or None,
        queues={"default": QueueConfig(max_workers=50)},
        workers=workers,
        fetch_cooldown=0.005,
        fetch_poll_interval=0.1,
    )
"""


def _spawn(
    tmp_path: Path, url: str, schema: str, *args: str, **popen: Any
) -> subprocess.Popen[bytes]:
    (tmp_path / "rb_test_worker.py").write_text(textwrap.dedent(WORKER_MODULE))
    env = {
        **os.environ,
        "RB_TEST_URL": url,
        "RB_TEST_SCHEMA": schema,
        "RB_TEST_OUT": str(tmp_path / "worked"),
        "PYTHONPATH": str(tmp_path),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "riverboat.cli", "worker", "rb_test_worker:client", *args],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        **popen,
    )


def _query(pg_url: str, schema: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        return conn.execute(sql).fetchall()


def test_two_processes_work_10000_jobs_exactly_once(
    tmp_path: Path, pg_url: str, pg_schema: str
) -> None:
    driver = PsycopgDriver(pg_url, schema=pg_schema)
    with riverboat.Client(driver) as client:
        client.insert_many(
            [riverboat.InsertManyParams({"n": n}, kind="count_me") for n in range(10_000)]
        )
    driver.close()
    procs = [_spawn(tmp_path, pg_url, pg_schema, "--exit-when-idle") for _ in range(2)]
    outputs = [proc.communicate(timeout=120)[0].decode() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs

    ids: list[int] = []
    per_process = []
    for path in tmp_path.glob("worked.*"):
        lines = path.read_text().split()
        per_process.append(len(lines))
        ids.extend(int(line) for line in lines)
    assert len(ids) == 10_000, "every job ran, and none ran twice"
    assert len(set(ids)) == 10_000
    rows = _query(
        pg_url,
        pg_schema,
        "SELECT state::text, attempt, count(*) FROM river_job GROUP BY 1, 2",
    )
    assert rows == [("completed", 1, 10_000)]
    print("jobs per process:", per_process)


def test_sigkill_mid_job_leaves_running_jobs_for_the_rescuer(
    tmp_path: Path, pg_url: str, pg_schema: str
) -> None:
    driver = PsycopgDriver(pg_url, schema=pg_schema)
    with riverboat.Client(driver) as client:
        client.insert_many([riverboat.InsertManyParams({}, kind="count_me") for _ in range(200)])
        client.insert_many([riverboat.InsertManyParams({}, kind="hang") for _ in range(5)])
    driver.close()
    proc = _spawn(tmp_path, pg_url, pg_schema)
    try:
        wait_until(
            lambda: (
                dict(
                    _query(
                        pg_url, pg_schema, "SELECT state::text, count(*) FROM river_job GROUP BY 1"
                    )
                )
                == {"completed": 200, "running": 5}
            ),
            timeout=30,
            poll=0.05,
            what="200 jobs completed and 5 hung running in the worker",
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    after = dict(
        _query(pg_url, pg_schema, "SELECT state::text, count(*) FROM river_job GROUP BY 1")
    )
    # What was written stays written; the hung jobs stay running until the rescuer
    # (leadership) retries them; nothing disappeared.
    assert after == {"completed": 200, "running": 5}
    worked = sum(len(p.read_text().split()) for p in tmp_path.glob("worked.*"))
    assert worked == 200


def test_two_processes_on_one_sqlite_file_work_5000_jobs_exactly_once(
    tmp_path: Path, sqlite_url: str
) -> None:
    from riverboat.drivers.sqlite import SqliteDriver

    driver = SqliteDriver(sqlite_url)
    with riverboat.Client(driver) as client:
        client.insert_many(
            [riverboat.InsertManyParams({"n": n}, kind="count_me") for n in range(5_000)]
        )
    procs = [_spawn(tmp_path, sqlite_url, "", "--exit-when-idle") for _ in range(2)]
    outputs = [proc.communicate(timeout=120)[0].decode() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    # SQLITE_BUSY is retried inside the driver; it must never reach a log or a caller.
    assert not any("database is locked" in out for out in outputs), outputs
    ids = [int(x) for p in tmp_path.glob("worked.*") for x in p.read_text().split()]
    assert len(ids) == 5_000 and len(set(ids)) == 5_000
    driver.close()
    from riverboat.drivers._sqlite_module import sqlite_module

    conn = sqlite_module().connect(sqlite_url.removeprefix("sqlite:///"))
    try:
        counts = conn.execute(
            "SELECT state, attempt, count(*) FROM river_job GROUP BY 1, 2"
        ).fetchall()
    finally:
        conn.close()
    assert counts == [("completed", 1, 5_000)]


def _spawned_children(pid: int) -> list[int]:
    """The worker processes ``riverboat worker --processes`` spawned (multiprocessing's
    spawn runs them as ``python -c 'from multiprocessing.spawn import spawn_main...'``)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [
        int(child)
        for child in children
        if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
    ]


def test_a_killed_worker_process_is_reported_and_fails_the_command(
    tmp_path: Path, sqlite_url: str
) -> None:
    """One of ``--processes 2`` killed (as the OOM killer would): the command says which
    and how, the other keeps working until stopped, and the exit status is the shell's
    for SIGKILL. Before, nothing was said and the command exited 0."""
    proc = _spawn(tmp_path, sqlite_url, "", "--processes", "2")
    try:
        wait_until(lambda: len(_spawned_children(proc.pid)) == 2)
        children = _spawned_children(proc.pid)
        os.kill(children[0], signal.SIGKILL)
        wait_until(lambda: len(_spawned_children(proc.pid)) == 1)
        # The other one works a job, so it is up (its SIGTERM handler installed).
        with riverboat.Client(sqlite_url) as client:
            client.insert({}, kind="count_me")
        wait_until(lambda: list(tmp_path.glob("worked.*")))
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGKILL, output
    assert (
        f"riverboat worker: process 1 of 2 (pid {children[0]}) killed by signal SIGKILL" in output
    ), output
    assert "1 still running" in output, output


def test_ctrl_c_soft_stops_every_worker_process(tmp_path: Path, sqlite_url: str) -> None:
    """Ctrl-C reaches the terminal's whole process group. The worker processes were in
    it, so each got SIGINT from the terminal and again from the command, which forwards
    it: two signals, a hard stop, and the running jobs handed back unfinished. They are
    in their own process groups now: one SIGINT each, a soft stop."""
    with riverboat.Client(sqlite_url) as client:
        ids = [client.insert({}, kind="wait_for_release").job.id for _ in range(2)]
    # Its own session and process group, as a shell gives a foreground command.
    proc = _spawn(tmp_path, sqlite_url, "", "--processes", "2", start_new_session=True)
    reader = OutputReader(proc)
    try:
        for job_id in ids:
            wait_until(Path(f"{tmp_path}/worked.started.{job_id}").exists, timeout=60)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does
        # Both processes began their stop (a second signal came with the first, if any).
        first = reader.wait_for(lambda line: "stopping: waiting" in line, timeout=30)
        reader.wait_for(lambda line: "stopping: waiting" in line, timeout=30, start=first + 1)
        (tmp_path / "worked.release").touch()
        proc.wait(timeout=60)
        reader.join()
    finally:
        if proc.poll() is None:
            proc.kill()
    output = reader.text()
    assert proc.returncode == 0, output
    assert "stopping now" not in output, output
    assert all((tmp_path / f"worked.done.{job_id}").exists() for job_id in ids), output
    with riverboat.Client(sqlite_url) as client:
        assert {client.job_get(i).state for i in ids} == {riverboat.JobState.COMPLETED}


def test_worker_processes_stop_when_the_command_is_killed(tmp_path: Path, sqlite_url: str) -> None:
    """SIGKILL of ``riverboat worker --processes 2`` itself (nothing to forward a stop)
    left its worker processes working on with nobody to stop them; now the kernel sends
    each a SIGTERM, a soft stop, when the command dies."""
    proc = _spawn(tmp_path, sqlite_url, "", "--processes", "2", start_new_session=True)
    reader = OutputReader(proc)
    try:
        first = reader.wait_for(lambda line: " started: queues" in line, timeout=60)
        reader.wait_for(lambda line: " started: queues" in line, timeout=60, start=first + 1)
        children = _spawned_children(proc.pid)
        assert len(children) == 2
        proc.kill()
        proc.wait(timeout=10)
        wait_until(
            lambda: not any(_alive(pid) for pid in children),
            timeout=60,
            what="the worker processes stopped",
        )
        reader.join()
    finally:
        for pid in _spawned_children(proc.pid) if proc.poll() is None else []:
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    assert reader.text().count("stopped cleanly") == 2, reader.text()


def _alive(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init to reap it)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def test_a_worker_process_stuck_starting_is_killed_by_a_second_stop(
    tmp_path: Path, sqlite_url: str
) -> None:
    """A worker process ignores stop signals until its handlers are in place; the
    command counts them meanwhile. One stuck in its client's factory was then beyond
    Ctrl-C and SIGTERM: the command waited for ever. A second stop (a hard stop) kills
    a process that has not started yet: it holds no job."""
    (tmp_path / "rb_test_worker.py").write_text(textwrap.dedent(WORKER_MODULE))
    proc = subprocess.Popen(
        [sys.executable, "-m", "riverboat.cli", "worker", "rb_test_worker:stuck_client",
         "--processes", "2"],
        env={**os.environ, "RB_TEST_URL": sqlite_url, "RB_TEST_SCHEMA": "",
             "RB_TEST_OUT": str(tmp_path / "worked"), "PYTHONPATH": str(tmp_path)},
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(lambda: len(_spawned_children(proc.pid)) == 2)
        children = _spawned_children(proc.pid)
        wait_until(
            lambda: all((tmp_path / f"worked.stuck.{pid}").exists() for pid in children),
            what="the worker processes are in their factory",
        )
        reader = OutputReader(proc)
        os.killpg(proc.pid, signal.SIGINT)
        # Each second signal after the command said what the first did (two at once may
        # merge into one, as pending signals do).
        first = reader.wait_for(lambda line: "is still starting" in line, timeout=30)
        reader.wait_for(lambda line: "is still starting" in line, timeout=30, start=first + 1)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
        reader.join()
        output = reader.text()
    finally:
        if proc.poll() is None:
            proc.kill()
            for pid in _spawned_children(proc.pid):
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGKILL, output
    assert output.count("was still starting: killed") == 2, output
    assert not any(_alive(pid) for pid in children)
