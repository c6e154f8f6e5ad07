"""Reindexer: rebuild River's job indexes on the leader (River's maintenance.Reindexer).

Postgres indexes on a table with River's churn (rows inserted, updated several times and
deleted within hours) bloat: VACUUM removes dead entries, but a page only returns to use
once it is empty, so the indexes keep growing. River's leader therefore rebuilds its
``river_job`` indexes once a day,
at midnight UTC, with ``REINDEX INDEX CONCURRENTLY`` (no write lock is held). In a
mixed fleet the leader may be a riverboat client, so riverboat does what River does:

- the same indexes (:data:`REINDEXER_INDEX_NAMES_DEFAULT`, River's
  ``ReindexerIndexNamesDefault()``), those missing from the schema skipped with a warning;
- the same schedule (daily at midnight UTC, the next run computed from the previous
  scheduled time) and timeout per index (1 minute; ``-1`` or ``None`` for none). At the
  timeout the statement's task is cancelled, which psycopg and asyncpg turn into a
  cancel request to the server;
- the same artifact handling. A concurrent rebuild that is interrupted leaves an invalid
  index named ``<index>_ccnew`` (or ``_ccold``, with a number when the name is taken).
  When such an artifact exists, the index is skipped with a warning: a rebuild that
  failed once (most likely by timing out) is likely to fail again, and retrying would
  rebuild a large index every day for nothing. Only when the leader itself is stopping
  (shutdown, or leadership lost) during a rebuild does it cancel the rebuild and drop
  the artifacts that cancellation just left, so stopping never makes it skip forever.
  Artifacts left by a timeout stay, as in River, for an operator to look at and drop
  (``DROP INDEX CONCURRENTLY``).

Postgres only. On SQLite riverboat runs no reindexer: SQLite's B-trees free deleted
entries in place and reuse the space, so there is no bloat of this kind to undo, and
``REINDEX`` there cannot run concurrently: it would hold the database's one write lock
for the whole rebuild, stalling every worker. (River's SQLite driver does issue a plain
``REINDEX`` for the listed names that exist.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from riverboat._sql import Query, Statement
from riverboat.drivers.base import call_deadline
from riverboat.errors import DriverError
from riverboat.migrations._files import RawQuery
from riverboat.runtime.maintenance._service import MaintenanceContext, Service
from riverboat.runtime.maintenance.config import (
    next_midnight_utc,
    reindexer_schedule,
    validate_index_names,
)

__all__ = [
    "ARTIFACT_CLEANUP_TIMEOUT",
    "REINDEXER_INDEX_NAMES_DEFAULT",
    "REINDEXER_TIMEOUT_DEFAULT",
    "Reindexer",
    "next_midnight_utc",
    "reindexer_schedule",
]

log = logging.getLogger("riverboat.maintenance")

# River's client.go reindexerIndexNamesDefault, in its order.
REINDEXER_INDEX_NAMES_DEFAULT: tuple[str, ...] = (
    "river_job_args_index",
    "river_job_kind",
    "river_job_metadata_index",
    "river_job_pkey",
    "river_job_prioritized_fetching_index",
    "river_job_state_and_finalized_at_index",
    "river_job_unique_idx",
)
# River's ReindexerTimeoutDefault: large tables have been seen to take 45 s.
REINDEXER_TIMEOUT_DEFAULT = 60.0
# How long a stopping leader spends dropping the artifacts of the rebuild it cancelled.
ARTIFACT_CLEANUP_TIMEOUT = 15.0

# The names of the indexes in River's schema; each query below narrows them.
_SCHEMA_INDEXES = """SELECT c.relname::text
       FROM pg_catalog.pg_class c
       JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = coalesce(CAST(:schema AS text), current_schema())
         AND c.relkind = 'i'"""
_INDEXES_EXIST = Query(
    "reindexer_indexes_exist",
    f"""{_SCHEMA_INDEXES}
         AND c.relname = ANY(CAST(:names AS text[]))""",
)
# An artifact is the index's own name followed by _ccnew or _ccold and maybe a number.
_ARTIFACTS = Query(
    "reindexer_artifacts",
    f"""{_SCHEMA_INDEXES}
         AND left(c.relname, length(CAST(:index AS text))) = CAST(:index AS text)
         AND substring(c.relname FROM length(CAST(:index AS text)) + 1)
             ~ '^_cc(new|old)[0-9]*$'
       ORDER BY 1""",
)


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class Reindexer(Service):
    """Rebuilds the configured indexes at each scheduled time (see the module docs)."""

    name = "reindexer"

    def __init__(
        self,
        ctx: MaintenanceContext,
        *,
        index_names: Sequence[str] = REINDEXER_INDEX_NAMES_DEFAULT,
        schedule: Callable[[datetime], datetime] = next_midnight_utc,
        timeout: float | None = REINDEXER_TIMEOUT_DEFAULT,
    ) -> None:
        super().__init__(ctx, 24 * 3600.0)
        self.index_names = validate_index_names(index_names)
        self.schedule = schedule
        self.timeout = None if timeout is None or timeout == -1 else float(timeout)
        self.next_run_at: datetime | None = None
        # What the runs did, newest last (kept short): for tests and operators.
        self.completed_runs = 0
        self.reindexed: list[str] = []
        self.skipped: list[str] = []
        self.failed: list[str] = []

    def run_time_limit(self) -> float | None:
        # Every REINDEX has its own timeout; a run rebuilds several indexes in a row.
        return None

    async def on_start(self) -> None:
        self.next_run_at = self.schedule(datetime.now(UTC))
        log.debug("maintenance reindexer: first run at %s", self.next_run_at.isoformat())

    def next_delay(self) -> float:
        if self.next_run_at is None:
            return self.interval
        return max((self.next_run_at - datetime.now(UTC)).total_seconds(), 0.0)

    async def run_once(self) -> None:
        due = self.next_run_at
        if due is None or datetime.now(UTC) < due:
            return  # woken early: nothing is due yet
        try:
            names = await self._existing_indexes()
        except (DriverError, TimeoutError) as exc:
            log.error("maintenance reindexer: cannot list indexes (%s); next run as scheduled", exc)
            names = []
        for name in names:
            if self.stopping:
                break
            try:
                await self._reindex_one(name)
            except (DriverError, TimeoutError) as exc:
                self._remember(self.failed, name)
                log.error("maintenance reindexer: error reindexing %s: %s", name, exc)
        # From the previous scheduled time, not from now, so runs keep their cadence.
        self.next_run_at = self.schedule(due)
        self.completed_runs += 1
        log.debug(
            "maintenance reindexer: ran (%d indexes); next run at %s",
            len(names),
            self.next_run_at.isoformat(),
        )

    # -- internals ---------------------------------------------------------------------

    @property
    def _schema(self) -> str | None:
        schema = self.ctx.dialect.schema
        return schema

    async def _existing_indexes(self) -> list[str]:
        if not self.index_names:
            return []
        rows = await self.ctx.driver.fetch(
            Statement(_INDEXES_EXIST, {"schema": self._schema, "names": list(self.index_names)})
        )
        found = {row[0] for row in rows}
        missing = [name for name in self.index_names if name not in found]
        if missing:
            log.warning(
                "maintenance reindexer: configured indexes do not exist, skipped: %s "
                "(run the migrations or change reindexer_index_names)",
                ", ".join(missing),
            )
        return [name for name in self.index_names if name in found]

    async def _artifacts(self, name: str) -> list[str]:
        rows = await self.ctx.driver.fetch(
            Statement(_ARTIFACTS, {"schema": self._schema, "index": name})
        )
        return [row[0] for row in rows]

    def _qualified(self, name: str) -> str:
        schema = self._schema
        return f"{_quote(schema)}.{_quote(name)}" if schema else _quote(name)

    async def _reindex_one(self, name: str) -> None:
        artifacts = await self._artifacts(name)
        if artifacts:
            self._remember(self.skipped, name)
            log.warning(
                "maintenance reindexer: %s has artifacts of an earlier interrupted rebuild "
                "(%s), most likely one that timed out after %s; skipping it (drop them with "
                "DROP INDEX CONCURRENTLY to rebuild it again)",
                name,
                ", ".join(artifacts),
                "no limit" if self.timeout is None else f"{self.timeout:g}s",
            )
            return
        reindex = f"REINDEX INDEX CONCURRENTLY {self._qualified(name)}"
        # A rebuild takes as long as it takes (bounded by self.timeout below), not the
        # maintenance services' per-call deadline.
        with call_deadline(None):
            rebuild = asyncio.ensure_future(
                self.ctx.driver.execute(Statement(RawQuery("reindexer_reindex", reindex), {}))
            )
        stop = self._stop if self._stop is not None else asyncio.Event()
        stopped = asyncio.ensure_future(stop.wait())
        try:
            done, _ = await asyncio.wait(
                {rebuild, stopped}, timeout=self.timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stopped.cancel()
            if not rebuild.done():
                # Cancelling the statement's task makes the driver cancel it on the server.
                rebuild.cancel()
                await asyncio.wait({rebuild})
        if rebuild in done:
            rebuild.result()  # raises the database's error, if any
            self._remember(self.reindexed, name)
            log.info("maintenance reindexer: reindexed %s", name)
            return
        if stop.is_set():
            await self._drop_artifacts_after_stop(name)
            return
        raise TimeoutError(
            f"REINDEX INDEX CONCURRENTLY {name} took longer than {self.timeout:g}s and was "
            "cancelled; its artifacts make later runs skip it until they are dropped"
        )

    async def _drop_artifacts_after_stop(self, name: str) -> None:
        log.info("maintenance reindexer: stopped while rebuilding %s; dropping its artifacts", name)
        try:
            async with asyncio.timeout(ARTIFACT_CLEANUP_TIMEOUT):
                for artifact in await self._artifacts(name):
                    drop = f"DROP INDEX CONCURRENTLY IF EXISTS {self._qualified(artifact)}"
                    with call_deadline(None):  # bounded by ARTIFACT_CLEANUP_TIMEOUT
                        await self.ctx.driver.execute(
                            Statement(RawQuery("reindexer_drop_artifact", drop), {})
                        )
        except (DriverError, TimeoutError) as exc:
            log.error("maintenance reindexer: could not drop artifacts of %s: %s", name, exc)

    @staticmethod
    def _remember(names: list[str], name: str) -> None:
        names.append(name)
        del names[:-100]


def build_reindexer(ctx: MaintenanceContext) -> Reindexer | None:
    """The leader's reindexer for this context, or ``None`` when it doesn't run: turned
    off, or not Postgres (see the module docs)."""
    cfg: Any = ctx.config
    if not cfg.reindexer_enabled or ctx.dialect.name != "postgres":
        return None
    names = (
        REINDEXER_INDEX_NAMES_DEFAULT
        if cfg.reindexer_index_names is None
        else cfg.reindexer_index_names
    )
    return Reindexer(
        ctx,
        index_names=names,
        schedule=reindexer_schedule(cfg.reindexer_schedule),
        timeout=cfg.reindexer_timeout,
    )
