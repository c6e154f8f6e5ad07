"""The worker application tests/flow runs in real ``riverboat worker`` processes:
one queue whose flow control comes from ``$RB_FLOW`` (JSON: ``concurrency``,
``rate_limit``, ``sequences``, ``sequence_on_discard``), jobs of kind ``flow_job`` that
sleep ``args.sleep`` seconds and raise when ``args.fail`` is set."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import riverboat
from riverboat import (
    ConcurrencyLimit,
    ElectorConfig,
    Job,
    MaintenanceConfig,
    QueueConfig,
    RateLimit,
    Workers,
)

workers = Workers()


@workers.register("flow_job")
async def flow_job(job: Job[Any]) -> None:
    await asyncio.sleep(job.args.get("sleep", 0.2))
    if job.args.get("fail"):
        raise RuntimeError("asked to fail")


def queue_config() -> QueueConfig:
    spec = json.loads(os.environ.get("RB_FLOW", "{}"))
    concurrency = spec.get("concurrency")
    rate = spec.get("rate_limit")
    return QueueConfig(
        max_workers=int(os.environ.get("RB_MAX_WORKERS", "10")),
        concurrency=ConcurrencyLimit(**concurrency) if concurrency else None,
        rate_limit=RateLimit(**rate) if rate else None,
        sequences=spec.get("sequences", False),
        sequence_on_discard=spec.get("sequence_on_discard", "halt"),
    )


def client() -> riverboat.AsyncClient:
    """``$RB_FAST_FLEET=1``: a killed process counts as dead after 2 s and the leader
    (elected within a second) makes its jobs available again at once."""
    fast = os.environ.get("RB_FAST_FLEET") == "1"
    fleet: dict[str, Any] = {}
    if fast:
        fleet = {
            "heartbeat_interval": 0.3,
            "dead_after": 2.0,
            "maintenance": MaintenanceConfig(
                elector=ElectorConfig(elect_interval=0.2, ttl=2.0, reelect_interval=0.25),
                start_jitter=0.0,
                rescuer_interval=0.3,
                dead_client_check_interval=0.3,
            ),
        }
    return riverboat.AsyncClient(
        os.environ["RB_URL"],
        schema=os.environ.get("RB_SCHEMA") or None,
        id=f"flow_{os.getpid()}_{time.time_ns()}",
        queues={"default": queue_config()},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        **fleet,
    )
