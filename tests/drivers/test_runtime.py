"""Working jobs end to end on each driver: AsyncClient with queues on async drivers, the
sync Client's embedded runtime (over the driver's async twin) on sync drivers."""

from __future__ import annotations

import threading
from typing import Any

from riverboat import InsertManyParams, Job, JobState, QueueConfig, Workers
from tests.drivers.harness import Harness


async def test_works_jobs_end_to_end(h: Harness) -> None:
    workers = Workers()
    seen: list[int] = []
    lock = threading.Lock()

    if h.is_async:

        @workers.register("conf_work")
        async def work(job: Job[Any]) -> None:
            seen.append(job.args["i"])

        @workers.register("conf_fail")
        async def fail(job: Job[Any]) -> None:
            raise ValueError("conformance failure")

    else:

        @workers.register("conf_work")
        def work_sync(job: Job[Any]) -> None:
            with lock:
                seen.append(job.args["i"])

        @workers.register("conf_fail")
        def fail_sync(job: Job[Any]) -> None:
            raise ValueError("conformance failure")

    client = h.client(
        queues={"default": QueueConfig(max_workers=4)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.1,
    )
    results = await h.call(
        client.insert_many,
        [InsertManyParams({"i": i}, kind="conf_work") for i in range(20)]
        + [InsertManyParams({}, kind="conf_fail")],
    )
    await h.call(client.run_until_idle)
    assert sorted(seen) == list(range(20))
    reader = h.client()
    for result in results[:20]:
        job = await h.call(reader.job_get, result.job.id)
        assert job.state is JobState.COMPLETED and job.attempt == 1
        assert job.finalized_at is not None
    failed = await h.call(reader.job_get, results[20].job.id)
    # A retry due within the scheduler's interval is made available at once (River).
    assert failed.state in (JobState.RETRYABLE, JobState.AVAILABLE)
    assert failed.errors and failed.errors[0].attempt == 1
    assert "conformance failure" in failed.errors[0].error
