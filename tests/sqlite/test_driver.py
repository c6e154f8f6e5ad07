"""The SQLite drivers themselves: URLs, pragmas, transactions, errors, async."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from riverboat import AsyncClient, DriverError, InvalidInputError
from riverboat._sql import Query, Statement
from riverboat.drivers.base import AsyncDriver, Driver
from riverboat.drivers.sqlite import AsyncSqliteDriver, SqliteDriver, sqlite_path_from_url
from tests.sqlite.helpers import query, raw


def sql(text: str, **params: object) -> Statement:
    return Statement(Query("test", text), params)


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///relative/db.sqlite3", "relative/db.sqlite3"),
        ("sqlite:////abs/db.sqlite3", "/abs/db.sqlite3"),
        ("sqlite:///:memory:", ":memory:"),
        ("plain/path.db", "plain/path.db"),
        (Path("/x/y.db"), "/x/y.db"),
    ],
)
def test_url_forms(url: str, path: str) -> None:
    assert sqlite_path_from_url(url) == path


@pytest.mark.parametrize("url", ["sqlite://host/db", "sqlite:///", "sqlite:///db?mode=ro", ""])
def test_bad_urls(url: str) -> None:
    with pytest.raises(InvalidInputError):
        sqlite_path_from_url(url)


def test_pragmas_and_protocol(sqlite_url: str) -> None:
    with SqliteDriver(sqlite_url) as driver:
        conforms: Driver = driver  # the protocol, checked by mypy
        assert conforms.capabilities.sync
        assert driver.capabilities.listen is False and driver.capabilities.sync
        assert driver.dialect.name == "sqlite"
        assert driver.fetch(sql("PRAGMA journal_mode")) == [("wal",)]
        assert driver.fetch(sql("PRAGMA synchronous")) == [(1,)]  # NORMAL
        assert driver.fetch(sql("PRAGMA foreign_keys")) == [(1,)]
        assert driver.fetch(sql("PRAGMA busy_timeout")) == [(10000,)]
        assert driver.fetch(driver.dialect.ping()) == [(1,)]


def test_memory_database(tmp_path: Path) -> None:
    from riverboat.migrations import Migrator

    with SqliteDriver("sqlite:///:memory:") as driver:
        Migrator(driver).up()
        assert driver.fetch(sql("SELECT count(*) FROM river_job")) == [(0,)]


def test_transaction_commits_and_rolls_back(sqlite_url: str) -> None:
    with SqliteDriver(sqlite_url) as driver:
        with driver.transaction() as tx:
            tx.execute(sql("INSERT INTO river_queue (name) VALUES ('a')"))
        with pytest.raises(RuntimeError), driver.transaction() as tx:
            tx.execute(sql("INSERT INTO river_queue (name) VALUES ('b')"))
            raise RuntimeError("abort")
        assert driver.fetch(sql("SELECT name FROM river_queue")) == [("a",)]
        # The driver is usable (not stuck in a transaction) after the rollback.
        assert driver.execute(sql("DELETE FROM river_queue")) == 1


def test_transaction_takes_the_write_lock_up_front(sqlite_url: str) -> None:
    with SqliteDriver(sqlite_url) as driver, driver.transaction():
        other = raw(sqlite_url)
        try:
            other.execute("PRAGMA busy_timeout = 0")
            with pytest.raises(Exception, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        finally:
            other.close()


def test_errors_are_translated(sqlite_url: str) -> None:
    with SqliteDriver(sqlite_url) as driver:
        with pytest.raises(DriverError) as info:
            driver.execute(sql("INSERT INTO river_job (kind, state) VALUES ('k', 'nope')"))
        assert "CHECK" in str(info.value)
        assert info.value.__cause__ is not None
        with pytest.raises(DriverError):
            driver.fetch(sql("SELECT * FROM no_such_table"))
        with pytest.raises(DriverError), driver.transaction() as tx:
            tx.execute(sql("INSERT INTO no_such_table VALUES (1)"))
        with pytest.raises(TypeError):
            driver.wrap(object())
    with pytest.raises(DriverError, match="closed"):
        driver.fetch(sql("SELECT 1"))


def test_execute_script_is_atomic(sqlite_url: str) -> None:
    with SqliteDriver(sqlite_url) as driver:
        with pytest.raises(DriverError):
            driver.execute_script(
                "INSERT INTO river_queue (name) VALUES ('x; y');\nINSERT INTO nope VALUES (1);"
            )
        assert driver.fetch(sql("SELECT count(*) FROM river_queue")) == [(0,)]
        driver.execute_script("INSERT INTO river_queue (name) VALUES ('x; y'); -- done;\n")
        with driver.transaction():
            driver.execute_script("INSERT INTO river_queue (name) VALUES ('z');")
        assert query(sqlite_url, "SELECT name FROM river_queue ORDER BY name") == [
            ("x; y",),
            ("z",),
        ]


def test_default_attached_schema_file(tmp_path: Path) -> None:
    from riverboat import Client
    from riverboat.migrations import Migrator

    url = f"sqlite:///{tmp_path / 'app.sqlite3'}"
    with SqliteDriver(url, schema="jobs") as driver:
        Migrator(driver).up()
        job = Client(driver).insert({"a": 1}, kind="attached").job
        assert job.args == {"a": 1}
    attached = f"sqlite:///{tmp_path / 'app-jobs.sqlite3'}"
    assert query(attached, "SELECT kind FROM river_job") == [("attached",)]


async def test_async_driver_basics(sqlite_url: str) -> None:
    driver = AsyncSqliteDriver(sqlite_url)
    try:
        conforms: AsyncDriver = driver  # the protocol, checked by mypy
        assert conforms.capabilities.async_
        assert driver.capabilities.async_ and driver.capabilities.listen
        assert await driver.fetch(sql("PRAGMA journal_mode")) == [("wal",)]
        async with driver.transaction() as tx:
            await tx.execute(sql("INSERT INTO river_queue (name) VALUES ('a')"))
            # The task holding the transaction may use the driver directly too.
            assert await driver.fetch(sql("SELECT count(*) FROM river_queue")) == [(1,)]
        with pytest.raises(ZeroDivisionError):
            async with driver.transaction() as tx:
                await tx.execute(sql("INSERT INTO river_queue (name) VALUES ('b')"))
                _ = 1 / 0
        assert await driver.fetch(sql("SELECT name FROM river_queue")) == [("a",)]
        with pytest.raises(DriverError):
            await driver.fetch(sql("SELECT * FROM nope"))
        listener = await driver.listener()  # polls the river_notification outbox
        await listener.close()
        await driver.execute_script("DELETE FROM river_queue; DELETE FROM river_leader;")
    finally:
        await driver.close()
    with pytest.raises(DriverError, match="closed"):
        await driver.fetch(sql("SELECT 1"))


async def test_async_transactions_serialise_tasks(sqlite_url: str) -> None:
    driver = AsyncSqliteDriver(sqlite_url)
    order: list[str] = []

    async def writer(name: str) -> None:
        async with driver.transaction() as tx:
            order.append(f"{name}-begin")
            await tx.execute(sql("INSERT INTO river_queue (name) VALUES (:n)", n=name))
            await asyncio.sleep(0.01)  # yield inside the transaction: others try to begin
            order.append(f"{name}-end")

    try:
        await asyncio.gather(*(writer(f"w{i}") for i in range(5)))
        # No interleaving: every begin is followed by its own end.
        assert all(
            order[i].split("-")[0] == order[i + 1].split("-")[0] for i in range(0, len(order), 2)
        )
        assert await driver.fetch(sql("SELECT count(*) FROM river_queue")) == [(5,)]
    finally:
        await driver.close()


async def test_async_cancelled_transaction_rolls_back(sqlite_url: str) -> None:
    driver = AsyncSqliteDriver(sqlite_url)
    started = asyncio.Event()

    async def slow() -> None:
        async with driver.transaction() as tx:
            await tx.execute(sql("INSERT INTO river_queue (name) VALUES ('gone')"))
            started.set()
            await asyncio.sleep(10)

    try:
        task = asyncio.create_task(slow())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await driver.fetch(sql("SELECT count(*) FROM river_queue")) == [(0,)]
        async with AsyncClient(driver) as client:
            assert (await client.insert({}, kind="after")).job.id > 0
    finally:
        await driver.close()


def test_a_write_held_up_by_another_process_says_so_once_and_then_goes_through(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Another process holds SQLite's write lock, as one stopped inside a write
    # transaction does. (A second connection in this process would not: POSIX locks
    # belong to the process.)
    import subprocess
    import sys
    import threading

    from riverboat.drivers import sqlite as sqlite_driver
    from tests.waiting import wait_until

    monkeypatch.setattr(sqlite_driver, "_WARN_AFTER", 0.3)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); sys.stdin.readline(); "
            "c.execute('COMMIT')",
            sqlite_path_from_url(sqlite_url),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline().strip() == "locked"
        caplog.set_level("WARNING", logger="riverboat.sqlite")
        errors: list[BaseException] = []
        with SqliteDriver(sqlite_url, busy_timeout=0.05) as driver:

            def write() -> None:
                try:
                    driver.execute(sql("CREATE TABLE held_up (n integer)"))
                except BaseException as exc:  # pragma: no cover - reported below
                    errors.append(exc)

            writer = threading.Thread(target=write)
            writer.start()
            wait_until(
                lambda: any("locked by another process" in r.message for r in caplog.records),
                timeout=30,
                what="the warning",
            )
            assert writer.is_alive()  # still waiting, not failed
            holder.stdin.write("go\n")
            holder.stdin.flush()
            writer.join(timeout=30)
            assert not writer.is_alive() and errors == []
            assert driver.fetch(sql("SELECT count(*) FROM held_up")) == [(0,)]
    finally:
        holder.kill()
        holder.wait()
        holder.stdin.close()
        holder.stdout.close()
    warnings = [r for r in caplog.records if "locked by another process" in r.message]
    assert len(warnings) == 1 and "still retrying" in warnings[0].message
