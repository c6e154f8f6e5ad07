"""Client (sync) and AsyncClient: inserting jobs, and running workers.

Both clients are thin: the statements and their encoding come from the dialect
(``riverboat.dialect``), validation from ``riverboat._insert``, and each method is one
driver call. The ``*_tx`` forms run inside the caller's open transaction, so a job
commits or rolls back with the caller's own rows.
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from riverboat._admin import T, _hears_notifications, _job_id
from riverboat._admin_async import AsyncAdmin
from riverboat._admin_sync import SyncAdmin
from riverboat._insert import InsertDefaults, InsertParams, resolve_insert, resolve_many
from riverboat._job import InsertManyParams, InsertOpts, InsertResult, JobRow
from riverboat._sql import Statement
from riverboat._url import async_driver_from_url, driver_from_url
from riverboat.errors import InvalidInputError, NotFoundError, UnknownJobKindError
from riverboat.middleware import MiddlewareStack
from riverboat.runtime.events import EventKind, Subscription
from riverboat.runtime.producer import QueueConfig
from riverboat.runtime.retry import RetryPolicy
from riverboat.runtime.runner import (
    DEFAULT_SOFT_STOP_TIMEOUT,
    IDLE_HORIZON,
    Runtime,
    RuntimeConfig,
)
from riverboat.runtime.worker import Workers

__all__ = ["AsyncClient", "Client", "default_client_id"]

log = logging.getLogger("riverboat.client")

INSERT_BATCH_MAX = 5000  # River's insert batch size; also bounds one statement's arrays


def default_client_id() -> str:
    """River's client ID shape: ``<host with . as _, ≤60 chars>_<UTC start time>``."""
    host = socket.gethostname().replace(".", "_")[:60]
    stamp = datetime.now(UTC).strftime("%Y_%m_%dT%H_%M_%S_%f")
    return f"{host}_{stamp}"[:100]


class _NotifyLimiter:
    """At most one insert notification per queue per cooldown, as River's notifylimiter."""

    __slots__ = ("_cooldown", "_last")

    def __init__(self, cooldown: float) -> None:
        self._cooldown = cooldown
        self._last: dict[str, float] = {}

    def queues_to_notify(self, jobs: Sequence[InsertParams]) -> list[str]:
        now = time.monotonic()
        out: list[str] = []
        for job in jobs:
            if job.state != "available" or job.queue in out:
                continue
            last = self._last.get(job.queue)
            if last is None or now - last >= self._cooldown:
                self._last[job.queue] = now
                out.append(job.queue)
        return out


class _InsertBatch:
    """One insert statement, and where each requested job's row is in its result."""

    __slots__ = ("origin", "stmt")

    def __init__(self, stmt: Statement, origin: list[tuple[int, bool]] | None) -> None:
        self.stmt = stmt
        self.origin = origin


def _collapse_unique_twins(
    jobs: list[InsertParams],
) -> tuple[list[InsertParams], list[tuple[int, bool]] | None]:
    """Send each unique key once per statement.

    Postgres's ON CONFLICT DO UPDATE cannot touch one row twice in a statement, so two
    jobs with the same unique key in one batch would fail the whole insert. The later
    twin is what a second insert would be: a duplicate of the first. ``origin`` maps each
    requested job to (its row's position in the result, whether it is such a twin).
    """
    first_by_key: dict[bytes, int] = {}
    sent: list[InsertParams] = []
    origin: list[tuple[int, bool]] = []
    twins = False
    for job in jobs:
        key = job.unique_key
        if key is not None:
            seen = first_by_key.get(key)
            if seen is not None:
                origin.append((seen, True))
                twins = True
                continue
            first_by_key[key] = len(sent)
        origin.append((len(sent), False))
        sent.append(job)
    return (sent, origin) if twins else (jobs, None)


class _ClientCore:
    """Everything both clients share that does no I/O."""

    def __init__(
        self,
        driver: Any,
        *,
        id: str | None,
        max_attempts: int,
        fetch_cooldown: float,
        middleware: Sequence[object] | None = None,
    ) -> None:
        self.driver = driver
        self.dialect = driver.dialect
        self.id = id or default_client_id()
        if not isinstance(self.id, str) or not 0 < len(self.id) <= 100:
            raise InvalidInputError("id", "must be a str of 1 to 100 characters")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise InvalidInputError("max_attempts", "must be an int of at least 1")
        self.defaults = InsertDefaults(max_attempts=max_attempts)
        self._limiter = _NotifyLimiter(fetch_cooldown)
        self.workers: Workers | None = None
        self.skip_unknown_job_check = False
        self.middleware = MiddlewareStack(middleware)

    def _check_kinds(self, jobs: Sequence[InsertParams]) -> None:
        # River refuses to insert a kind this client has no worker for (when it has
        # workers at all), catching typos before a job sits unworkable in the queue.
        if self.workers is None or not len(self.workers) or self.skip_unknown_job_check:
            return
        for job in jobs:
            if job.kind not in self.workers:
                raise UnknownJobKindError(job.kind)

    def insert_statement(
        self, args: object, opts: InsertOpts | None, kind: str | None
    ) -> tuple[Statement, list[InsertParams]]:
        jobs = [resolve_insert(args, opts, kind, self.defaults)]
        self._check_kinds(jobs)
        self.middleware.apply_insert(jobs, (args,))
        return self.dialect.job_insert_many(jobs, self._limiter.queues_to_notify(jobs)), jobs

    def insert_many_statements(
        self, params: Sequence[object]
    ) -> tuple[list[_InsertBatch], list[InsertParams]]:
        jobs = resolve_many(params, self.defaults)
        self._check_kinds(jobs)
        self.middleware.apply_insert(
            jobs, [p.args if isinstance(p, InsertManyParams) else p for p in params]
        )
        batches = []
        for start in range(0, len(jobs), INSERT_BATCH_MAX):
            batch, origin = _collapse_unique_twins(jobs[start : start + INSERT_BATCH_MAX])
            stmt = self.dialect.job_insert_many(batch, self._limiter.queues_to_notify(batch))
            batches.append(_InsertBatch(stmt, origin))
        return batches, jobs

    def decode_batch(self, batch: _InsertBatch, rows: Sequence[Any]) -> list[InsertResult]:
        results: list[InsertResult] = self.dialect.decode_insert(rows)
        if batch.origin is None:
            return results
        out = []
        for sent, twin in batch.origin:
            first = results[sent]
            out.append(InsertResult(first.job, True) if twin else first)
        return out

    def one_job(self, rows: Sequence[Any], job_id: int) -> JobRow:
        if not rows:
            raise NotFoundError(f"job {job_id} not found")
        job: JobRow = self.dialect.decode_job(rows[0])
        return job


def _check_job_id(job_id: object) -> int:
    return _job_id(job_id)  # one rule for every call taking a job id


def _checked_driver(driver: Any, schema: str | None, *, want_async: bool) -> Any:
    """``driver`` when it is a riverboat driver of the kind the client needs (the
    capabilities it declares are read here, when the client is built), else a clear
    error: a sync Client over an async driver used to fail at its first insert with
    "'coroutine' object is not iterable"."""
    capabilities = getattr(driver, "capabilities", None)
    if capabilities is None or not hasattr(driver, "dialect"):
        raise InvalidInputError(
            "driver",
            f"must be a database URL or a riverboat driver, not {type(driver).__name__}",
        )
    name = type(driver).__name__
    if want_async and not capabilities.async_:
        raise InvalidInputError(
            "driver", f"{name} is a sync driver; AsyncClient needs an async one (or a URL)"
        )
    if not want_async and not capabilities.sync:
        raise InvalidInputError(
            "driver", f"{name} is an async driver; use riverboat.AsyncClient with it"
        )
    if schema is not None and schema != driver.dialect.schema:
        # The driver renders every statement with its own schema; this one would be
        # silently ignored.
        raise InvalidInputError(
            "schema",
            f"{schema!r} differs from the driver's schema {driver.dialect.schema!r}: pass "
            f"schema= to {name}(...) instead",
        )
    return driver


def _check_runtime_options(options: Mapping[str, Any]) -> None:
    """Options the sync Client hands to its embedded AsyncClient, checked now rather than
    at ``start()``: a typo fails where it was written."""
    known = _ASYNC_ONLY_OPTIONS
    for name in options:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InvalidInputError(name, f"is not a Client option{hint}")


class Client(SyncAdmin):
    """The synchronous client: inserts and administration from ordinary code.

    ``driver`` is a sync driver (``PsycopgDriver``, ``SqliteDriver``...) or a URL. With
    ``queues`` and ``workers`` it can also work jobs: ``start()`` runs the asyncio runtime
    on a background thread (embedded mode) over the driver's async twin, and ``stop()``
    stops it, so a sync program never has to touch an event loop.
    """

    def __init__(
        self,
        driver: Any,
        *,
        id: str | None = None,
        schema: str | None = None,
        queues: Mapping[str, QueueConfig] | None = None,
        workers: Workers | None = None,
        max_attempts: int = 25,
        fetch_cooldown: float = 0.1,
        middleware: Sequence[object] | None = None,
        **runtime_options: Any,
    ) -> None:
        _check_runtime_options(runtime_options)
        if isinstance(driver, str):
            driver = driver_from_url(driver, schema=schema)
            self._owns_driver = True
        else:
            driver = _checked_driver(driver, schema, want_async=False)
            self._owns_driver = False
        self._core = _ClientCore(
            driver,
            id=id,
            max_attempts=max_attempts,
            fetch_cooldown=fetch_cooldown,
            middleware=middleware,
        )
        self._core.workers = workers
        self._core.skip_unknown_job_check = bool(runtime_options.get("skip_unknown_job_check"))
        self.driver = driver
        self._embedded: _Embedded | None = None
        if queues:
            self._embedded = _Embedded(
                lambda: AsyncClient(
                    driver.async_driver(),
                    id=self._core.id,
                    queues=queues,
                    workers=workers,
                    max_attempts=max_attempts,
                    fetch_cooldown=fetch_cooldown,
                    middleware=self._core.middleware.items,
                    **runtime_options,
                )
            )

    def start(self) -> None:
        """Start working jobs on a background thread (embedded mode)."""
        if self._embedded is None:
            raise InvalidInputError("queues", "this client has no queues; it is insert-only")
        self._embedded.start()

    def stop(self) -> None:
        """Soft stop: running jobs finish (or are handed back after
        ``soft_stop_timeout``) and every outcome is written."""
        if self._embedded is not None:
            self._embedded.stop(cancel_running=False)

    def stop_and_cancel(self) -> None:
        """Hard stop: running jobs are handed back (interrupted); every outcome is
        written (see AsyncClient.stop_and_cancel)."""
        if self._embedded is not None:
            self._embedded.stop(cancel_running=True)

    def run_until_idle(self) -> None:
        """Work until every queue is drained, then stop."""
        if self._embedded is None:
            raise InvalidInputError("queues", "this client has no queues; it is insert-only")
        self._embedded.run_until_idle()

    @property
    def async_client(self) -> AsyncClient | None:
        """The embedded runtime's AsyncClient, once started."""
        return self._embedded.client if self._embedded is not None else None

    def _after_insert(self, jobs: Sequence[InsertParams]) -> None:
        if self._embedded is not None:
            self._embedded.wake({j.queue for j in jobs if j.state == "available"})

    def _apply_local(self, effect: Callable[[T, Runtime], None], result: T) -> None:
        # The embedded runtime lives on its own loop thread: hand the effect to that loop.
        embedded = self._embedded
        client = embedded.client if embedded is not None else None
        loop = embedded._loop if embedded is not None else None
        runtime = client._runtime if client is not None else None
        if runtime is not None and loop is not None and not _hears_notifications(runtime):
            loop.call_soon_threadsafe(effect, result, runtime)

    @property
    def id(self) -> str:
        return self._core.id

    def insert(
        self, args: object, opts: InsertOpts | None = None, *, kind: str | None = None
    ) -> InsertResult:
        """Insert one job in one statement (no transaction is opened)."""
        stmt, jobs = self._core.insert_statement(args, opts, kind)
        result: InsertResult = self._core.dialect.decode_insert(self.driver.fetch(stmt))[0]
        self._after_insert(jobs)
        return result

    def insert_tx(
        self, conn: Any, args: object, opts: InsertOpts | None = None, *, kind: str | None = None
    ) -> InsertResult:
        """Insert one job inside the caller's open transaction on ``conn``."""
        stmt, _ = self._core.insert_statement(args, opts, kind)
        rows = self.driver.wrap(conn).fetch(stmt)
        return self._core.dialect.decode_insert(rows)[0]  # type: ignore[no-any-return]

    def insert_many(self, params: Sequence[InsertManyParams | object]) -> list[InsertResult]:
        """Insert many jobs: one statement per 5,000, in one transaction when there are
        several batches so the call is all-or-nothing."""
        batches, jobs = self._core.insert_many_statements(params)
        decode = self._core.decode_batch
        if len(batches) == 1:
            results = decode(batches[0], self.driver.fetch(batches[0].stmt))
        else:
            results = []
            with self.driver.transaction() as tx:
                for batch in batches:
                    results.extend(decode(batch, tx.fetch(batch.stmt)))
        self._after_insert(jobs)
        return results

    def insert_many_tx(
        self, conn: Any, params: Sequence[InsertManyParams | object]
    ) -> list[InsertResult]:
        batches, _ = self._core.insert_many_statements(params)
        executor = self.driver.wrap(conn)
        results: list[InsertResult] = []
        for batch in batches:
            results.extend(self._core.decode_batch(batch, executor.fetch(batch.stmt)))
        return results

    def job_get(self, job_id: int) -> JobRow:
        """Fetch one job by ID; raises NotFoundError."""
        rows = self.driver.fetch(self._core.dialect.job_get_by_id(_check_job_id(job_id)))
        return self._core.one_job(rows, job_id)

    def close(self) -> None:
        if self._embedded is not None and self._embedded.running:
            self._embedded.stop(cancel_running=False)
        if self._owns_driver:
            self.driver.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(AsyncAdmin):
    """The asyncio client: inserts, administration, and the worker runtime.

    Without ``queues`` it is insert-only. With ``queues`` and ``workers``, ``start()``
    runs a producer per queue, the batch completer and the notifier until ``stop()``.
    """

    def __init__(
        self,
        driver: Any,
        *,
        id: str | None = None,
        schema: str | None = None,
        queues: Mapping[str, QueueConfig] | None = None,
        workers: Workers | None = None,
        max_attempts: int = 25,
        fetch_cooldown: float = 0.1,
        fetch_poll_interval: float = 1.0,
        job_timeout: float | None = 60.0,
        poll_only: bool = False,
        retry_policy: RetryPolicy | None = None,
        skip_unknown_job_check: bool = False,
        maintenance: Any = None,
        periodic_jobs: Sequence[Any] = (),
        middleware: Sequence[object] | None = None,
        soft_stop_timeout: float | None = DEFAULT_SOFT_STOP_TIMEOUT,
    ) -> None:
        if isinstance(driver, str):
            driver = async_driver_from_url(driver, schema=schema)
            self._owns_driver = True
        else:
            driver = _checked_driver(driver, schema, want_async=True)
            self._owns_driver = False
        self._core = _ClientCore(
            driver,
            id=id,
            max_attempts=max_attempts,
            fetch_cooldown=fetch_cooldown,
            middleware=middleware,
        )
        self._core.workers = workers
        self._core.skip_unknown_job_check = skip_unknown_job_check
        self.driver = driver
        self._runtime: Runtime | None = None
        if queues:
            self._runtime = Runtime(
                driver,
                self._core.id,
                RuntimeConfig(
                    queues=dict(queues),
                    workers=workers if workers is not None else Workers(),
                    fetch_cooldown=fetch_cooldown,
                    fetch_poll_interval=fetch_poll_interval,
                    job_timeout=job_timeout,
                    poll_only=poll_only,
                    retry_policy=retry_policy or RetryPolicy(),
                    maintenance=maintenance,
                    periodic_jobs=list(periodic_jobs),
                    insert_defaults=self._core.defaults,
                    middleware=self._core.middleware,
                    soft_stop_timeout=soft_stop_timeout,
                ),
            )
            self._runtime.on_start.append(self._core.middleware.on_start)
        elif workers is not None and not isinstance(workers, Workers):
            raise InvalidInputError("workers", "must be a riverboat.Workers registry")

    # -- runtime ---------------------------------------------------------------------
    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            raise InvalidInputError("queues", "this client has no queues; it is insert-only")
        return self._runtime

    async def start(self) -> None:
        """Start working jobs: completer, notifier and one producer per queue."""
        await self.runtime.start()

    async def stop(self) -> None:
        """Soft stop: stop fetching, let running jobs finish, write every outcome. Jobs
        still running after ``soft_stop_timeout`` (25 s by default) are handed back as
        :meth:`stop_and_cancel` does."""
        if self._runtime is not None:
            await self._runtime.stop()

    async def stop_and_cancel(self) -> None:
        """Hard stop: hand back every running job (*interrupted*: available again, the
        attempt rolled back, errors unchanged; River 0.44) and write every outcome. Async
        jobs are cancelled; a sync job's thread can't be, so it is left running as a
        daemon thread and what it does afterwards is discarded."""
        if self._runtime is not None:
            await self._runtime.stop(cancel_running=True)

    def subscribe(self, *kinds: EventKind | str, maxsize: int = 1000) -> Subscription:
        """Events for the given kinds (all when none are named), delivered after each
        outcome is written. Slow subscribers lose events rather than slowing jobs."""
        return self.runtime.subscribe(kinds, maxsize)

    async def run_until_idle(self, *, poll: float = 0.05, horizon: float = IDLE_HORIZON) -> None:
        """Start if needed, work until every queue is drained, then stop (soft).

        Drained means nothing running and no job of these queues available or due within
        ``horizon`` seconds (a retry or snooze due soon is waited for); what is due later
        is left, and logged."""
        runtime = self.runtime
        if not runtime.started:
            await runtime.start()
        try:
            while not await runtime.drained(horizon):
                await asyncio.sleep(poll)
        finally:
            await runtime.stop()

    def _after_insert(self, jobs: Sequence[InsertParams]) -> None:
        if self._runtime is not None and self._runtime.started:
            self._runtime.wake_queues({j.queue for j in jobs if j.state == "available"})

    def _apply_local(self, effect: Callable[[T, Runtime], None], result: T) -> None:
        runtime = self._runtime
        if runtime is not None and runtime.started and not _hears_notifications(runtime):
            effect(result, runtime)

    @property
    def id(self) -> str:
        return self._core.id

    async def insert(
        self, args: object, opts: InsertOpts | None = None, *, kind: str | None = None
    ) -> InsertResult:
        """Insert one job in one statement (no transaction is opened)."""
        stmt, jobs = self._core.insert_statement(args, opts, kind)
        rows = await self.driver.fetch(stmt)
        self._after_insert(jobs)
        return self._core.dialect.decode_insert(rows)[0]  # type: ignore[no-any-return]

    async def insert_tx(
        self, conn: Any, args: object, opts: InsertOpts | None = None, *, kind: str | None = None
    ) -> InsertResult:
        stmt, _ = self._core.insert_statement(args, opts, kind)
        rows = await self.driver.wrap(conn).fetch(stmt)
        return self._core.dialect.decode_insert(rows)[0]  # type: ignore[no-any-return]

    async def insert_many(self, params: Sequence[InsertManyParams | object]) -> list[InsertResult]:
        batches, jobs = self._core.insert_many_statements(params)
        decode = self._core.decode_batch
        if len(batches) == 1:
            results = decode(batches[0], await self.driver.fetch(batches[0].stmt))
        else:
            results = []
            async with self.driver.transaction() as tx:
                for batch in batches:
                    results.extend(decode(batch, await tx.fetch(batch.stmt)))
        self._after_insert(jobs)
        return results

    async def insert_many_tx(
        self, conn: Any, params: Sequence[InsertManyParams | object]
    ) -> list[InsertResult]:
        batches, _ = self._core.insert_many_statements(params)
        executor = self.driver.wrap(conn)
        results: list[InsertResult] = []
        for batch in batches:
            results.extend(self._core.decode_batch(batch, await executor.fetch(batch.stmt)))
        return results

    async def job_get(self, job_id: int) -> JobRow:
        rows = await self.driver.fetch(self._core.dialect.job_get_by_id(_check_job_id(job_id)))
        return self._core.one_job(rows, job_id)

    async def close(self) -> None:
        """Stop the runtime if it runs (a soft stop, as ``Client.close()`` does), then
        close the driver when the client made it from a URL."""
        if self._runtime is not None and self._runtime.started:
            await self._runtime.stop()
        if self._owns_driver:
            await self.driver.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Embedded:
    """An AsyncClient running on its own event loop in a background thread."""

    def __init__(self, factory: Any) -> None:
        self._factory = factory
        self.client: AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.running = False

    def start(self) -> None:
        if self.running:
            return
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=loop.run_forever, name="riverboat-runtime", daemon=True
        )
        self._thread.start()
        try:
            self.client = self._call(self._make())
            self._call(self.client.start())
        except BaseException:
            # A start that fails (no database, a bad option) must not leave the loop's
            # thread and the async driver behind.
            self._shutdown()
            raise
        self.running = True

    async def _make(self) -> AsyncClient:
        client: AsyncClient = self._factory()
        return client

    def _call(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def wake(self, queues: set[str]) -> None:
        client, loop = self.client, self._loop
        if client is not None and loop is not None and client._runtime is not None:
            loop.call_soon_threadsafe(client._runtime.wake_queues, queues)

    def run_until_idle(self) -> None:
        self.start()
        assert self.client is not None
        self._call(self.client.run_until_idle())
        self._shutdown()

    def stop(self, *, cancel_running: bool) -> None:
        if not self.running or self.client is None:
            return
        if cancel_running:
            self._call(self.client.stop_and_cancel())
        else:
            self._call(self.client.stop())
        self._shutdown()

    def _shutdown(self) -> None:
        if self.client is not None:
            try:
                self._call(self.client.driver.close())
            except Exception:  # closing must not hide why we are shutting down
                log.exception("closing the embedded runtime's driver failed")
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
        self._loop = self._thread = None
        self.client = None
        self.running = False


# The AsyncClient options a sync Client takes through **runtime_options.
_ASYNC_ONLY_OPTIONS = frozenset(inspect.signature(AsyncClient.__init__).parameters) - frozenset(
    inspect.signature(Client.__init__).parameters
)
