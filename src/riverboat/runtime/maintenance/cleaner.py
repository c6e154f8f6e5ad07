"""JobCleaner: delete finalized jobs past their retention (River §7.1).

Each batch is one bounded DELETE that skips rows other transactions hold and re-checks
the state on the row it deletes, so a job that a concurrent JobRetry moved back to
``available`` is never deleted (see the statement's comment).
"""

from __future__ import annotations

from riverboat.runtime.maintenance._service import MaintenanceContext, Service

__all__ = ["JobCleaner"]


class JobCleaner(Service):
    name = "cleaner"
    deleted = 0  # jobs deleted since the service was built

    def __init__(self, ctx: MaintenanceContext) -> None:
        super().__init__(ctx, ctx.config.cleaner_interval)

    async def run_once(self) -> None:
        ctx = self.ctx
        cfg = ctx.config
        if (
            cfg.cancelled_job_retention is None
            and cfg.completed_job_retention is None
            and cfg.discarded_job_retention is None
        ):
            return

        async def delete_batch(max: int) -> int:
            count: int = await ctx.driver.execute(
                ctx.dialect.job_delete_before(
                    cancelled_retention=cfg.cancelled_job_retention,
                    completed_retention=cfg.completed_job_retention,
                    discarded_retention=cfg.discarded_job_retention,
                    max=max,
                    queues_excluded=cfg.cleaner_queues_excluded,
                )
            )
            self.deleted += count
            return count

        await self.in_batches(delete_batch)
