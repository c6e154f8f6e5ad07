"""The riverboat worker process of the mixed-fleet tests, run through the real
``python -m riverboat.cli worker tests.interop._fleet_app:client`` command.

Configured by environment variables: ``$IO_URL``, ``$IO_SCHEMA``, ``$IO_CLIENT_ID`` and
``$IO_OUT``. Every ``fleet_job`` appends ``<job id> <attempt>`` to ``$IO_OUT/exec.<pid>``
with one ``write`` on an ``O_APPEND`` descriptor when its body returns, so the test can
count executions across processes (River's worker reports its own on stdout). Leadership
changes are printed as ``LEADER <id>`` / ``FOLLOWER <id>``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import riverboat
from riverboat import Job, QueueConfig, Workers
from riverboat.runtime.runner import Runtime
from tests.interop.helpers import QUICK_MAINTENANCE

ENV = os.environ
_fd: int | None = None

workers = Workers()


@workers.register("fleet_job")
async def fleet_job(job: Job[Any]) -> None:
    """Sleeps ``args.sleep_ms`` (as River's worker does for ``do: sleep``), then records."""
    global _fd
    await asyncio.sleep(job.args.get("sleep_ms", 0) / 1000)
    if _fd is None:
        path = os.path.join(ENV["IO_OUT"], f"exec.{os.getpid()}")
        _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(_fd, f"{job.id} {job.attempt}\n".encode())


def _announce_leadership(runtime: Runtime) -> None:
    def changed(leading: bool) -> None:
        print("LEADER" if leading else "FOLLOWER", runtime.client_id, flush=True)

    assert runtime.elector is not None
    runtime.elector.on_change(changed)


def client() -> riverboat.AsyncClient:
    c = riverboat.AsyncClient(
        ENV["IO_URL"],
        schema=ENV.get("IO_SCHEMA") or None,
        id=ENV["IO_CLIENT_ID"],
        queues={"default": QueueConfig(max_workers=10)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.1,
        maintenance=QUICK_MAINTENANCE,
    )
    c.runtime.on_start.append(_announce_leadership)
    return c
