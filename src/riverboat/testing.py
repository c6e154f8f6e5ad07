"""Helpers for testing code that uses riverboat (River's ``rivertest``), and a pytest plugin.

Assertions read ``river_job`` through a client, a driver, or your own connection (then
they see the rows of your open transaction, so a test can roll everything back)::

    from riverboat.testing import require_inserted, work_job

    def test_signup_enqueues_welcome_email(conn):
        signup(conn, "ada@example.com")  # inserts with client.insert_tx(conn, ...)
        job = require_inserted(conn, "send_email", {"to": "ada@example.com"}, queue="default")
        result = work_job(conn, workers, job)
        assert result.job.state == "completed"

``target`` is a ``Client``, a sync driver, a ``psycopg.Connection`` (Postgres; the schema
comes from its ``search_path``) or a ``sqlite3``/``sqlean`` connection, or a client or
driver with ``tx=`` one of its transactions' connections.

The pytest plugin (registered as ``riverboat``) adds fixtures, all named ``riverboat_*``:

* ``riverboat_sqlite``: the URL of a SQLite file migrated to River's latest schema;
* ``riverboat_database_url``: a Postgres URL from ``--riverboat-database-url`` or the
  ``RIVERBOAT_TEST_DATABASE_URL`` environment variable (the test is skipped without one);
* ``riverboat_schema``: a fresh, migrated Postgres schema on that server, dropped after
  the test; pass it as ``Client(url, schema=riverboat_schema)``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from riverboat import _insert_async, _insert_sync
from riverboat._insert import InsertDefaults, encode_args, resolve_insert
from riverboat._insert_plan import InsertPlan
from riverboat._job import InsertOpts, JobRow
from riverboat._options import unknown_option
from riverboat.dialect.base import Dialect
from riverboat.drivers.base import DriverStats
from riverboat.middleware import MiddlewareStack
from riverboat.runtime.events import EventKind
from riverboat.runtime.executor import ExecutorConfig, RunState, execute_job
from riverboat.runtime.outcomes import RetryPolicy
from riverboat.runtime.worker import Workers

if TYPE_CHECKING:
    from riverboat.client import AsyncClient, Client

__all__ = [
    "ExpectedJob",
    "TestClock",
    "WorkOptions",
    "WorkResult",
    "create_migrated_postgres_schema",
    "drop_postgres_schema",
    "migrated_postgres_schema",
    "require_inserted",
    "require_many_inserted",
    "require_not_inserted",
    "use_test_config",
    "work_job",
    "work_job_async",
]

_LIST_LIMIT = 10_000


@dataclass(slots=True, frozen=True)
class ExpectedJob:
    """One job :func:`require_many_inserted` expects. ``None`` fields are not checked;
    ``args`` as a mapping must be a subset of the job's args, as an args object equal."""

    kind: str | type
    args: Any = None
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    state: str | None = None
    tags: Sequence[str] | None = None
    scheduled_at: datetime | None = None


@dataclass(slots=True, frozen=True)
class WorkResult:
    """What :func:`work_job` did: the row as written after the attempt, and its outcome
    (``job_completed``, ``job_failed``, ``job_snoozed``, ``job_cancelled``...)."""

    job: JobRow
    outcome: EventKind
    run_duration: float = field(default=0.0)


def _executor(target: Any, tx: Any) -> tuple[Any, Dialect]:
    core = getattr(target, "_core", None)
    if core is not None:  # a Client
        driver = target.driver
        return (driver.wrap(tx) if tx is not None else driver), core.dialect
    dialect = getattr(target, "dialect", None)
    if isinstance(dialect, Dialect) and callable(getattr(target, "fetch", None)):
        return (target.wrap(tx) if tx is not None else target), dialect
    module = type(target).__module__
    if module.startswith("psycopg"):
        from riverboat.dialect.postgres import PostgresDialect
        from riverboat.drivers.psycopg import _SyncExecutor

        return _SyncExecutor(target, DriverStats()), PostgresDialect()
    if module.startswith(("sqlite3", "sqlean")):
        from riverboat.dialect.sqlite import SqliteDialect
        from riverboat.drivers.sqlite import _wrap_connection

        return _wrap_connection(target, DriverStats()), SqliteDialect()
    raise TypeError(
        f"expected a riverboat Client, a sync driver, or a psycopg/sqlite3 connection, "
        f"got {type(target).__name__}"
    )


def _kind_of(kind: str | type) -> str:
    if isinstance(kind, str):
        return kind
    own = getattr(kind, "kind", None)
    if not isinstance(own, str):
        raise TypeError(f"{kind!r} has no kind")
    return own


def _jobs_of_kinds(target: Any, kinds: Sequence[str], tx: Any) -> list[JobRow]:
    executor, dialect = _executor(target, tx)
    stmt = dialect.job_list(
        filters={"kinds": list(dict.fromkeys(kinds))},
        order_column="id",
        descending=False,
        limit=_LIST_LIMIT,
    )
    return dialect.decode_jobs(executor.fetch(stmt))


def _mismatch(job: JobRow, expected: ExpectedJob) -> str | None:
    """Why ``job`` is not ``expected``, or None when it is."""
    if job.kind != _kind_of(expected.kind):
        return f"kind {job.kind!r} != {_kind_of(expected.kind)!r}"
    if expected.args is not None:
        if isinstance(expected.args, Mapping):
            for key, value in expected.args.items():
                if job.args.get(key) != value:
                    return f"args[{key!r}] is {job.args.get(key)!r}, expected {value!r}"
        else:
            want = json.loads(encode_args(expected.args, job.kind)[1])
            if job.args != want:
                return f"args {job.args!r} != {want!r}"
    for name in ("queue", "priority", "max_attempts", "state"):
        want = getattr(expected, name)
        if want is not None and getattr(job, name) != want:
            return f"{name} is {getattr(job, name)!r}, expected {want!r}"
    if expected.tags is not None and list(job.tags) != list(expected.tags):
        return f"tags are {job.tags!r}, expected {list(expected.tags)!r}"
    if expected.scheduled_at is not None:
        delta = abs((job.scheduled_at - expected.scheduled_at).total_seconds())
        if delta > 1:  # SQLite keeps milliseconds, and clocks differ a little
            return f"scheduled_at is {job.scheduled_at}, expected {expected.scheduled_at}"
    return None


def _describe(jobs: Sequence[JobRow]) -> str:
    if not jobs:
        return "none"
    return "; ".join(f"#{j.id} {j.kind} {j.state} queue={j.queue} args={j.args}" for j in jobs)


def require_inserted(
    target: Any, kind: str | type, args: Any = None, *, tx: Any = None, **opts: Any
) -> JobRow:
    """Assert that exactly one job of ``kind`` matching ``args`` and ``opts`` (``queue``,
    ``priority``, ``max_attempts``, ``state``, ``tags``, ``scheduled_at``) exists, and
    return it."""
    expected = ExpectedJob(kind, args, **opts)
    jobs = _jobs_of_kinds(target, [_kind_of(kind)], tx)
    matching = [job for job in jobs if _mismatch(job, expected) is None]
    if len(matching) != 1:
        found = "no" if not matching else str(len(matching))
        reasons = [f"#{j.id}: {_mismatch(j, expected)}" for j in jobs if j not in matching]
        raise AssertionError(
            f"expected one inserted {_kind_of(kind)!r} job matching {args!r} {opts or ''}, "
            f"found {found}; jobs of that kind: {_describe(jobs)}"
            + (f" ({'; '.join(reasons)})" if reasons else "")
        )
    return matching[0]


def require_not_inserted(
    target: Any, kind: str | type, args: Any = None, *, tx: Any = None, **opts: Any
) -> None:
    """Assert that no job of ``kind`` matching ``args`` and ``opts`` exists."""
    expected = ExpectedJob(kind, args, **opts)
    jobs = _jobs_of_kinds(target, [_kind_of(kind)], tx)
    matching = [job for job in jobs if _mismatch(job, expected) is None]
    if matching:
        raise AssertionError(
            f"expected no {_kind_of(kind)!r} job matching {args!r} {opts or ''}, "
            f"found {_describe(matching)}"
        )


def require_many_inserted(
    target: Any, expected: Sequence[ExpectedJob], *, tx: Any = None
) -> list[JobRow]:
    """Assert that the jobs of the expected kinds are exactly ``expected``, in insert
    order, and return them."""
    jobs = _jobs_of_kinds(target, [_kind_of(e.kind) for e in expected], tx)
    if len(jobs) != len(expected):
        raise AssertionError(
            f"expected {len(expected)} jobs of kinds "
            f"{sorted({_kind_of(e.kind) for e in expected})}, found {len(jobs)}: {_describe(jobs)}"
        )
    for index, (job, want) in enumerate(zip(jobs, expected, strict=True)):
        why = _mismatch(job, want)
        if why is not None:
            raise AssertionError(f"job {index} (#{job.id}): {why}; jobs: {_describe(jobs)}")
    return jobs


class WorkOptions(TypedDict, total=False):
    """:func:`work_job`'s options. ``tx``: a connection or transaction of ``target`` to
    work in. ``opts``/``kind``: as for ``insert``, when ``job`` is job args.
    ``middleware``: the work's middleware (default: the client's). ``client_id``:
    recorded in ``attempted_by`` (default ``"riverboat-test"``). ``job_timeout``: seconds
    (default 60; ``None`` for none). ``retry_policy``: when a failed job runs again
    (default: River's)."""

    tx: Any
    opts: InsertOpts | None
    kind: str | None
    middleware: Sequence[object] | None
    client_id: str
    job_timeout: float | None
    retry_policy: RetryPolicy | None


def work_job(
    target: Any, workers: Workers, job: JobRow | int | object, **options: Unpack[WorkOptions]
) -> WorkResult:
    """Work one job inline, for real: claim its row (running, attempt + 1), run its
    worker from ``workers`` with the usual outcome rules, write the outcome, and return
    the row as written. Call it from sync code (it runs its own event loop).

    ``job`` is a row or its id, or job args (with ``opts``/``kind`` as for ``insert``):
    those are inserted first, so one call inserts and works (River's
    ``rivertest.Worker.Work``). The work runs inside ``middleware`` (default: the
    client's, when ``target`` is a client), its insert hooks and ``insert_many``
    middleware applied to an insert, and the client's :func:`use_test_config` clock to
    the inserted row's times."""
    _check_work_options(options)
    executor, dialect = _executor(target, options.get("tx"))
    stack = _work_middleware(target, options)
    if _is_args(job):
        plan = _plan_to_work(target, dialect, stack, job, options)
        job = _insert_sync.run_insert(plan, executor)[0].job

    async def fetch(stmt: Any) -> Any:
        return executor.fetch(stmt)

    return asyncio.run(_work(fetch, dialect, stack, workers, _job_id(job), options))


async def work_job_async(
    target: Any, workers: Workers, job: JobRow | int | object, **options: Unpack[WorkOptions]
) -> WorkResult:
    """:func:`work_job` for async code: ``target`` is an ``AsyncClient`` or an async
    driver (with ``tx=`` one of its transactions' connections)."""
    _check_work_options(options)
    core = getattr(target, "_core", None)
    driver = target.driver if core is not None else target
    dialect = getattr(driver, "dialect", None)
    if not isinstance(dialect, Dialect) or not inspect.iscoroutinefunction(
        getattr(driver, "fetch", None)
    ):
        raise TypeError(f"expected an AsyncClient or an async driver, got {type(target).__name__}")
    tx = options.get("tx")
    executor = driver.wrap(tx) if tx is not None else driver
    stack = _work_middleware(target, options)
    if _is_args(job):
        plan = _plan_to_work(target, dialect, stack, job, options)
        job = (await _insert_async.run_insert(plan, executor))[0].job
    return await _work(executor.fetch, dialect, stack, workers, _job_id(job), options)


def _check_work_options(options: WorkOptions) -> None:
    # A TypeError, as Python's own for a keyword the signature lacks.
    name = unknown_option(options, WorkOptions.__optional_keys__)
    if name is not None:
        raise TypeError(f"work_job got an unexpected keyword argument {name!r}")


def _work_middleware(target: Any, options: WorkOptions) -> MiddlewareStack | None:
    """The middleware a work_job runs in: the one given, else the client's."""
    middleware = options.get("middleware")
    if middleware is not None:
        return MiddlewareStack(middleware)
    core = getattr(target, "_core", None)
    return core.middleware if core is not None else None


def _is_args(job: object) -> bool:
    """Whether work_job's ``job`` is job args to insert (not a row or its id)."""
    return not isinstance(job, (JobRow, int)) or isinstance(job, bool)


def _job_id(job: Any) -> int:
    return job if isinstance(job, int) else int(job.id)


def _plan_to_work(
    target: Any,
    dialect: Dialect,
    stack: MiddlewareStack | None,
    args: object,
    options: WorkOptions,
) -> InsertPlan:
    """The insert of work_job's args: a client's as its own inserts (defaults, test
    config, insert hooks and middleware), but for two named differences: no check that
    the client has a worker for the kind (``workers`` says what is worked), and no
    notification (the helper claims the job itself at once; a notification would only
    invite a running client's producer to claim it first)."""
    opts, kind = options.get("opts"), options.get("kind")
    core = getattr(target, "_core", None)
    if core is not None:
        plan: InsertPlan = core.plan_one(args, opts, kind, check_kinds=False)
    else:
        job = resolve_insert(args, opts, kind, InsertDefaults())
        plan = InsertPlan(dialect, [job], (args,), None)
    plan.notify = None
    plan.middleware = stack
    return plan


async def _work(
    fetch: Callable[[Any], Awaitable[Any]],
    dialect: Dialect,  # the target's dialect
    stack: MiddlewareStack | None,
    workers: Workers,
    job_id: int,
    options: WorkOptions,
) -> WorkResult:
    rows = await fetch(dialect.job_set_running(job_id, options.get("client_id", "riverboat-test")))
    if not rows:
        current = await fetch(dialect.job_get_by_id(job_id))
        state = dialect.decode_job(current[0]).state if current else "missing"
        raise AssertionError(f"job {job_id} cannot be worked: it is {state}")
    row = dialect.decode_job(rows[0])
    wanted = stack if stack is not None and (stack.has_work or stack.error_handlers) else None
    config = ExecutorConfig(
        workers,
        options.get("job_timeout", 60.0),
        options.get("retry_policy") or RetryPolicy(),
        None,
        wanted,
    )
    pending = await execute_job(row, config, RunState())
    written = await fetch(dialect.job_set_state_if_running_many([pending.update]))
    after = dialect.decode_job(written[0]) if written else row
    return WorkResult(after, pending.event_kind, pending.run_duration)


class TestClock:
    """A settable clock for :func:`use_test_config` (River's ``TestConfig.Time``
    stub): ``now()`` is what you set, moved on only by :meth:`advance`."""

    __test__ = False  # not a pytest test class

    def __init__(self, now: datetime | None = None) -> None:
        self._now = now or datetime.now(UTC)
        if self._now.tzinfo is None:
            raise ValueError("TestClock needs an aware datetime")

    def now(self) -> datetime:
        return self._now

    def set(self, moment: datetime) -> None:
        if moment.tzinfo is None:
            raise ValueError("TestClock needs an aware datetime")
        self._now = moment

    def advance(self, delta: timedelta | float) -> datetime:
        self._now += delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        return self._now


def use_test_config(
    client: Client | AsyncClient,
    *,
    clock: TestClock | Callable[[], datetime] | None = None,
    disable_unique_enforcement: bool = False,
) -> None:
    """Configure a ``Client``/``AsyncClient`` for tests (River's ``TestConfig``).

    ``clock`` (a :class:`TestClock` or any function returning an aware datetime) stands
    in for the current time wherever riverboat would take it from the database's
    ``now()``, as River passes its stubbed time to its queries: a job's ``created_at``,
    its ``scheduled_at`` when none is given (the job staying available), unique periods
    (``UniqueOpts(by_period=)``), the client's claims (a job scheduled after the clock's
    time is not claimed; advancing the clock makes it claimable at the next fetch) and
    the scheduler run by this client when it leads (``scheduled`` and ``retryable`` jobs
    due by the clock become available). Advancing the clock wakes nothing: producers see
    the new time at their next fetch (``fetch_poll_interval``, or the next insert).
    Times the runtime writes after a job runs (``finalized_at``, retry times) and
    periodic job schedules keep the real clock. Pass ``clock=None`` to go back to it.

    ``disable_unique_enforcement`` inserts unique jobs as if they had no unique options.
    """
    core = getattr(client, "_core", None)
    if core is None:
        raise TypeError(f"expected a riverboat Client or AsyncClient, got {type(client).__name__}")
    # The client's runtime (and a sync Client's embedded one) share this clock object.
    core.clock.set(clock.now if isinstance(clock, TestClock) else clock)
    core.unique_enforcement = not disable_unique_enforcement


# -- the pytest plugin -------------------------------------------------------------------


def create_migrated_postgres_schema(url: str, prefix: str = "riverboat_test_") -> str:
    """A new Postgres schema (``prefix`` and random hex) migrated to River's latest
    version, for a fixture that outlives one test; dropped again if migrating fails.
    :func:`drop_postgres_schema` removes it."""
    import psycopg

    from riverboat.drivers.psycopg import PsycopgDriver
    from riverboat.migrations import up_all

    schema = prefix + uuid.uuid4().hex[:12]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        driver = PsycopgDriver(url, schema=schema, max_pool_size=1)
        try:
            up_all(driver)
        finally:
            driver.close()
    except BaseException:
        drop_postgres_schema(url, schema)
        raise
    return schema


def drop_postgres_schema(url: str, schema: str) -> None:
    """Drop ``schema`` with everything in it."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextmanager
def migrated_postgres_schema(url: str, prefix: str = "riverboat_test_") -> Iterator[str]:
    """:func:`create_migrated_postgres_schema` for the ``with`` block, dropped on exit:
    one test's or benchmark's own schema."""
    schema = create_migrated_postgres_schema(url, prefix)
    try:
        yield schema
    finally:
        drop_postgres_schema(url, schema)


try:
    import pytest
except ImportError:  # pragma: no cover - the helpers work without pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    def pytest_addoption(parser: Any) -> None:
        parser.addoption(
            "--riverboat-database-url",
            default=None,
            help="Postgres URL for riverboat's riverboat_schema fixture "
            "(default: $RIVERBOAT_TEST_DATABASE_URL)",
        )

    @pytest.fixture
    def riverboat_sqlite(tmp_path: Path) -> str:
        """The URL of a SQLite file migrated to River's latest schema."""
        from riverboat.drivers.sqlite import SqliteDriver
        from riverboat.migrations import up_all

        url = f"sqlite:///{tmp_path / 'riverboat-test.sqlite3'}"
        with SqliteDriver(url) as driver:
            up_all(driver)
        return url

    @pytest.fixture
    def riverboat_database_url(request: Any) -> str:
        """A Postgres server URL; the test is skipped when none is configured."""
        url = request.config.getoption("--riverboat-database-url") or os.environ.get(
            "RIVERBOAT_TEST_DATABASE_URL"
        )
        if not url:
            pytest.skip("no --riverboat-database-url or RIVERBOAT_TEST_DATABASE_URL")
        return str(url)

    @pytest.fixture
    def riverboat_schema(riverboat_database_url: str) -> Iterator[str]:
        """A fresh Postgres schema migrated to River's latest version, dropped after."""
        with migrated_postgres_schema(riverboat_database_url) as schema:
            yield schema
