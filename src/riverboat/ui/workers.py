"""The dashboard's ``/workers`` page: riverboat's registry of live workers, each with its
queues (running/max_workers, stopped by an operator, paused) and the jobs it is running
(those whose last ``attempted_by`` entry is its id), plus running jobs claimed by
clients that are not in the registry (Go River clients, or riverboat clients without
riverboat's migration line)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from riverboat._fleet import WorkerInfo
from riverboat._job import JobRow, JobState
from riverboat.ui.line_tables import read_line_table

if TYPE_CHECKING:
    from riverboat.client import AsyncClient

__all__ = ["RUNNING_SHOWN", "workers_context"]

# Running jobs read for the page, newest first; enough for a page, not a census.
RUNNING_SHOWN = 500


@dataclass
class WorkerView:
    info: WorkerInfo
    jobs: list[JobRow] = field(default_factory=list)


async def workers_context(client: AsyncClient) -> dict[str, Any]:
    """What workers.html shows."""
    workers, registry_error = await read_line_table(client.workers_list())
    listed = await client.job_list(  # ids, kinds and times: no heavy column whole
        states=[JobState.RUNNING],
        order_by="id",
        descending=True,
        limit=RUNNING_SHOWN,
        preview=True,
    )
    views = {w.id: WorkerView(w) for w in workers}
    others: dict[str, list[JobRow]] = {}
    for job in listed.jobs:
        claimant = job.attempted_by[-1] if job.attempted_by else "?"
        view = views.get(claimant)
        if view is not None:
            view.jobs.append(job)
        else:
            others.setdefault(claimant, []).append(job)
    return {
        "workers": list(views.values()),
        "others": sorted(others.items()),
        "registry_error": registry_error,
        "running_total": len(listed.jobs),
        "running_cap": RUNNING_SHOWN,
    }
