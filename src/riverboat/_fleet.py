"""What riverboat's registry of live workers says about one client: :class:`WorkerInfo`,
read by ``client.workers_list()``, ``riverboat workers`` and the dashboard's
``/workers`` page (the rows are written by :mod:`riverboat.runtime.registry`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["WorkerInfo", "WorkerQueue", "decode_job_ids", "decode_queues"]


@dataclass(frozen=True, slots=True)
class WorkerQueue:
    """One queue of a worker, as its last heartbeat reported it."""

    name: str
    max_workers: int
    running: int
    stopped: bool = False  # by an operator (``workers stop``), for this worker only
    paused: bool = False  # River's queue pause (``queues pause``), for every client
    # Its flow control (riverboat.flow.FlowControl.describe), None without any.
    flow: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One client in ``riverboat_client``. ``alive`` is False for a client whose
    heartbeats stopped (its lease ran out) and whose jobs the leader has not made
    available again yet. ``queue_settings`` is what operators asked of it; ``job_ids``
    the jobs it held at its last heartbeat (running, or finished with the outcome not yet
    written)."""

    id: str
    host: str
    pid: int
    riverboat_version: str
    queues: list[WorkerQueue]
    slots_in_use: int
    started_at: datetime
    heartbeat_at: datetime
    expires_at: datetime
    alive: bool
    queue_settings: dict[str, Any] = field(default_factory=dict)
    job_ids: list[int] = field(default_factory=list)


def decode_queues(value: Any) -> list[WorkerQueue]:
    out = []
    if isinstance(value, dict):
        for name, q in sorted(value.items()):
            if not isinstance(q, dict):
                continue
            out.append(
                WorkerQueue(
                    str(name),
                    int(q.get("max_workers") or 0),
                    int(q.get("running") or 0),
                    bool(q.get("stopped", False)),
                    bool(q.get("paused", False)),
                    q["flow"] if isinstance(q.get("flow"), dict) else None,
                )
            )
    return out


def decode_job_ids(value: Any) -> list[int]:
    if not isinstance(value, list):
        return []
    return [int(v) for v in value if isinstance(v, int) and not isinstance(v, bool)]
