"""NotificationCleaner: delete old ``river_notification`` outbox rows (River §7.7).

SQLite has no LISTEN/NOTIFY, so notifications are rows that listeners poll for; the
leader deletes those older than five minutes every minute. Listeners read new rows
within ~50 ms, so a row that old has been seen by everyone who was listening. Only
dialects with an outbox (SQLite) run this service.
"""

from __future__ import annotations

from riverboat.dialect.base import NotificationOutbox
from riverboat.runtime.maintenance._service import MaintenanceContext, Service

__all__ = ["NOTIFICATION_CLEANER_INTERVAL", "NOTIFICATION_RETENTION", "NotificationCleaner"]

# River's sqlite_notification_cleaner.go defaults.
NOTIFICATION_CLEANER_INTERVAL = 60.0
NOTIFICATION_RETENTION = 300.0


class NotificationCleaner(Service):
    name = "notification_cleaner"

    def __init__(
        self,
        ctx: MaintenanceContext,
        *,
        interval: float = NOTIFICATION_CLEANER_INTERVAL,
        retention: float = NOTIFICATION_RETENTION,
    ) -> None:
        super().__init__(ctx, interval)
        if not isinstance(ctx.dialect, NotificationOutbox):
            raise TypeError(f"the {ctx.dialect.name} dialect has no notification outbox")
        self.outbox: NotificationOutbox = ctx.dialect
        self.retention = retention
        self.deleted = 0

    async def run_once(self) -> None:
        async def delete_batch(max: int) -> int:
            count: int = await self.ctx.driver.execute(
                self.outbox.notification_delete_before(retention=self.retention, max=max)
            )
            self.deleted += count
            return count

        await self.in_batches(delete_batch)
