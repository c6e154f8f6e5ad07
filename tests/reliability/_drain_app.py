"""A worker app for drain tests (``--exit-when-idle``): jobs that fail their first
attempt and are retried after ``$RB_RETRY_AFTER`` seconds (default 1), and one kind
whose retry is a minute away (work left for later)."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import riverboat
from riverboat import Job, JobRow, QueueConfig, RetryPolicy, Workers
from tests.reliability._worker_app import _record

ENV = os.environ
workers = Workers()


@workers.register("drain_flaky")
def drain_flaky(job: Job[Any]) -> None:
    """Fails its first attempt when ``args.fail_first``; records itself on success."""
    if job.args.get("fail_first") and job.attempt == 1:
        raise RuntimeError(job.args.get("error", "first attempt fails"))
    _record(f"{job.id} {job.attempt}\n")


@workers.register("drain_later", next_retry=lambda job: datetime.now(UTC) + timedelta(seconds=60))
def drain_later(job: Job[Any]) -> None:
    raise RuntimeError("retry me in a minute")


class RetryAfter(RetryPolicy):
    def next_retry(self, job: JobRow, now: datetime) -> datetime:
        return now + timedelta(seconds=float(ENV.get("RB_RETRY_AFTER", "1")))


def client() -> riverboat.AsyncClient:
    return riverboat.AsyncClient(
        ENV["RB_URL"],
        schema=ENV.get("RB_SCHEMA") or None,
        id=f"drain_{os.getpid()}_{time.time_ns()}",
        queues={"default": QueueConfig(max_workers=10)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.1,
        retry_policy=RetryAfter(),
    )
