"""The end-to-end part counts only jobs whose completion is written, with or without a
subscriber: checked against the table afterwards."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import riverboat
from riverboat.bench.e2e import run_e2e
from tests.templates import migrate_sqlite_file


@pytest.mark.parametrize("events", [False, True])
async def test_counted_jobs_are_completed_in_the_table(tmp_path: Path, events: bool) -> None:
    url = migrate_sqlite_file(tmp_path / "bench.sqlite3")

    def make_client(**kwargs: Any) -> riverboat.AsyncClient:
        return riverboat.AsyncClient(url, **kwargs)

    async def reset() -> None:
        with closing(sqlite3.connect(tmp_path / "bench.sqlite3")) as conn, conn:
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
    with closing(sqlite3.connect(tmp_path / "bench.sqlite3")) as conn:
        states = dict(conn.execute("SELECT state, count(*) FROM river_job GROUP BY state"))
    assert states == {"completed": 300}
