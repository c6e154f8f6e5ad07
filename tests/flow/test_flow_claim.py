"""The flow-controlled claim's cost (riverboat.flow): none when no limit is set, and
batches as large as the unlimited producer's when a limit does not bind."""

from __future__ import annotations

from typing import Any

import riverboat
from riverboat import ConcurrencyLimit, InsertManyParams
from riverboat.runtime.events import EventKind
from riverboat.runtime.producer import QueueConfig
from riverboat.runtime.worker import Job, Workers
from tests.runtime.helpers import fetch_row, next_events

JOBS = 200
MAX_WORKERS = 10


def _noop_workers() -> Workers:
    workers = Workers()

    @workers.register("noop")
    async def noop(job: Job[Any]) -> None:
        return None

    return workers


async def _work_backlog(driver: Any, queue: QueueConfig) -> dict[str, int]:
    """Work JOBS no-op jobs with one client; the claims it made, by statement."""
    client = riverboat.AsyncClient(
        driver,
        queues={"default": queue},
        workers=_noop_workers(),
        fetch_poll_interval=120.0,  # every claim after the first is a refill
    )
    await client.insert_many([InsertManyParams({}, kind="noop") for _ in range(JOBS)])
    sub = client.subscribe(EventKind.JOB_COMPLETED, maxsize=JOBS + 10)
    before = dict(driver.stats.by_query)
    await client.start()
    try:
        events = await next_events(sub, JOBS, timeout=60)
    finally:
        await client.stop()
    assert len({event.job.id for event in events if event.job is not None}) == JOBS
    return {
        name: driver.stats.by_query.get(name, 0) - before.get(name, 0)
        for name in ("job_get_available", "job_get_available_flow")
    }


async def test_a_queue_without_flow_control_claims_with_rivers_statement(
    apg_driver: Any,
) -> None:
    claims = await _work_backlog(apg_driver, QueueConfig(max_workers=MAX_WORKERS))
    assert claims["job_get_available_flow"] == 0
    assert claims["job_get_available"] > 0


async def test_a_limit_that_does_not_bind_claims_in_batches(
    apg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    # As many as the slots: a job ending here makes room for the next one only once
    # its outcome is written, which the claim does itself (in the same statement).
    limited = QueueConfig(
        max_workers=MAX_WORKERS, concurrency=ConcurrencyLimit(global_limit=MAX_WORKERS)
    )
    claims = await _work_backlog(apg_driver, limited)
    assert claims["job_get_available"] == 0
    # As the unlimited producer: at most two claims per max_workers jobs (a refill
    # waits for half the slots), plus the one that finds the queue empty.
    assert JOBS // MAX_WORKERS <= claims["job_get_available_flow"] <= 2 * JOBS // MAX_WORKERS + 1
    # Every job completed, and the record never shows more than the limit running.
    overlap = fetch_row(
        pg_url,
        pg_schema,
        """SELECT count(*) FILTER (WHERE state <> 'completed'),
                  max((SELECT count(*) FROM river_job o
                       WHERE o.attempted_at <= j.attempted_at
                         AND o.finalized_at > j.attempted_at))
           FROM river_job j""",
    )
    assert overlap[0] == 0 and overlap[1] <= MAX_WORKERS
