"""What riverboat stores about one durable periodic job: :class:`PeriodicJobRecord`,
read by ``client.periodic_job_list()``, ``riverboat periodic`` and the dashboard's
``/periodic`` page (the rows are written by the leader's periodic enqueuer,
:mod:`riverboat.runtime.maintenance.periodic`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

__all__ = ["CATCH_UP_LIMIT", "CATCH_UP_POLICIES", "CatchUp", "PeriodicJobRecord"]

CatchUp = Literal["none", "one", "all"]

CATCH_UP_POLICIES: tuple[CatchUp, ...] = ("none", "one", "all")
"""What a new leader does with the ticks that passed while no leader ran a periodic job:
skip them, insert one run (for the latest), or insert every one (at most
:data:`CATCH_UP_LIMIT`, the latest)."""

CATCH_UP_LIMIT = 100
"""The most missed ticks of one periodic job that ``catch_up="all"`` inserts after
downtime: the latest ones; older ones are skipped with a warning."""


@dataclass(frozen=True, slots=True)
class PeriodicJobRecord:
    """One row of ``riverboat_periodic_job``: a periodic job's id, the schedule its times
    were computed for, its catch-up policy, the last tick inserted and the next one."""

    id: str
    schedule: str
    catch_up: str
    next_run_at: datetime | None
    last_run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    # The insert of a job added at runtime on some client (kind, args, queue, priority,
    # max_attempts, tags, metadata): what a leader without the job's code inserts.
    template: dict[str, Any] | None = None
    # When a client removed it at runtime (None: it is defined).
    removed_at: datetime | None = None
