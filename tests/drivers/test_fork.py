"""A process forked from one whose driver made its pool from a URL (gunicorn --preload
with a module-level client, multiprocessing's fork) opens connections of its own and
leaves the inherited ones to the parent (drivers._fork.new_pool_after_fork)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from riverboat._sql import Query, Statement
from riverboat.drivers.psycopg import AsyncPsycopgDriver, PsycopgDriver
from riverboat.drivers.sqlite import AsyncSqliteDriver, SqliteDriver

BACKEND_PID = Statement(Query("backend_pid", "SELECT pg_backend_pid()"), {})
ONE = Statement(Query("one", "SELECT 1"), {})


def test_a_forked_child_opens_connections_of_its_own(pg_url: str) -> None:
    """A process forked from one whose driver had connected (gunicorn --preload,
    multiprocessing's fork) used the inherited connections (psycopg; asyncpg's pool is
    bound to the parent's event loop), over the sockets the parent
    still used: the two interleaved their messages ("prepared statement already
    exists" in one or the other). The child now opens its own; the parent's go on."""
    from riverboat.drivers.asyncpg import AsyncpgDriver

    sync_driver = PsycopgDriver(pg_url)
    async_driver = AsyncPsycopgDriver(pg_url)
    asyncpg_driver = AsyncpgDriver(pg_url)

    async def async_backend() -> int:
        return int((await async_driver.fetch(BACKEND_PID))[0][0])

    async def asyncpg_backend() -> int:
        return int((await asyncpg_driver.fetch(BACKEND_PID))[0][0])

    def backends() -> list[int]:
        return [int(sync_driver.fetch(BACKEND_PID)[0][0]) for _ in range(30)]

    loop = asyncio.new_event_loop()
    try:
        parent = {
            *backends(),
            *(loop.run_until_complete(f()) for f in (async_backend, asyncpg_backend)),
        }
        results_r, results_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report through the pipe, never return to pytest
            try:
                found = {*backends(), *(asyncio.run(f()) for f in (async_backend, asyncpg_backend))}
                os.write(results_w, json.dumps(sorted(found)).encode())
            finally:
                os._exit(0)
        os.close(results_w)
        parent_again = {
            *backends(),
            *(loop.run_until_complete(f()) for f in (async_backend, asyncpg_backend)),
        }
        with os.fdopen(results_r) as results:
            child = set(json.loads(results.read() or "[]"))
        os.waitpid(pid, 0)
        # The parent's statements after the fork ran (on its own sessions, not the child's).
        assert child and not child & (parent | parent_again)
    finally:
        loop.run_until_complete(async_driver.close())
        loop.run_until_complete(asyncpg_driver.close())
        loop.close()
        sync_driver.close()


def test_a_forked_child_opens_the_sqlite_file_again(tmp_path: Path) -> None:
    """SQLite's locks are per process, and a connection used across fork() can corrupt
    the file; the async driver's thread is not in the child, so each of its statements
    there waited for ever."""
    path = tmp_path / "fork.sqlite3"
    sync_driver = SqliteDriver(str(path))
    async_driver = AsyncSqliteDriver(str(path))
    loop = asyncio.new_event_loop()
    try:
        sync_driver.fetch(ONE)
        loop.run_until_complete(async_driver.fetch(ONE))
        opened = sync_driver.stats.connections_opened + async_driver.stats.connections_opened
        results_r, results_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report through the pipe, never return to pytest
            try:
                sync_driver.fetch(ONE)
                asyncio.run(asyncio.wait_for(async_driver.fetch(ONE), 10))
                now = sync_driver.stats.connections_opened
                now += async_driver.stats.connections_opened
                os.write(results_w, json.dumps(now - opened).encode())
            finally:
                os._exit(0)
        os.close(results_w)
        sync_driver.fetch(ONE)
        loop.run_until_complete(async_driver.fetch(ONE))
        with os.fdopen(results_r) as results:
            assert json.loads(results.read() or "null") == 2  # one each, in the child
        os.waitpid(pid, 0)
    finally:
        loop.run_until_complete(async_driver.close())
        loop.close()
        sync_driver.close()


def test_an_attached_in_memory_schema_is_kept_in_a_forked_child(tmp_path: Path) -> None:
    """A schema attached as an in-memory database exists only in the copy the child
    inherited: opened again there, it was empty ("no such table")."""
    driver = SqliteDriver(str(tmp_path / "main.sqlite3"), schema="s", attach={"s": ":memory:"})
    try:
        driver.execute(Statement(Query("make", "CREATE TABLE s.t (x INTEGER)"), {}))
        driver.execute(Statement(Query("fill", "INSERT INTO s.t VALUES (7)"), {}))
        results_r, results_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report through the pipe, never return to pytest
            try:
                rows = driver.fetch(Statement(Query("read", "SELECT x FROM s.t"), {}))
                os.write(results_w, json.dumps([list(r) for r in rows]).encode())
            finally:
                os._exit(0)
        os.close(results_w)
        with os.fdopen(results_r) as results:
            assert json.loads(results.read() or "null") == [[7]]
        os.waitpid(pid, 0)
    finally:
        driver.close()
