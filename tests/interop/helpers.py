"""riverboat's side of the interop tests: clients on a :class:`Target` with quick
maintenance (so a riverboat leader promotes scheduled and retryable jobs within a test),
and reads of jobs by ID."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from riverboat import (
    Client,
    ElectorConfig,
    JobRow,
    MaintenanceConfig,
    QueueConfig,
    RetryPolicy,
    Workers,
)
from tests.interop.river_go import Target
from tests.waiting import wait_until

# Short elections: a leader that stops or dies is replaced within seconds.
FAST_ELECTOR = ElectorConfig(
    elect_interval=0.2,
    elect_jitter=0.05,
    ttl=2.0,
    reelect_interval=0.25,
    safety_margin=0.5,
    attempt_timeout=1.0,
)

QUICK_MAINTENANCE = MaintenanceConfig(
    elector=FAST_ELECTOR, start_jitter=0.0, scheduler_interval=0.2, rescuer_interval=0.5
)


class RetryAfter(RetryPolicy):
    """Retry failed jobs after a fixed delay instead of River's 1 s, 16 s, 81 s..."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def next_retry(self, job: JobRow, now: datetime) -> datetime:
        return now + timedelta(seconds=self.seconds)


def client(target: Target, workers: Workers | None = None, **options: Any) -> Client:
    """A riverboat client on ``target``; with ``workers`` it works the default queue."""
    if workers is not None:
        options.setdefault("queues", {"default": QueueConfig(max_workers=10)})
        options.setdefault("maintenance", QUICK_MAINTENANCE)
        options.setdefault("fetch_poll_interval", 0.1)
        options.setdefault("retry_policy", RetryAfter(0.3))
    return Client(target.url, schema=target.schema, workers=workers, **options)


def wait_for_state(
    client: Client, job_id: int, states: str | tuple[str, ...], timeout: float = 20
) -> JobRow:
    wanted = (states,) if isinstance(states, str) else states

    def reached() -> JobRow | None:
        row = client.job_get(job_id)
        return row if row.state in wanted else None

    job = wait_until(reached, timeout=timeout, what=f"job {job_id} in {wanted}")
    assert job is not None
    return job


def wait_until_metadata(client: Client, job_id: int, key: str, timeout: float = 20) -> JobRow:
    """The job once its metadata has ``key`` (a snooze count, a cancel request...)."""

    def has_key() -> JobRow | None:
        row = client.job_get(job_id)
        return row if key in row.metadata else None

    job = wait_until(has_key, timeout=timeout, what=f"job {job_id} with metadata {key!r}")
    assert job is not None
    return job
