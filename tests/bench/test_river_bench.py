"""The pieces of `riverboat bench --compare-river` that need no Go: reading `river
bench`'s output, the URL River's CLI gets, and the SQLite backlog both workers share."""

from __future__ import annotations

import asyncio
from pathlib import Path

from riverboat.bench.env import scratch_target
from riverboat.bench.river import (
    _riverboat_on_sqlite,
    fill_sqlite_backlog,
    parse_river_bench,
    river_bench_url,
)

OUTPUT = (
    "bench: jobs worked [          0 ], inserted [      20000 ], job/sec [        0.0 ] [0s]\n"
    "bench: jobs worked [      20000 ], inserted [          0 ], job/sec [    10000.0 ] [2s]\n"
    "bench: total jobs worked [      20000 ], total jobs inserted [      20000 ], overall "
    "job/sec [    18061.2 ], running 1.107346937s\n"
)


def test_river_bench_output_is_read_from_its_last_line() -> None:
    assert parse_river_bench(OUTPUT) == (20000, 18061.2)
    assert parse_river_bench("Error: error vacuuming") is None


def test_river_cli_gets_a_pgx_url_with_the_scratch_schema_on_its_search_path() -> None:
    assert (
        river_bench_url("postgresql://u@/db?host=/tmp&port=5", "s1")
        == "postgres://u@/db?host=/tmp&port=5&search_path=s1"
    )
    assert river_bench_url("postgres://u@h/db", "s1") == "postgres://u@h/db?search_path=s1"


def test_the_sqlite_backlog_is_worked_whole_by_riverboat(tmp_path: Path) -> None:
    with scratch_target(None, "sqlite") as target:
        assert target.sqlite_path is not None
        fill_sqlite_backlog(target.sqlite_path, 300)
        fill_sqlite_backlog(target.sqlite_path, 300)  # emptied first: still 300
        done, wall, cpu = asyncio.run(_riverboat_on_sqlite(target.sqlite_path, 300))
    assert done == 300
    assert wall > 0 and cpu > 0
