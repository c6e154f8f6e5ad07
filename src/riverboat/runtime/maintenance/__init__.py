"""The leader's maintenance services, River's defaults, and what starts and stops them.

Only the elected leader runs them. Each service has its own interval and its own
exponential error backoff that no ordinary wake-up can cut short:

==================  ==========  ====================================================
service             interval    does
==================  ==========  ====================================================
scheduler           5 s         promotes due scheduled/retryable jobs
rescuer             30 s        recovers jobs stuck running (rescue after 1 h)
cleaner             30 s        deletes finalized jobs past retention
queue_cleaner       1 h         deletes river_queue rows idle for 24 h
periodic            per job     inserts periodic jobs
notification_...    1 min       deletes SQLite outbox notifications older than 5 min
reindexer           daily       ``REINDEX INDEX CONCURRENTLY`` of River's job indexes at
                                midnight UTC (Postgres only; see ``reindexer``)
==================  ==========  ====================================================

A dialect that lacks a service's statements simply doesn't run that service (only
SQLite has the notification outbox, only Postgres is reindexed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from riverboat._insert import InsertDefaults
from riverboat.dialect.base import NotificationOutbox
from riverboat.drivers.base import call_deadline
from riverboat.errors import InvalidInputError
from riverboat.runtime.elector import ElectorConfig
from riverboat.runtime.maintenance._service import (
    MaintenanceContext,
    Service,
    ServiceStats,
    backoff_delay,
)
from riverboat.runtime.maintenance.periodic import PeriodicJob, PeriodicJobs

__all__ = [
    "Maintainer",
    "MaintenanceConfig",
    "MaintenanceContext",
    "PeriodicJob",
    "Service",
    "ServiceStats",
    "backoff_delay",
    "build_services",
]

log = logging.getLogger("riverboat.maintenance")

HOUR = 3600.0
DAY = 24 * HOUR
# River's JobTimeoutDefault; the rescue delay grows by the job timeout only when the
# user chose another one (River adds JobTimeout when it was set explicitly).
JOB_TIMEOUT_DEFAULT = 60.0

_DURATIONS = (
    "cleaner_interval",
    "cancelled_job_retention",
    "completed_job_retention",
    "discarded_job_retention",
    "rescuer_interval",
    "rescue_stuck_jobs_after",
    "dead_client_check_interval",
    "scheduler_interval",
    "queue_cleaner_interval",
    "queue_retention",
    "error_backoff_base",
    "error_backoff_max",
    "start_jitter",
    "batch_pause_min",
    "batch_pause_max",
    "run_timeout",
)
_MAY_BE_NONE = {"cancelled_job_retention", "completed_job_retention", "discarded_job_retention"}
_MAY_BE_ZERO = {"start_jitter", "batch_pause_min", "batch_pause_max"}


@dataclass(slots=True, frozen=True)
class MaintenanceConfig:
    """Leader election and maintenance settings; the defaults are River's.

    Durations are seconds or ``timedelta``. A retention of ``None`` keeps jobs in that
    state forever. ``rescue_stuck_jobs_after=None`` means River's default: 1 h, or the
    client's job timeout + 1 h when a non-default job timeout is set.
    """

    elector: ElectorConfig = field(default_factory=ElectorConfig)
    cleaner_interval: float = 30.0
    cancelled_job_retention: float | None = DAY
    completed_job_retention: float | None = DAY
    discarded_job_retention: float | None = 7 * DAY
    cleaner_queues_excluded: Sequence[str] | None = None
    rescuer_interval: float = 30.0
    rescue_stuck_jobs_after: float | None = None
    # How often the leader looks for clients whose registry lease ran out (runtime/
    # registry.py) and makes their running jobs available again.
    dead_client_check_interval: float = 2.0
    scheduler_interval: float = 5.0
    queue_cleaner_interval: float = HOUR
    queue_retention: float = DAY
    batch_size: int = 10_000
    # riverboat's error backoff per service: base, doubling, capped; ±10%.
    error_backoff_base: float = 1.0
    error_backoff_max: float = 64.0
    # Each service waits a random 0..start_jitter before its first run (River: 1 s).
    start_jitter: float = 1.0
    # Pause between full batches (River: 50 ms to 1 s) and a run's time limit (30 s).
    batch_pause_min: float = 0.05
    batch_pause_max: float = 1.0
    run_timeout: float = 30.0
    # The reindexer (Postgres): River's Config.ReindexerIndexNames (None: River's
    # default list; [] rebuilds nothing), ReindexerSchedule (None: midnight UTC daily;
    # or a cron expression, an interval, or a function from a time to the next run) and
    # ReindexerTimeout per index (-1 or None: no limit). reindexer_enabled=False turns it
    # off entirely.
    reindexer_enabled: bool = True
    reindexer_index_names: Sequence[str] | None = None
    reindexer_schedule: str | timedelta | float | Callable[[datetime], datetime] | None = None
    reindexer_timeout: float | None = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.elector, ElectorConfig):
            raise InvalidInputError("maintenance.elector", "must be an ElectorConfig")
        for name in _DURATIONS:
            value = getattr(self, name)
            if value is None and (name in _MAY_BE_NONE or name == "rescue_stuck_jobs_after"):
                continue
            if isinstance(value, timedelta):
                value = value.total_seconds()
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidInputError(f"maintenance.{name}", "must be seconds or a timedelta")
            if value < 0 or (value == 0 and name not in _MAY_BE_ZERO):
                raise InvalidInputError(f"maintenance.{name}", "must be positive")
            object.__setattr__(self, name, float(value))
        if self.batch_pause_max < self.batch_pause_min:
            raise InvalidInputError("maintenance.batch_pause_max", "must be ≥ batch_pause_min")
        if (
            isinstance(self.batch_size, bool)
            or not isinstance(self.batch_size, int)
            or self.batch_size < 1
        ):
            raise InvalidInputError("maintenance.batch_size", "must be a positive int")
        if self.cleaner_queues_excluded is not None:
            object.__setattr__(self, "cleaner_queues_excluded", list(self.cleaner_queues_excluded))
        self._check_reindexer()

    def _check_reindexer(self) -> None:
        from riverboat.runtime.maintenance.reindexer import (
            reindexer_schedule,
            validate_index_names,
        )

        if not isinstance(self.reindexer_enabled, bool):
            raise InvalidInputError("maintenance.reindexer_enabled", "must be True or False")
        if self.reindexer_index_names is not None:
            names = list(validate_index_names(self.reindexer_index_names))
            object.__setattr__(self, "reindexer_index_names", names)
        timeout = self.reindexer_timeout
        if isinstance(timeout, timedelta):
            timeout = timeout.total_seconds()
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise InvalidInputError(
                    "maintenance.reindexer_timeout", "must be seconds, a timedelta, -1 or None"
                )
            if timeout <= 0 and timeout != -1:
                raise InvalidInputError(
                    "maintenance.reindexer_timeout", "must be positive (or -1/None: no limit)"
                )
            timeout = float(timeout)
        object.__setattr__(self, "reindexer_timeout", timeout)
        reindexer_schedule(self.reindexer_schedule)  # a bad cron expression fails here

    def rescue_after(self, job_timeout: float | None) -> float:
        """The running time after which a job counts as stuck."""
        timeout = job_timeout if job_timeout is not None and job_timeout > 0 else 0.0
        if self.rescue_stuck_jobs_after is not None:
            if timeout and self.rescue_stuck_jobs_after < timeout:
                raise InvalidInputError(
                    "maintenance.rescue_stuck_jobs_after", "must not be less than job_timeout"
                )
            return self.rescue_stuck_jobs_after
        if timeout and timeout != JOB_TIMEOUT_DEFAULT:
            return timeout + HOUR
        return HOUR


def build_services(
    ctx: MaintenanceContext,
    periodic_jobs: Sequence[PeriodicJob] | PeriodicJobs,
    insert_defaults: InsertDefaults | None = None,
) -> list[Service]:
    """The services this dialect supports; periodic jobs use the client's insert
    defaults (max_attempts...)."""
    from riverboat.runtime.maintenance.cleaner import JobCleaner
    from riverboat.runtime.maintenance.periodic import PeriodicJobEnqueuer
    from riverboat.runtime.maintenance.queue_cleaner import QueueCleaner
    from riverboat.runtime.maintenance.rescuer import DeadClientRescuer, JobRescuer
    from riverboat.runtime.maintenance.scheduler import JobScheduler

    services: list[Service] = [
        JobScheduler(ctx),
        JobRescuer(ctx),
        DeadClientRescuer(ctx),
        JobCleaner(ctx),
        QueueCleaner(ctx),
    ]
    # Always there, so periodic jobs added to a running client start on the leader; with
    # none it sleeps. A PeriodicJobs bundle is shared with the client (add/remove live).
    jobs = periodic_jobs if isinstance(periodic_jobs, PeriodicJobs) else list(periodic_jobs)
    services.append(PeriodicJobEnqueuer(ctx, jobs, insert_defaults))
    if isinstance(ctx.dialect, NotificationOutbox):  # SQLite's river_notification
        from riverboat.runtime.maintenance.notification_cleaner import NotificationCleaner

        services.append(NotificationCleaner(ctx))
    from riverboat.runtime.maintenance.reindexer import build_reindexer

    reindexer = build_reindexer(ctx)
    if reindexer is not None:
        services.append(reindexer)
    return services


class Maintainer:
    """Starts the services when the elector gains leadership and stops them when it
    loses it (River's QueueMaintainerLeader)."""

    def __init__(
        self,
        elector: Any,
        services: Sequence[Service],
        *,
        stop_timeout: float = 5.0,
        call_timeout: float | None = None,
    ):
        self.elector = elector
        # The services' tasks run under this call deadline (runtime/health.py), so one
        # stuck on a connection that stopped answering fails and retries on a fresh one.
        self._call_timeout = call_timeout
        self.services = {service.name: service for service in services}
        self._stop_timeout = stop_timeout
        self._task: asyncio.Task[None] | None = None
        self._running: list[asyncio.Task[None]] = []
        self._stop_services = asyncio.Event()
        self.running = asyncio.Event()
        self.starts = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="riverboat-maintainer")

    async def _watch(self) -> None:
        try:
            while True:
                await self.elector.leader.wait()
                self._start_services()
                await self.elector.follower.wait()
                await self._stop_all()
        finally:
            await self._stop_all()

    def _start_services(self) -> None:
        self._stop_services = asyncio.Event()
        trusts = getattr(self.elector, "trusts_leadership", None)
        self.starts += 1
        for service in self.services.values():
            if trusts is not None:
                service.still_leading = trusts  # services added after construction too
            with call_deadline(self._call_timeout):
                self._running.append(
                    asyncio.create_task(
                        service.run(self._stop_services), name=f"riverboat-{service.name}"
                    )
                )
        self.running.set()

    async def _stop_all(self) -> None:
        running, self._running = self._running, []
        if not running:
            return
        self._stop_services.set()
        done, pending = await asyncio.wait(running, timeout=self._stop_timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("maintenance service failed", exc_info=task.exception())
        self.running.clear()

    async def stop(self) -> None:
        """Stop the services (if leading) and stop following the elector."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        await self._stop_all()
