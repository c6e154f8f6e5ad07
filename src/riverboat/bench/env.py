"""What the benchmark measures with: drivers by name, a scratch schema or file, server CPU,
and pg_stat_statements."""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from riverboat._url import is_sqlite_url
from riverboat.errors import InvalidInputError

__all__ = ["DRIVERS", "BenchTarget", "make_async_driver", "scratch_target"]

# name -> dialect; the factory lives in make_async_driver so imports stay lazy.
DRIVERS = {
    "psycopg": "postgres",
    "asyncpg": "postgres",
    "sqlalchemy": "postgres",
    "sqlite": "sqlite",
}


@dataclass(slots=True)
class BenchTarget:
    url: str
    schema: str | None
    driver: str
    dialect: str
    sqlite_path: str | None = None


def make_async_driver(target: BenchTarget, **kwargs: Any) -> Any:
    if target.driver == "psycopg":
        from riverboat.drivers.psycopg import AsyncPsycopgDriver

        return AsyncPsycopgDriver(target.url, schema=target.schema, **kwargs)
    if target.driver == "asyncpg":
        asyncpg_driver = importlib.import_module("riverboat.drivers.asyncpg")
        return asyncpg_driver.AsyncpgDriver(target.url, schema=target.schema)
    if target.driver == "sqlalchemy":
        sa_driver = importlib.import_module("riverboat.drivers.sqlalchemy")
        url = target.url.replace("postgresql://", "postgresql+psycopg://", 1)
        return sa_driver.AsyncSqlAlchemyDriver(url, schema=target.schema)
    if target.driver == "sqlite":
        from riverboat.drivers.sqlite import AsyncSqliteDriver

        return AsyncSqliteDriver(target.url)
    raise InvalidInputError(
        "--driver", f"unknown driver {target.driver!r}; one of {sorted(DRIVERS)}"
    )


def make_sync_driver(target: BenchTarget) -> Any:
    if target.dialect == "sqlite":
        from riverboat.drivers.sqlite import SqliteDriver

        return SqliteDriver(target.url)
    from riverboat.drivers.psycopg import PsycopgDriver

    return PsycopgDriver(target.url, schema=target.schema, max_pool_size=2)


@contextmanager
def scratch_target(url: str | None, driver: str) -> Iterator[BenchTarget]:
    """A fresh, migrated schema (Postgres) or file (SQLite), removed afterwards."""
    from riverboat.migrations import up_all

    if driver not in DRIVERS:
        raise InvalidInputError("--driver", f"unknown driver {driver!r}; one of {sorted(DRIVERS)}")
    dialect = DRIVERS[driver]
    if dialect == "sqlite":
        if url is not None and not is_sqlite_url(url):
            raise InvalidInputError("--database-url", "the sqlite driver needs a sqlite:/// URL")
        tmp = tempfile.mkdtemp(prefix="riverboat-bench-")
        path = os.path.join(tmp, "bench.sqlite3")
        target = BenchTarget(f"sqlite:///{path}", None, driver, dialect, sqlite_path=path)
        sync = make_sync_driver(target)
        try:
            up_all(sync)
        finally:
            sync.close()
        try:
            yield target
        finally:
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.remove(path + suffix)
                except FileNotFoundError:
                    pass
            os.rmdir(tmp)
        return
    if not url:
        raise InvalidInputError(
            "--database-url", "give a postgresql:// URL (or set DATABASE_URL) for Postgres drivers"
        )
    from riverboat.testing import migrated_postgres_schema

    with migrated_postgres_schema(url, "riverboat_bench_") as schema:
        _without_autovacuum(url, schema)
        yield BenchTarget(url, schema, driver, dialect)


def _without_autovacuum(url: str, schema: str) -> None:
    """Autovacuum off for the scratch river_job. Every part starts from an emptied
    table, so nothing needs vacuuming; left on, a vacuum of one part's dead rows lands
    (with its CPU) in whichever part runs when the launcher wakes, once a minute."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{schema}".river_job SET (autovacuum_enabled = false)')


class ServerCpu:
    """CPU seconds used by one Postgres server's processes, read from /proc.

    Only possible when the server runs on this machine (``available``). The postmaster
    is found as the parent of the server's checkpointer; every child of it (backends,
    WAL writer, autovacuum...) is counted, so other servers on the machine are not.
    """

    def __init__(self, url: str) -> None:
        import psycopg

        self._ticks = os.sysconf("SC_CLK_TCK")
        self.postmaster: int | None = None
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'"
            ).fetchone()
        if row is not None:
            stat = _read_stat(int(row[0]))
            if stat is not None:
                self.postmaster = int(stat[1])
        self.available = self.postmaster is not None

    def seconds(self) -> float:
        """Total user+system CPU of the postmaster and its live children."""
        if self.postmaster is None:
            return 0.0
        total = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            stat = _read_stat(int(entry))
            if stat is None:
                continue
            if int(entry) == self.postmaster:
                # utime, stime, and cutime/cstime: backends that exited and were reaped.
                total += sum(int(x) for x in stat[11:15])
            elif int(stat[1]) == self.postmaster:
                total += int(stat[11]) + int(stat[12])
        return total / self._ticks


def _read_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 1 is the parent pid)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


class StatementCounter:
    """Server-side statement counts from pg_stat_statements, when it is loaded."""

    def __init__(self, url: str) -> None:
        import psycopg

        self._url = url
        self.available = False
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                conn.execute("SELECT 1 FROM pg_stat_statements LIMIT 1")
            self.available = True
        except psycopg.Error:
            self.available = False

    def total(self, schema: str) -> int:
        """Calls of statements that touched this benchmark's schema."""
        import psycopg

        with psycopg.connect(self._url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE %s",
                (f'%"{schema}".%',),
            ).fetchone()
        return int(row[0]) if row else 0
