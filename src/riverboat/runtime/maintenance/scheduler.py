"""JobScheduler: make due ``scheduled`` and ``retryable`` jobs available (River §7.3).

One statement per batch promotes jobs whose time comes within the look-ahead (the
interval), discards unique jobs whose key is already taken, and notifies each queue that
got a job it can fetch now.
"""

from __future__ import annotations

from riverboat.runtime.maintenance._service import MaintenanceContext, Service

__all__ = ["JobScheduler"]


class JobScheduler(Service):
    name = "scheduler"
    # Jobs made available, and unique jobs discarded as duplicates, since it was built.
    promoted = 0
    discarded = 0

    def __init__(self, ctx: MaintenanceContext) -> None:
        super().__init__(ctx, ctx.config.scheduler_interval)

    async def run_once(self) -> None:
        ctx = self.ctx

        async def schedule_batch(max: int) -> int:
            rows = await ctx.driver.fetch(
                ctx.dialect.job_schedule(
                    max=max,
                    lookahead=self.interval,
                    now=ctx.clock.now(),
                )
            )
            queues = {row[1] for row in rows if not row[2]}
            self.discarded += sum(1 for row in rows if row[2])
            self.promoted += sum(1 for row in rows if not row[2])
            if queues:
                ctx.wake_queues(queues)  # local producers (poll-only clients) too
            return len(rows)

        await self.in_batches(schedule_batch)
