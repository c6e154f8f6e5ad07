"""QueueCleaner: delete ``river_queue`` rows no producer has refreshed within the
retention (River §7.5; live producers refresh theirs every 10 minutes)."""

from __future__ import annotations

from riverboat.runtime.maintenance._service import MaintenanceContext, Service

__all__ = ["QueueCleaner"]


class QueueCleaner(Service):
    name = "queue_cleaner"

    def __init__(self, ctx: MaintenanceContext) -> None:
        super().__init__(ctx, ctx.config.queue_cleaner_interval)
        self.deleted: list[str] = []

    async def run_once(self) -> None:
        ctx = self.ctx

        async def delete_batch(max: int) -> int:
            rows = await ctx.driver.fetch(
                ctx.dialect.queue_delete_expired(retention=ctx.config.queue_retention, max=max)
            )
            self.deleted.extend(row[0] for row in rows)
            del self.deleted[:-1000]
            return len(rows)

        await self.in_batches(delete_batch)
