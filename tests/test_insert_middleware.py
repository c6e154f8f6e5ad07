"""``insert_many`` / ``insert_many_sync`` middleware (River's ``JobInsertMiddleware``):
wraps each insert call's whole batch, may change its jobs before, sees the rows and the
skipped-as-duplicate flags after; on every insert form, periodic runs included, sync
and async, on Postgres and SQLite."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

import riverboat
from riverboat import (
    NEVER,
    AsyncClient,
    Client,
    InsertManyParams,
    InsertOpts,
    InsertResult,
    InvalidInputError,
    Job,
    PeriodicJob,
    QueueConfig,
    UniqueOpts,
    Workers,
)
from riverboat.middleware import InsertingJob, insert_hook
from tests.runtime.dbs import Db, any_db  # noqa: F401

ONCE = InsertOpts(unique_opts=UniqueOpts(by_args=True))


class Batches:
    """Records each batch (kinds in, ids and duplicate flags out) and changes its jobs:
    priority 3 and a metadata key, as a tenant or trace id would be set."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.batches: list[tuple[list[str], list[tuple[int, bool]]]] = []

    def _before(self, jobs: list[InsertingJob]) -> list[str]:
        self.log.append("batch:before")
        for job in jobs:
            job.priority = 3
            job.metadata["batch_size"] = len(jobs)
        return [job.kind for job in jobs]

    def _after(self, kinds: list[str], results: list[InsertResult]) -> list[InsertResult]:
        self.log.append("batch:after")
        self.batches.append((kinds, [(r.job.id, r.unique_skipped_as_duplicate) for r in results]))
        return results


class AsyncBatches(Batches):
    async def insert_many(self, jobs: list[InsertingJob], call_next: Any) -> list[InsertResult]:
        kinds = self._before(jobs)
        return self._after(kinds, await call_next())


class SyncBatches(Batches):
    def insert_many_sync(self, jobs: list[InsertingJob], call_next: Any) -> list[InsertResult]:
        kinds = self._before(jobs)
        return self._after(kinds, call_next())


@asynccontextmanager
async def _async_conn(db: Db) -> AsyncIterator[Any]:
    """A connection of the caller's own for the async client's *_tx forms, committed on
    leaving."""
    if db.dialect == "postgres":
        import psycopg

        async with await psycopg.AsyncConnection.connect(db.url) as conn:
            await conn.execute(f'SET search_path TO "{db.schema}"')
            yield conn
            await conn.commit()
    else:
        with db.connect() as conn:
            yield conn
            conn.commit()


def _hook(log: list[str]) -> Any:
    def begin(job: InsertingJob) -> None:
        log.append("insert_begin")
        job.metadata["hook_saw_priority"] = job.priority  # runs inside the batch middleware

    return insert_hook(begin)


async def test_async_client_every_insert_form(any_db: Db) -> None:  # noqa: F811
    log: list[str] = []
    mw = AsyncBatches(log)
    async with AsyncClient(any_db.url, schema=any_db.schema, middleware=[mw, _hook(log)]) as client:
        one = await client.insert({"n": 1}, ONCE, kind="job_a")
        assert log == ["batch:before", "insert_begin", "batch:after"]
        assert one.job.priority == 3
        # (SQLite's unique jobs also carry River's river:unique_nonce.)
        assert one.job.metadata.items() >= {"batch_size": 1, "hook_saw_priority": 3}.items()

        many = await client.insert_many(
            [
                InsertManyParams({"n": 1}, ONCE, kind="job_a"),  # a duplicate of `one`
                InsertManyParams({"n": 2}, kind="job_b"),
            ]
        )
        assert [r.unique_skipped_as_duplicate for r in many] == [True, False]
        assert mw.batches[1] == (["job_a", "job_b"], [(one.job.id, True), (many[1].job.id, False)])
        assert many[1].job.metadata == {"batch_size": 2, "hook_saw_priority": 3}

        async with _async_conn(any_db) as conn:
            in_tx = await client.insert_tx(conn, {"n": 3}, kind="job_c")
            in_tx_many = await client.insert_many_tx(conn, [InsertManyParams({}, kind="job_d")])
            fast_tx = await client.insert_many_fast_tx(conn, [InsertManyParams({}, kind="job_d")])
            assert fast_tx == 1
        assert in_tx.job.priority == in_tx_many[0].job.priority == 3

        count = await client.insert_many_fast(
            [InsertManyParams({"n": i}, kind="job_e") for i in range(3)]
        )
        assert count == 3
        assert mw.batches[-1] == (["job_e", "job_e", "job_e"], [])  # the fast path returns no rows
        fast_rows = (await client.job_list(kinds=["job_e"])).jobs
        assert {j.priority for j in fast_rows} == {3}
        assert len(mw.batches) == 6


def test_sync_client_every_insert_form(any_db: Db) -> None:  # noqa: F811
    log: list[str] = []
    mw = SyncBatches(log)
    with Client(any_db.url, schema=any_db.schema, middleware=[mw, _hook(log)]) as client:
        one = client.insert({"n": 1}, ONCE, kind="job_a")
        again = client.insert({"n": 1}, ONCE, kind="job_a")
        assert again.unique_skipped_as_duplicate and again.job.id == one.job.id
        assert mw.batches == [(["job_a"], [(one.job.id, False)]), (["job_a"], [(one.job.id, True)])]
        assert log == ["batch:before", "insert_begin", "batch:after"] * 2

        with any_db.connect() as conn:
            rows = client.insert_many_tx(
                conn,
                [
                    InsertManyParams({"n": 2}, kind="job_b"),
                    InsertManyParams({"n": 3}, kind="job_b"),
                ],
            )
            assert client.insert_many_fast_tx(conn, [InsertManyParams({}, kind="job_c")]) == 1
            conn.rollback()  # the middleware's view of a rolled-back batch is its own
        assert [r.job.priority for r in rows] == [3, 3]
        assert client.job_list(kinds=["job_b", "job_c"]).jobs == []
        assert client.insert_many([InsertManyParams({}, kind="job_d")])[0].job.priority == 3


def test_a_middleware_written_for_the_other_client_still_runs(any_db: Db) -> None:  # noqa: F811
    log: list[str] = []
    with Client(any_db.url, schema=any_db.schema, middleware=[AsyncBatches(log)]) as client:
        assert client.insert({}, kind="job_a").job.priority == 3  # async layer, own event loop


async def test_a_sync_middleware_on_the_async_client(any_db: Db) -> None:  # noqa: F811
    log: list[str] = []
    threads: list[str] = []

    class Where(SyncBatches):
        def insert_many_sync(self, jobs: list[InsertingJob], call_next: Any) -> list[InsertResult]:
            threads.append(threading.current_thread().name)
            return super().insert_many_sync(jobs, call_next)

    async with AsyncClient(any_db.url, schema=any_db.schema, middleware=[Where(log)]) as client:
        result = await client.insert({}, kind="job_a")
    assert result.job.priority == 3 and log == ["batch:before", "batch:after"]
    assert threads != [threading.current_thread().name]  # it ran off the event loop


async def test_changes_are_checked_and_results_required(sqlite_url: str) -> None:
    class BadQueue:
        async def insert_many(self, jobs: list[InsertingJob], call_next: Any) -> Any:
            jobs[0].queue = "Not A Queue"
            return await call_next()

    class Swallows:
        async def insert_many(self, jobs: list[InsertingJob], call_next: Any) -> Any:
            await call_next()
            return None

    async with AsyncClient(sqlite_url, middleware=[BadQueue()]) as client:
        with pytest.raises(InvalidInputError, match="queue"):
            await client.insert({}, kind="job_a")
        assert (await client.job_list()).jobs == []  # refused before anything was written
    async with AsyncClient(sqlite_url, middleware=[Swallows()]) as client:
        with pytest.raises(InvalidInputError, match="must return call_next"):
            await client.insert({}, kind="job_a")

    class Drops:
        async def insert_many(self, jobs: list[InsertingJob], call_next: Any) -> Any:
            del jobs[1:]
            return await call_next()

    class DropsSync:
        def insert_many_sync(self, jobs: list[InsertingJob], call_next: Any) -> Any:
            jobs.append(jobs[0])
            return call_next()

    batch = [InsertManyParams({"n": n}, kind="job_b") for n in range(3)]
    for dropping in (Drops(), DropsSync()):
        async with AsyncClient(sqlite_url, middleware=[dropping]) as client:
            # Was a ValueError from zip(); each result answers one job given.
            with pytest.raises(InvalidInputError, match="not add or remove any"):
                await client.insert_many(batch)
            assert (await client.job_list(kinds=["job_b"])).jobs == []
    with Client(sqlite_url, middleware=[DropsSync()]) as sync_client:
        with pytest.raises(InvalidInputError, match="not add or remove any"):
            sync_client.insert_many(batch)

    class SyncNamedAsync:
        def insert_many(self, jobs: Any, call_next: Any) -> Any: ...

    with pytest.raises(InvalidInputError, match="insert_many must be async def"):
        AsyncClient(sqlite_url, middleware=[SyncNamedAsync()])


@dataclass
class Report:
    kind: ClassVar[str] = "nightly_report"
    day: int


async def test_periodic_runs_pass_through_the_batch_middleware(any_db: Db) -> None:  # noqa: F811
    log: list[str] = []
    mw = SyncBatches(log)  # a sync client's middleware, run by the async leader
    worked = asyncio.Event()
    seen: list[Job[Report]] = []
    workers = Workers()

    @workers.register(Report)
    async def report(job: Job[Report]) -> None:
        seen.append(job)
        worked.set()

    client = AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig()},
        workers=workers,
        middleware=[mw],
        periodic_jobs=[
            # NEVER: the run on start only; an hourly schedule also ran its tick (a second
            # batch, or two jobs in this one) when an hour began as the leader started.
            PeriodicJob(NEVER, lambda: Report(1), run_on_start=True, id="nightly")
        ],
        fetch_poll_interval=0.1,
        maintenance=riverboat.MaintenanceConfig(start_jitter=0.0),
    )
    async with client:
        await client.start()
        await asyncio.wait_for(worked.wait(), 20)
    assert seen[0].priority == 3 and seen[0].metadata["batch_size"] == 1
    assert mw.batches == [(["nightly_report"], [(seen[0].id, False)])]
