"""One insert pipeline: every insert path builds an InsertPlan (no I/O) and runs it with
run_insert/run_insert_count, so batching, unique twins and notification limits hold
alike for the client, the workflow insert, the periodic enqueuer and work_job; on
Postgres and SQLite."""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest

import riverboat
from riverboat import (
    AsyncClient,
    InsertOpts,
    Job,
    PeriodicJob,
    QueueConfig,
    UniqueOpts,
    Workers,
    Workflow,
)
from riverboat._client_async import AsyncClientBase
from riverboat._insert import InsertDefaults, InsertParams, resolve_insert
from riverboat._insert_plan import INSERT_BATCH_MAX, InsertPlan, NotifyLimiter
from riverboat.dialect.postgres import PostgresDialect
from riverboat.dialect.sqlite import SqliteDialect
from riverboat.errors import UnknownJobKindError
from riverboat.middleware import InsertingJob, insert_hook
from riverboat.runtime.maintenance import MaintenanceContext
from riverboat.runtime.maintenance.periodic import PeriodicJobEnqueuer
from riverboat.runtime.outcomes import RetryPolicy
from riverboat.testing import work_job
from tests.clocks import FAR_FROM_TICKS
from tests.leadership._helpers import default_workers, elector_of, fast_maintenance
from tests.runtime.dbs import Db, any_db  # noqa: F401

SRC = Path(riverboat.__file__).parent

# --- every path runs a plan -----------------------------------------------------------

# Where each insert path lives, and the functions that must run a plan.
CLIENT_INSERTS = sorted(n for n in vars(AsyncClientBase) if n.startswith("insert"))
INSERT_PATHS = {
    "_client_async.py": [*CLIENT_INSERTS, "_workflow_insert"],
    "runtime/maintenance/periodic.py": ["run_once"],
    "testing.py": ["work_job", "work_job_async"],
}
RUNNERS = {"run_insert", "run_insert_count"}
# What only a plan may build or decode: the insert statements.
INSERT_STATEMENTS = {"job_insert_many", "job_copy", "job_insert_notify", "decode_insert"}


def _calls(node: ast.AST) -> set[str]:
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_every_insert_path_runs_a_plan() -> None:
    assert len(CLIENT_INSERTS) == 6  # insert, insert_many, insert_many_fast, each _tx too
    for path, functions in INSERT_PATHS.items():
        tree = ast.parse((SRC / path).read_text())
        defined = {
            node.name: node
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        for name in functions:
            assert _calls(defined[name]) & RUNNERS, f"{path}:{name} does not run an InsertPlan"


def test_only_the_plan_builds_insert_statements() -> None:
    # The dialects define the statements; the benchmarks seed rows with them directly.
    allowed = {SRC / "_insert_plan.py"}
    offenders = []
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC).parts
        if path in allowed or relative[0] in ("dialect", "bench"):
            continue
        used = _calls(ast.parse(path.read_text())) & INSERT_STATEMENTS
        if used:
            offenders.append(f"{path.relative_to(SRC)}: {sorted(used)}")
    assert offenders == []


# --- the plan, without a database -----------------------------------------------------


def _jobs(count: int, **opts: Any) -> list[InsertParams]:
    return [
        resolve_insert({"n": n}, InsertOpts(**opts), "plan_job", InsertDefaults())
        for n in range(count)
    ]


def test_a_plan_splits_batches_and_collapses_twins() -> None:
    twins = _jobs(1, unique_opts=UniqueOpts(by_args=True)) * 2
    jobs = _jobs(INSERT_BATCH_MAX) + twins
    for dialect in (PostgresDialect(), SqliteDialect()):
        plan = InsertPlan(dialect, jobs, [None] * len(jobs), NotifyLimiter())
        writes = plan.writes(rows=True)
        assert [b.origin for b in writes.batches] == [None, [(0, False), (0, True)]]
        assert writes.needs_transaction and not writes.copies
        one = InsertPlan(dialect, jobs[:1], [None], NotifyLimiter()).writes(rows=True)
        assert not one.needs_transaction


def test_a_counting_plan_copies_plain_jobs_and_sends_unique_ones() -> None:
    plain = _jobs(3)
    unique = _jobs(2, unique_opts=UniqueOpts(by_args=True))
    plan = InsertPlan(PostgresDialect(), plain + unique, [None] * 5, NotifyLimiter(), copy=True)
    writes = plan.writes(rows=False)
    assert len(writes.copies) == 1 and writes.notify is not None
    assert len(writes.batches) == 1 and writes.batches[0].unique
    quiet = InsertPlan(PostgresDialect(), _jobs(3), [None] * 3, None, copy=True)
    assert quiet.writes(rows=False).notify is None  # no limiter: no queue notified


def test_the_limiter_notifies_a_queue_once_per_cooldown() -> None:
    limiter = NotifyLimiter(3600)
    jobs = _jobs(2) + _jobs(1, queue="other")
    assert limiter.queues_to_notify(jobs) == ["default", "other"]
    assert limiter.queues_to_notify(jobs) == []
    assert NotifyLimiter().queues_to_notify(jobs) == ["default", "other"]


# --- the notifications a database saw ------------------------------------------------


class Notes:
    """The queues insert notifications named, in order: on Postgres what a LISTEN
    connection heard up to a marker insert's, on SQLite the notification outbox."""

    def __init__(self, db: Db, conn: Any) -> None:
        self.db = db
        self.conn = conn

    def queues(self) -> list[str]:
        if self.db.dialect == "sqlite":
            rows = self.db.execute(
                "SELECT payload FROM river_notification WHERE topic = 'river_insert' ORDER BY id"
            )
            return [json.loads(payload)["queue"] for (payload,) in rows]
        with riverboat.Client(self.db.url, schema=self.db.schema) as marker:
            marker.insert({}, InsertOpts(queue="marker"), kind="marker")
        seen: list[str] = []
        for note in self.conn.notifies(timeout=10):
            queue = json.loads(note.payload)["queue"]
            if queue == "marker":
                return seen
            seen.append(queue)
        raise AssertionError(f"no marker notification within 10s; got {seen}")


@contextmanager
def notes(db: Db) -> Iterator[Notes]:
    if db.dialect == "sqlite":
        yield Notes(db, None)
        return
    with psycopg.connect(db.url, autocommit=True) as conn:
        conn.execute(f'LISTEN "{db.schema}.river_insert"')
        yield Notes(db, conn)


# --- the periodic enqueuer ------------------------------------------------------------


def _enqueuer(client: AsyncClient, jobs: list[PeriodicJob]) -> PeriodicJobEnqueuer:
    ctx = MaintenanceContext(
        driver=client.driver,
        client_id=client.id,
        config=fast_maintenance(),
        workers=default_workers(),
        retry_policy=RetryPolicy(),
        job_timeout=60.0,
        middleware=client._core.middleware,
        notify_limiter=client._core.limiter,
    )
    ctx.clock.set(lambda: FAR_FROM_TICKS)
    return PeriodicJobEnqueuer(ctx, jobs)


async def _run_due(enqueuer: PeriodicJobEnqueuer, tick: datetime) -> None:
    await enqueuer.on_start()
    for entry in enqueuer._entries:
        entry.next_run_at = tick
    await enqueuer.run_once()


async def test_periodic_twins_in_one_run_insert_once(any_db: Db) -> None:  # noqa: F811
    # Two periodic jobs without ids, same args: one unique key per tick. Sent in one
    # statement, Postgres refused the whole insert (ON CONFLICT can't touch a row twice).
    async with AsyncClient(any_db.url, schema=any_db.schema) as client:
        same = [PeriodicJob(60, _with_kind({"n": 1})) for _ in range(2)]
        enqueuer = _enqueuer(client, same)
        await _run_due(enqueuer, FAR_FROM_TICKS)
        assert (enqueuer.inserted, enqueuer.skipped_duplicates) == (1, 1)
    assert any_db.execute("SELECT count(*) FROM river_job") == [(1,)]


def _with_kind(args: dict[str, Any]) -> Callable[[], Any]:
    return lambda: riverboat.InsertManyParams(args, kind="periodic_same")


async def test_periodic_runs_are_split_into_batches(any_db: Db) -> None:  # noqa: F811
    count = INSERT_BATCH_MAX + 1
    async with AsyncClient(any_db.url, schema=any_db.schema) as client:
        jobs = [PeriodicJob(3600, _with_kind({"n": n}), run_on_start=True) for n in range(count)]
        enqueuer = _enqueuer(client, jobs)
        await enqueuer.on_start()
        await enqueuer.run_once()
        assert enqueuer.inserted == count
        # Postgres names a one-job statement job_insert_one.
        by_query = client.driver.stats.by_query
        assert by_query.get("job_insert_many", 0) + by_query.get("job_insert_one", 0) == 2
    assert any_db.execute("SELECT count(*) FROM river_job") == [(count,)]


async def test_periodic_runs_notify_through_the_clients_limiter(any_db: Db) -> None:  # noqa: F811
    with notes(any_db) as heard:
        async with AsyncClient(any_db.url, schema=any_db.schema, fetch_cooldown=3600) as client:
            await client.insert({}, kind="by_hand")  # notifies "default" for the hour
            jobs = [
                PeriodicJob(3600, _with_kind({"q": "default"}), run_on_start=True),
                PeriodicJob(
                    3600,
                    lambda: riverboat.InsertManyParams(
                        {}, InsertOpts(queue="other"), "periodic_other"
                    ),
                    run_on_start=True,
                ),
            ]
            enqueuer = _enqueuer(client, jobs)
            await enqueuer.on_start()
            await enqueuer.run_once()
            assert enqueuer.inserted == 2
        # Before: the enqueuer notified every queue, past the client's limiter.
        assert heard.queues() == ["default", "other"]


async def test_a_clients_runtime_hands_its_limiter_to_the_periodic_enqueuer(
    any_db: Db,  # noqa: F811
) -> None:
    client = AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(max_workers=1)},
        workers=default_workers(),
        maintenance=fast_maintenance(),
    )
    await client.start()
    try:
        await asyncio.wait_for(elector_of(client).leader.wait(), 10)
        maintainer = client.runtime.maintainer
        assert maintainer is not None
        periodic = maintainer.services["periodic"]
        assert periodic.ctx.notify_limiter is client._core.limiter
    finally:
        await client.stop()
        await client.close()


# --- work_job and the workflow insert -------------------------------------------------


@dataclass
class Invoice:
    kind: ClassVar[str] = "invoice"
    number: int


def _invoice_workers() -> Workers:
    workers = Workers()

    @workers.register(Invoice)
    def invoice(job: Job[Invoice]) -> None:
        pass

    return workers


def test_work_job_inserts_as_the_client_does_but_for_its_named_differences(
    any_db: Db,  # noqa: F811
) -> None:
    other = Workers()

    @other.register("something_else")
    def something_else(job: Job[Any]) -> None:
        pass

    seen: list[str] = []

    def hook(job: InsertingJob) -> None:
        seen.append(job.kind)

    with notes(any_db) as heard:
        with riverboat.Client(
            any_db.url,
            schema=any_db.schema,
            workers=other,
            middleware=[insert_hook(hook)],
        ) as client:
            with pytest.raises(UnknownJobKindError):
                client.insert(Invoice(1))  # the client has no worker for it
            # work_job: the workers given decide (no kind check), no notification
            # (it claims the job itself), the client's insert hooks as for any insert.
            result = work_job(client, _invoice_workers(), Invoice(2), opts=InsertOpts(queue="w"))
            assert result.job.state == "completed"
            assert seen == ["invoice"]
        assert heard.queues() == []


async def test_a_workflow_insert_goes_through_insert_many_middleware(
    any_db: Db,  # noqa: F811
) -> None:
    batches: list[int] = []

    class Tagging:
        async def insert_many(
            self, jobs: list[InsertingJob], call_next: Callable[[], Awaitable[Any]]
        ) -> Any:
            batches.append(len(jobs))
            for job in jobs:
                job.metadata["via"] = "middleware"
            return await call_next()

    async with AsyncClient(any_db.url, schema=any_db.schema, middleware=[Tagging()]) as client:
        flow = Workflow()
        flow.add("first", {"step": 1}, kind="wf_task")
        flow.add("second", {"step": 2}, kind="wf_task", deps=["first"])
        info = await client.workflow_insert(flow)
    assert batches == [2]
    for task in info.tasks:
        assert task.job.metadata["via"] == "middleware"
    assert [t.job.state for t in info.tasks] == ["available", "pending"]
