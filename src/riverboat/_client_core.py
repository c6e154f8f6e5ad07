"""What both clients share that does no I/O: their insert plans (riverboat._insert_plan)
built with the client's defaults, limiter, middleware and test config, decoding, and the
checks on how a client is built."""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from riverboat._clock import Clock
from riverboat._insert import (
    SMALLINT_MAX,
    InsertDefaults,
    InsertParams,
    resolve_insert,
    resolve_many,
)
from riverboat._insert_plan import InsertPlan, NotifyLimiter
from riverboat._job import InsertManyParams, InsertOpts, JobRow
from riverboat._json import check_text_param
from riverboat._url import async_driver_from_url, driver_from_url
from riverboat.drivers.base import AsyncDriver, Driver
from riverboat.errors import InvalidInputError, NotFoundError, UnknownJobKindError
from riverboat.flow import check_args_keys, partition_args_keys
from riverboat.middleware import MiddlewareStack
from riverboat.runtime.worker import Workers
from riverboat.workflow import LinkForm

__all__ = ["default_client_id"]


def default_client_id() -> str:
    """River's client ID shape: ``<host with . as _, ≤60 chars>_<UTC start time>``."""
    host = socket.gethostname().replace(".", "_")[:60]
    stamp = datetime.now(UTC).strftime("%Y_%m_%dT%H_%M_%S_%f")
    return f"{host}_{stamp}"[:100]


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
        # Checked before a driver is made from a URL, which would be left open.
        self.id = id or default_client_id()
        if not isinstance(self.id, str) or not 0 < len(self.id) <= 100:
            raise InvalidInputError("id", "must be a str of 1 to 100 characters")
        check_text_param(self.id, "id")  # NUL or a lone surrogate failed start()
        if (
            isinstance(max_attempts, bool)
            or not isinstance(max_attempts, int)
            or not 1 <= max_attempts <= SMALLINT_MAX
        ):
            # Past River's smallint column, every insert failed, blaming opts.max_attempts.
            raise InvalidInputError("max_attempts", f"must be an int from 1 to {SMALLINT_MAX}")
        self.owns_driver = isinstance(driver, str)
        self.driver: Driver | AsyncDriver
        if isinstance(driver, str):
            from_url = async_driver_from_url if want_async else driver_from_url
            self.driver = from_url(driver, schema=schema)
        else:
            self.driver = _checked_driver(driver, schema, want_async=want_async)
        self.dialect = self.driver.dialect
        self.defaults = InsertDefaults(max_attempts=max_attempts)
        # River limits insert notifications to one per queue per fetch cooldown. A job
        # inserted inside that window then waits for the next notification or poll
        # (up to a second), so at the default cooldown every insert of available jobs
        # notifies, and the producers' fetch pacing absorbs a storm of them
        # (runtime/producer.py). A cooldown the client sets limits them as River does.
        # The periodic enqueuer of this client's runtime notifies through it too.
        self.limiter = NotifyLimiter(fetch_cooldown if fetch_cooldown is not None else 0.0)
        self.workers = workers
        self.skip_unknown_job_check = False
        # Per queue this client was configured with, the args keys its flow-control
        # limits are partitioned by: every job inserted into it must have them.
        self.flow_args_keys: dict[str, tuple[str, ...]] = {}
        self.middleware = MiddlewareStack(middleware)
        # riverboat.testing.use_test_config (River's TestConfig): a stubbed clock for
        # inserts (created_at, scheduled_at) and unique periods, and unique enforcement
        # that can be switched off. The runtime shares this clock object.
        self.clock = Clock()
        self.unique_enforcement = True
        # How workflows' links are written (see the client's _workflow_link_form), and
        # when to look again while not in the newest form.
        self.workflow_link_form: LinkForm | None = None
        self.workflow_link_form_after = 0.0

    def set_flow_args_keys(self, queue: str, config: object | None) -> None:
        """Follow a queue added (``config``) or removed (None) at run time."""
        self.flow_args_keys.pop(queue, None)
        if config is not None:
            self.flow_args_keys.update(partition_args_keys({queue: config}))

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

    def plan_one(
        self, args: object, opts: InsertOpts | None, kind: str | None, *, check_kinds: bool = True
    ) -> InsertPlan:
        """One job validated and encoded, to be written as this client writes it;
        ``check_kinds``: refuse a kind without a worker (as River's client does)."""
        now = self._now()
        jobs = [resolve_insert(args, opts, kind, self.defaults, now)]
        if now is not None or not self.unique_enforcement:
            self._apply_test_config(jobs, now)
        if check_kinds:
            self._check_kinds(jobs)
        if self.flow_args_keys:
            check_args_keys(self.flow_args_keys, jobs, many=False)
        return InsertPlan(
            self.dialect,
            jobs,
            (args,),
            self.limiter,
            now,
            self.middleware,
            args_keys=self.flow_args_keys,
        )

    def plan_many(
        self,
        params: Sequence[object],
        *,
        fast: bool = False,
        prepare: Callable[[list[InsertParams]], None] | None = None,
    ) -> InsertPlan:
        """An ``insert_many``'s jobs, all validated and encoded before any is sent;
        ``fast`` (``insert_many_fast``): by ``COPY`` where the driver can. ``prepare``
        completes the resolved jobs before the client's checks (a workflow adds its
        metadata and pending states)."""
        now = self._now()
        jobs = resolve_many(params, self.defaults, now)
        if prepare is not None:
            prepare(jobs)
        if now is not None or not self.unique_enforcement:
            self._apply_test_config(jobs, now)
        self._check_kinds(jobs)
        if self.flow_args_keys:
            check_args_keys(self.flow_args_keys, jobs, many=True)
        args = [p.args if isinstance(p, InsertManyParams) else p for p in params]
        # COPY leaves created_at to the server's clock; a test clock needs the statement.
        copy = fast and self.driver.capabilities.copy and now is None
        return InsertPlan(
            self.dialect,
            jobs,
            args,
            self.limiter,
            now,
            self.middleware,
            copy=copy,
            args_keys=self.flow_args_keys,
        )

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
