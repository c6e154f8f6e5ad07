"""What ``riverboat worker`` logs, as an operator reads it (Postgres and SQLite): one
INFO line at start with each queue's slots, a line per job at DEBUG only, a summary of
the outcomes at ``--exit-when-idle``, and a clean stop said as clean (no "lost
leadership")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability._support import REPO, insert_jobs


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    return request.getfixturevalue("sqlite_url"), None


def _drain(tmp_path: Path, url: str, schema: str | None, level: str) -> list[str]:
    env = {
        **os.environ,
        "RB_URL": url,
        "RB_SCHEMA": schema or "",
        "RB_OUT": str(tmp_path),
        "RB_RETRY_AFTER": "0.2",
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-m", "riverboat.cli", "worker", "tests.reliability._drain_app:client",
         "--exit-when-idle", "--log-level", level],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def test_info_lines_say_start_summary_and_clean_stop(
    tmp_path: Path, db: tuple[str, str | None]
) -> None:
    url, schema = db
    insert_jobs(url, schema, "drain_flaky", [{"fail_first": True} for _ in range(2)])
    insert_jobs(url, schema, "drain_flaky", [{} for _ in range(3)])
    lines = _drain(tmp_path, url, schema, "INFO")
    text = "\n".join(lines)
    assert re.search(r"INFO riverboat\.worker: worker \S+ started: queues default \(10 slots\)$",
                     text, re.M), text  # fmt: skip
    summary = [line for line in lines if " idle: worked " in line]
    assert len(summary) == 1, text
    assert summary[0].endswith("(5 completed, 2 failed, will retry)"), summary
    assert "worked 7 job attempts in " in summary[0]
    assert lines[-1].endswith("stopped cleanly"), text
    assert "lost leadership" not in text and "leadership lost" not in text
    # Nothing per job at INFO: 5 successes say nothing, each failed attempt one WARNING.
    assert not any("completed in" in line for line in lines), text
    assert sum("attempt 1/" in line and "will retry" in line for line in lines) == 2


def test_debug_has_a_line_per_job(tmp_path: Path, db: tuple[str, str | None]) -> None:
    url, schema = db
    ids = insert_jobs(url, schema, "drain_flaky", [{} for _ in range(3)])
    lines = _drain(tmp_path, url, schema, "DEBUG")
    for job_id in ids:
        assert any(
            re.search(rf"DEBUG riverboat\.executor: job {job_id} \(drain_flaky\) attempt 1/\d+ "
                      r"completed in \d+\.\d{3}s$", line)
            for line in lines
        ), job_id  # fmt: skip


def test_sigusr1_prints_every_task_and_thread_and_the_worker_carries_on(sqlite_url: str) -> None:
    """``kill -USR1`` on a worker: what each asyncio task and thread waits on, to stderr
    (riverboat.runtime.stacks); the worker keeps working and stops cleanly after."""
    import queue
    import signal
    import threading

    env = {**os.environ, "RB_URL": sqlite_url, "RB_SCHEMA": "", "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "riverboat.cli", "worker", "tests.reliability._drain_app:client",
         "--log-level", "INFO"],
        env=env,
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    stderr = worker.stderr
    assert stderr is not None

    def read() -> None:
        for line in stderr:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def read_until(marker: str) -> list[str]:
        seen: list[str] = []
        while not any(marker in line for line in seen):
            seen.append(lines.get(timeout=30))
        return seen

    try:
        read_until(" started: queues ")
        worker.send_signal(signal.SIGUSR1)
        dump = "".join(read_until("riverboat: threads")) + "".join(read_until("File "))
        assert re.search(r"riverboat: \d+ asyncio tasks", dump), dump
        assert "--- task riverboat-completer" in dump, dump
        assert "Thread 0x" in dump or "Current thread 0x" in dump, dump
        assert worker.poll() is None  # still running
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        reader.join(timeout=30)  # the pipe's end ends its loop
        stderr.close()


def test_a_jobs_error_is_logged_with_its_control_characters_escaped(
    tmp_path: Path, db: tuple[str, str | None]
) -> None:
    """A failed attempt's error is the job's own text: an escape sequence in it must not
    clear the operator's screen or retitle the window, nor a carriage return overwrite
    the line (cli/_terminal.py)."""
    url, schema = db
    hostile = "bad\x1b[2J\x1b]0;owned\x07\rAll jobs completed OK\x9b"
    insert_jobs(url, schema, "drain_flaky", [{"fail_first": True, "error": hostile}])
    text = "\n".join(_drain(tmp_path, url, schema, "INFO"))
    assert not any(c in text for c in "\x1b\x07\r\x9b"), repr(text)
    assert "bad\\x1b[2J\\x1b]0;owned\\x07\\x0dAll jobs completed OK\\x9b" in text, text
