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
from collections.abc import Sequence

from riverboat._insert import InsertDefaults
from riverboat.dialect.base import NotificationOutbox
from riverboat.drivers.base import call_deadline
from riverboat.runtime.elector import Elector
from riverboat.runtime.maintenance._service import (
    MaintenanceContext,
    Service,
    ServiceStats,
    backoff_delay,
)
from riverboat.runtime.maintenance.config import MaintenanceConfig
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
        elector: Elector,
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
        self.starts += 1
        for service in self.services.values():
            # Set at each start: services added after construction get it too.
            service.still_leading = self.elector.trusts_leadership
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
