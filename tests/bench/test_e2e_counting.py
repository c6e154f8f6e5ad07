"""The end-to-end part counts only jobs whose completion is written, with or without a
subscriber: checked against the table afterwards.

The test's own statements go through the SQLite module riverboat uses
(``sqlite_module()``: sqlean where the standard library's SQLite is too old). Two SQLite
libraries on one file in one process don't see each other's locks: with the standard
library's ``sqlite3`` deleting rows here, the client's notifier failed with "disk I/O
error" and ``start()`` waited its whole LISTEN_WAIT (5 s, runtime/runner.py) for it."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import riverboat
from riverboat.bench.e2e import run_e2e
from riverboat.drivers._sqlite_module import sqlite_module
from tests.templates import migrate_sqlite_file


@pytest.mark.parametrize("events", [False, True])
async def test_counted_jobs_are_completed_in_the_table(tmp_path: Path, events: bool) -> None:
    url = migrate_sqlite_file(tmp_path / "bench.sqlite3")

    def make_client(**kwargs: Any) -> riverboat.AsyncClient:
        return riverboat.AsyncClient(url, **kwargs)

    async def reset() -> None:
        with closing(sqlite_module().connect(tmp_path / "bench.sqlite3")) as conn, conn:
            conn.execute("DELETE FROM river_job")

    result = await run_e2e(
        make_client,
        300,
        server_cpu=None,
        server_statements=None,
        reset=reset,
        single_inserts=5,
        events=events,
    )
    assert result.jobs == 300
    assert result.counted == (
        "completion events" if events else "jobs run, outcomes written by stop"
    )
    with closing(sqlite_module().connect(tmp_path / "bench.sqlite3")) as conn:
        states = dict(conn.execute("SELECT state, count(*) FROM river_job GROUP BY state"))
    assert states == {"completed": 300}
