"""``--exit-when-idle`` drains for real (issue #13.4), on Postgres and SQLite: retries
due within the idle horizon are waited for and worked; work due later is left and
logged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability._support import (
    REPO,
    OutputReader,
    executions,
    insert_jobs,
    job_table,
)


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    return request.getfixturevalue("sqlite_url"), None


def _drain(out: Path, url: str, schema: str | None) -> OutputReader:
    env = {
        **os.environ,
        "RB_URL": url,
        "RB_SCHEMA": schema or "",
        "RB_OUT": str(out),
        "PYTHONPATH": str(REPO),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "riverboat.cli",
            "worker",
            "tests.reliability._drain_app:client",
            "--exit-when-idle",
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return OutputReader(proc)


def test_exit_when_idle_waits_for_retries_due_soon(
    tmp_path: Path, db: tuple[str, str | None]
) -> None:
    url, schema = db
    flaky = insert_jobs(url, schema, "drain_flaky", [{"fail_first": True} for _ in range(10)])
    fine = insert_jobs(url, schema, "drain_flaky", [{} for _ in range(10)])
    out = _drain(tmp_path, url, schema)
    assert out.proc.wait(60) == 0, out.text()
    out.join()
    table = job_table(url, schema)
    assert {table[j][:2] for j in fine} == {("completed", 1)}, table
    assert {table[j][:2] for j in flaky} == {("completed", 2)}, table
    assert set(executions(tmp_path)) == set(flaky + fine)


def test_exit_when_idle_leaves_later_work_and_says_so(
    tmp_path: Path, db: tuple[str, str | None]
) -> None:
    url, schema = db
    flaky = insert_jobs(url, schema, "drain_flaky", [{"fail_first": True} for _ in range(3)])
    (later,) = insert_jobs(url, schema, "drain_later", [{}])
    out = _drain(tmp_path, url, schema)
    assert out.proc.wait(60) == 0, out.text()
    out.join()
    table = job_table(url, schema)
    assert {table[j][:2] for j in flaky} == {("completed", 2)}, table
    assert table[later][:2] == ("retryable", 1)
    assert "left for later: 1 retryable" in out.text()


async def test_a_database_call_failing_during_the_drain_check_is_asked_again(
    pg_url: str, pg_schema: str
) -> None:
    """The drain check's question fails (here the network stops answering, and the
    question runs into the runtime's call deadline: without one it waited for ever):
    the check says "not drained" and the next asks again. It raised, so
    ``run_until_idle`` and ``riverboat worker --exit-when-idle`` ended with the error
    though every job was done (a dropped connection did it too)."""
    import riverboat
    from tests.reliability._support import FreezingProxy
    from tests.waiting import wait_until_async

    port = int(pg_url.rsplit(":", 1)[1].split("/", 1)[0])
    proxy = FreezingProxy("127.0.0.1", port).start()
    try:
        client = riverboat.AsyncClient(
            proxy.url(pg_url),
            schema=pg_schema,
            queues={"default": riverboat.QueueConfig()},
            db_call_timeout=1.0,
        )
        async with client:
            await client.start()
            runtime = client.runtime
            await wait_until_async(runtime.drained, timeout=20, what="drained at first")
            proxy.freeze(new_too=True)
            assert await runtime.drained() is False
            proxy.thaw()
            await wait_until_async(runtime.drained, timeout=20, what="drained, the network back")
            await client.stop()
    finally:
        proxy.close()
