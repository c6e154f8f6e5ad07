"""What both clients share that does no I/O: the insert planning (validation, unique
twins, batches, notify limiting), decoding, and the checks on how a client is built."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

from riverboat._clock import Clock
from riverboat._insert import InsertDefaults, InsertParams, resolve_insert, resolve_many
from riverboat._job import InsertManyParams, InsertOpts, InsertResult, JobRow
from riverboat._sql import Statement
from riverboat._url import async_driver_from_url, driver_from_url
from riverboat.dialect.base import BulkCopy
from riverboat.drivers.base import AsyncDriver, Driver
from riverboat.errors import (
    InvalidInputError,
    NotFoundError,
    NotSupportedError,
    UnknownJobKindError,
)
from riverboat.middleware import MiddlewareStack
from riverboat.runtime.worker import Workers

__all__ = ["default_client_id"]

INSERT_BATCH_MAX = 5000  # River's insert batch size; also bounds one statement's arrays


def default_client_id() -> str:
    """River's client ID shape: ``<host with . as _, ≤60 chars>_<UTC start time>``."""
    host = socket.gethostname().replace(".", "_")[:60]
    stamp = datetime.now(UTC).strftime("%Y_%m_%dT%H_%M_%S_%f")
    return f"{host}_{stamp}"[:100]


class _NotifyLimiter:
    """At most one insert notification per queue per cooldown, as River's notifylimiter
    (a cooldown of 0 notifies every insert)."""

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
        driver: Driver | AsyncDriver | str,
        schema: str | None,
        id: str | None,
        max_attempts: int,
        fetch_cooldown: float | None,
        middleware: Sequence[object] | None,
        workers: Workers | None,
        *,
        want_async: bool,
    ) -> None:
        """``driver`` is a driver or a URL (the client then owns the driver it builds);
        ``want_async`` says which kind of client is being built."""
        self.owns_driver = isinstance(driver, str)
        self.driver: Driver | AsyncDriver
        if isinstance(driver, str):
            from_url = async_driver_from_url if want_async else driver_from_url
            self.driver = from_url(driver, schema=schema)
        else:
            self.driver = _checked_driver(driver, schema, want_async=want_async)
        self.dialect = self.driver.dialect
        self.id = id or default_client_id()
        if not isinstance(self.id, str) or not 0 < len(self.id) <= 100:
            raise InvalidInputError("id", "must be a str of 1 to 100 characters")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise InvalidInputError("max_attempts", "must be an int of at least 1")
        self.defaults = InsertDefaults(max_attempts=max_attempts)
        # River limits insert notifications to one per queue per fetch cooldown. A job
        # inserted inside that window then waits for the next notification or poll
        # (up to a second), so at the default cooldown every insert of available jobs
        # notifies, and the producers' fetch pacing absorbs a storm of them
        # (runtime/producer.py). A cooldown the client sets limits them as River does.
        self._limiter = _NotifyLimiter(fetch_cooldown if fetch_cooldown is not None else 0.0)
        self.workers = workers
        self.skip_unknown_job_check = False
        self.middleware = MiddlewareStack(middleware)
        # riverboat.testing.use_test_config (River's TestConfig): a stubbed clock for
        # inserts (created_at, scheduled_at) and unique periods, and unique enforcement
        # that can be switched off. The runtime shares this clock object.
        self.clock = Clock()
        self.unique_enforcement = True

    def _now(self) -> datetime | None:
        return self.clock.now()

    def _apply_test_config(self, jobs: Sequence[InsertParams], now: datetime | None) -> None:
        for job in jobs:
            if now is not None and job.scheduled_at is None and job.state == "available":
                job.scheduled_at = now  # as River stubs it; the job stays available
            if not self.unique_enforcement:
                job.unique_key = None
                job.unique_states = None

    def _check_kinds(self, jobs: Sequence[InsertParams]) -> None:
        # River refuses to insert a kind this client has no worker for (when it has
        # workers at all), catching typos before a job sits unworkable in the queue.
        if self.workers is None or not len(self.workers) or self.skip_unknown_job_check:
            return
        for job in jobs:
            if job.kind not in self.workers:
                raise UnknownJobKindError(job.kind)

    def resolve_one(
        self, args: object, opts: InsertOpts | None, kind: str | None
    ) -> list[InsertParams]:
        """One job validated and encoded, before any insert hook has run."""
        now = self._now()
        jobs = [resolve_insert(args, opts, kind, self.defaults, now)]
        if now is not None or not self.unique_enforcement:
            self._apply_test_config(jobs, now)
        self._check_kinds(jobs)
        return jobs

    def insert_statement(
        self, args: object, opts: InsertOpts | None, kind: str | None
    ) -> tuple[Statement, list[InsertParams]]:
        jobs = self.resolve_one(args, opts, kind)
        self.middleware.apply_insert(jobs, (args,))
        stmt = self.dialect.job_insert_many(jobs, self._limiter.queues_to_notify(jobs), self._now())
        return stmt, jobs

    def insert_many_statements(
        self, params: Sequence[object]
    ) -> tuple[list[_InsertBatch], list[InsertParams]]:
        jobs = self._resolve_many(params)
        return self.statement_batches(jobs), jobs

    def resolve_params(self, params: Sequence[object]) -> tuple[list[InsertParams], list[object]]:
        """An ``insert_many``'s jobs validated and encoded, before any insert hook has
        run, and the args each was made from."""
        now = self._now()
        jobs = resolve_many(params, self.defaults, now)
        if now is not None or not self.unique_enforcement:
            self._apply_test_config(jobs, now)
        self._check_kinds(jobs)
        return jobs, [p.args if isinstance(p, InsertManyParams) else p for p in params]

    def _resolve_many(self, params: Sequence[object]) -> list[InsertParams]:
        jobs, args = self.resolve_params(params)
        self.middleware.apply_insert(jobs, args)
        return jobs

    def split_fast(self, jobs: list[InsertParams]) -> tuple[list[InsertParams], list[_InsertBatch]]:
        """``insert_many_fast``'s plain jobs (for COPY where the driver can) and statement
        batches for its unique ones, which only ``ON CONFLICT`` can skip."""
        plain = [j for j in jobs if j.unique_key is None]
        unique = [j for j in jobs if j.unique_key is not None]
        return plain, self.statement_batches(unique)

    def statement_batches(self, jobs: list[InsertParams]) -> list[_InsertBatch]:
        batches = []
        now = self._now()
        for start in range(0, len(jobs), INSERT_BATCH_MAX):
            batch, origin = _collapse_unique_twins(jobs[start : start + INSERT_BATCH_MAX])
            stmt = self.dialect.job_insert_many(batch, self._limiter.queues_to_notify(batch), now)
            batches.append(_InsertBatch(stmt, origin))
        return batches

    def insert_many_fast_jobs(
        self, params: Sequence[object]
    ) -> tuple[list[InsertParams], list[_InsertBatch], list[InsertParams]]:
        """``insert_many_fast``'s jobs, split by :meth:`split_fast`, and all of them."""
        jobs = self._resolve_many(params)
        plain, unique_batches = self.split_fast(jobs)
        return plain, unique_batches, jobs

    def copy_batches(self, plain: Sequence[InsertParams]) -> tuple[list[Any], Statement | None]:
        """COPY batches for ``plain`` jobs, and the notification statement to send with
        them (None when the limiter allows none)."""
        dialect = self.dialect
        if not isinstance(dialect, BulkCopy):  # a driver said copy=True over another dialect
            raise NotSupportedError(f"COPY is not supported by the {dialect.name} dialect")
        queues = self._limiter.queues_to_notify(plain)
        notify = dialect.job_insert_notify(queues) if queues else None
        return dialect.job_copy(plain), notify

    def count_inserted(self, batch: _InsertBatch, rows: Sequence[Any]) -> int:
        """Jobs a batch inserted: unique duplicates (and twins in the batch) don't count."""
        return sum(not r.unique_skipped_as_duplicate for r in self.decode_batch(batch, rows))

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


def _checked_driver(
    driver: object, schema: str | None, *, want_async: bool
) -> Driver | AsyncDriver:
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
    # It has a driver's attributes, and the capabilities of the kind asked for.
    return cast("Driver | AsyncDriver", driver)
