"""The dashboard's ``/periodic`` page: each durable periodic job the leaders stored in
``riverboat_periodic_job`` (those with an id), with its schedule, catch-up policy, last
run and next run; an overdue next run says that no leader is running it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from riverboat._periodic import PeriodicJobRecord
from riverboat.ui.line_tables import read_line_table

__all__ = ["OVERDUE_AFTER", "periodic_context"]

# A next run this far in the past means no leader is inserting it (a leader inserts a
# run within a second of its tick).
OVERDUE_AFTER = timedelta(seconds=30)


async def periodic_context(client: Any) -> dict[str, Any]:
    """What periodic.html shows."""
    records: list[PeriodicJobRecord]
    records, error = await read_line_table(client.periodic_job_list())
    now = datetime.now(UTC)
    overdue = {
        r.id for r in records if r.next_run_at is not None and now - r.next_run_at > OVERDUE_AFTER
    }
    return {"records": records, "overdue": overdue, "periodic_error": error}
