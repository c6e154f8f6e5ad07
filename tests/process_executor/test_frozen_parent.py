"""A worker frozen mid-job (SIGSTOP, a paused VM) with a job in a child process: its
registry row goes stale, the leader rescues the job after ``dead_after`` and another
worker runs it. The child is not frozen, and ran its attempt beside the new one until
the worker woke; now it leaves the job once its worker has said nothing for half of
``dead_after`` (runtime/process_child.py). Real processes, Postgres and SQLite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import riverboat
from tests.process_executor.test_process_executor import _alive
from tests.reliability._support import REPO
from tests.runtime.dbs import Db, any_db  # noqa: F401  (the fixture)
from tests.waiting import wait_until

WORKER = textwrap.dedent(
    """
    import asyncio, sys
    import riverboat
    from riverboat import QueueConfig, Workers
    from tests.process_executor import jobs

    url, schema = sys.argv[1], sys.argv[2] or None
    workers = Workers()
    workers.register("hang")(jobs.hang)

    async def main() -> None:
        client = riverboat.AsyncClient(
            url,
            schema=schema,
            queues={"default": QueueConfig(executor="process", max_workers=1)},
            workers=workers,
            heartbeat_interval=0.3,
            dead_after=2.0,
            fetch_poll_interval=0.1,
        )
        async with client:
            await client.start()
            await asyncio.Event().wait()

    asyncio.run(main())
    """
)


def test_a_frozen_workers_child_leaves_its_job(any_db: Db, tmp_path: Path) -> None:  # noqa: F811
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        job = client.insert({"dir": str(tmp_path), "seconds": 120}, kind="hang").job
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen(
        [sys.executable, str(script), any_db.url, any_db.schema or ""],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        started = tmp_path / f"started-{job.id}-1"
        wait_until(started.exists, timeout=60, what="the job started in a child")
        child = int(started.read_text())
        worker.send_signal(signal.SIGSTOP)
        # The child's lease is half of dead_after (1 s); well before the leader of
        # another worker could hand the job on, the child is gone.
        wait_until(lambda: not _alive(child), timeout=30, what="the child left its job")
        assert worker.poll() is None  # the worker itself is only frozen
    finally:
        worker.send_signal(signal.SIGCONT)
        worker.kill()
        _, err = worker.communicate(timeout=30)
    assert b"said nothing for" in err, err.decode()[-2000:]


def test_the_pool_and_the_child_agree_on_the_lease_exit_status() -> None:
    from riverboat.runtime import process_child, process_pool

    assert process_child.LEASE_EXPIRED_EXIT == process_pool.LEASE_EXPIRED_EXIT
    assert "frozen?" in process_pool.describe_exit(process_pool.LEASE_EXPIRED_EXIT)


# A 1 s lease the worker's pings must meet: run apart from the busy suite (tests/conftest.py).
@pytest.mark.serial
async def test_a_job_holding_the_gil_past_the_lease_is_not_left(any_db: Db) -> None:  # noqa: F811
    """Its worker is alive and sent its messages; the child's threads could not read
    them while the job held the GIL. They wait in the pipe: the child does not leave."""
    from riverboat import JobState, QueueConfig, Workers
    from tests.process_executor import jobs

    workers = Workers()
    workers.register("hold_gil")(jobs.hold_gil)
    client = riverboat.AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(executor="process", max_workers=1)},
        workers=workers,
        heartbeat_interval=0.3,
        dead_after=2.0,  # the child's lease: 1 s, a third of the job's hold
        fetch_poll_interval=0.1,
    )
    async with client:
        job = (await client.insert({"seconds": 3}, kind="hold_gil")).job
        await client.start()
        try:
            done = await client.job_wait(job.id, timeout=60)
        finally:
            await client.stop()
    assert done.state is JobState.COMPLETED and done.attempt == 1, done.errors
