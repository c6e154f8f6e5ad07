"""``riverboat jobs wait ID``, run as a user runs it (a real process), on Postgres and
SQLite: a job finished while it waits, the timeout and cancelled exit codes, an unknown
id."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from riverboat import Client, Job, JobState, QueueConfig, Workers, record_output
from tests.runtime.dbs import Db, any_db  # noqa: F401


def _cli(db: Db, *args: str) -> subprocess.Popen[str]:
    schema = ["--schema", db.schema] if db.schema else []
    command = [sys.executable, "-m", "riverboat.cli", "jobs", "wait", *args]
    return subprocess.Popen(
        [*command, "--database-url", db.url, *schema],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_jobs_wait(any_db: Db) -> None:  # noqa: F811
    workers = Workers()

    @workers.register("wait_cli")
    def work(job: Job[Any]) -> None:
        record_output({"done": True})

    with Client(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_poll_interval=0.1,
    ) as client:
        ok = client.insert({}, kind="wait_cli").job
        dropped = client.insert({}, kind="wait_cli").job
        client.job_cancel(dropped.id)  # not running: cancelled at once

        early = _cli(any_db, str(ok.id), "--timeout", "0.1")
        out, err = early.communicate(timeout=60)
        assert early.returncode == 3, err
        assert "still available" in err

        waiting = _cli(any_db, str(ok.id), "--json", "--timeout", "60")
        client.start()
        out, err = waiting.communicate(timeout=90)
        assert waiting.returncode == 0, err
        (job,) = json.loads(out)
        assert job["state"] == "completed" and job["metadata"]["output"] == {"done": True}

        cancelled = _cli(any_db, str(dropped.id))
        out, err = cancelled.communicate(timeout=60)
        assert cancelled.returncode == 4, err
        assert client.job_get(dropped.id).state is JobState.CANCELLED
        client.stop()

    missing = _cli(any_db, str(ok.id + 1000))
    _, err = missing.communicate(timeout=60)
    assert missing.returncode == 1
    assert err.strip() == f"riverboat: error: job {ok.id + 1000} not found"
