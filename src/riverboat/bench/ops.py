"""Per-operation timings: median µs and statements per call, as the seed's first table.

Each operation runs ``calls`` times against the scratch schema through the async driver
the runtime uses. Statement counts come from the driver's own counter; the runner adds
the server's count from pg_stat_statements when available.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from riverboat._insert import InsertDefaults, resolve_insert
from riverboat._job import InsertOpts, JobState
from riverboat.dialect.base import JobStateUpdate
from riverboat.drivers.base import AsyncDriver

__all__ = ["OpResult", "run_ops"]


@dataclass(slots=True)
class OpResult:
    name: str
    calls: int
    median_us: float
    p90_us: float
    statements_per_call: float
    server_statements_per_call: float | None = None


async def _insert_jobs(
    driver: AsyncDriver, count: int, state: JobState = JobState.AVAILABLE
) -> list[int]:
    dialect = driver.dialect
    defaults = InsertDefaults()
    ids: list[int] = []
    now = datetime.now(UTC)
    for start in range(0, count, 5000):
        batch = [
            resolve_insert(
                {"num": 0},
                InsertOpts(pending=state == JobState.PENDING),
                "benchmark",
                defaults,
                now,
            )
            for _ in range(min(5000, count - start))
        ]
        rows = await driver.fetch(dialect.job_insert_many(batch, []))
        ids.extend(r.job.id for r in dialect.decode_insert(rows))
    return ids


async def _time(
    name: str,
    calls: int,
    driver: AsyncDriver,
    op: Callable[[int], Awaitable[object]],
) -> OpResult:
    before = driver.stats.statements
    samples = []
    for i in range(calls):
        start = time.perf_counter()
        await op(i)
        samples.append((time.perf_counter() - start) * 1e6)
    statements = (driver.stats.statements - before) / calls
    samples.sort()
    return OpResult(
        name,
        calls,
        round(statistics.median(samples), 1),
        round(samples[int(len(samples) * 0.9) - 1], 1),
        round(statements, 3),
    )


async def run_ops(
    client: Any,
    calls: int,
    server_count: Callable[[], int] | None = None,
    progress: Callable[[str], None] = lambda _m: None,
) -> list[OpResult]:
    """Run every operation; ``client`` is an insert-capable AsyncClient on the scratch DB."""
    driver = client.driver
    dialect = driver.dialect
    results: list[OpResult] = []

    async def measured(name: str, op: Callable[[int], Awaitable[object]], n: int = calls) -> None:
        progress(f"ops: {name}")
        server_before = server_count() if server_count else None
        result = await _time(name, n, driver, op)
        if server_count is not None and server_before is not None:
            result.server_statements_per_call = round((server_count() - server_before) / n, 3)
        results.append(result)

    async def reset() -> None:
        await driver.execute_script(_truncate(dialect))

    # Claim 50 jobs: one statement locks, marks running and returns full rows.
    await reset()
    await _insert_jobs(driver, 50 * calls)

    async def claim_50(_i: int) -> object:
        return await driver.fetch(
            dialect.job_get_available(queue="default", max_to_lock=50, client_id="bench")
        )

    await measured("claim_50", claim_50)

    # Claim + complete one job: the two statements a job costs without batching.
    await reset()
    await _insert_jobs(driver, calls)

    async def claim_complete(_i: int) -> object:
        rows = await driver.fetch(
            dialect.job_get_available(queue="default", max_to_lock=1, client_id="bench")
        )
        job = dialect.decode_job(rows[0])
        # The completer's statement for a plain completion (the general one where the
        # dialect has no cheaper form).
        complete = dialect.job_complete_many([job.id], [job.attempt], returning=False)
        if complete is None:
            complete = dialect.job_set_state_if_running_many(
                [JobStateUpdate(job.id, JobState.COMPLETED, finalized=True)],
                returning=False,
                skip_locked=True,
            )
        return await driver.execute(complete)

    await measured("claim_complete", claim_complete)

    # Update job: one running job moved to a new state through the completer's statement,
    # returning the row (what events need).
    await reset()
    ids = await _insert_jobs(driver, calls)
    await driver.fetch(
        dialect.job_get_available(queue="default", max_to_lock=calls, client_id="bench")
    )

    async def update_job(i: int) -> object:
        return await driver.fetch(
            dialect.job_set_state_if_running_many(
                [JobStateUpdate(ids[i], JobState.COMPLETED, finalized=True)], skip_locked=True
            )
        )

    await measured("update_job", update_job)

    async def merge_metadata(i: int) -> object:
        return await client.job_update(ids[i], metadata={"k": i})

    await measured("merge_metadata", merge_metadata)

    async def insert_pending(i: int) -> object:
        return await client.insert({"num": i}, InsertOpts(pending=True), kind="benchmark")

    await measured("insert_pending", insert_pending)

    async def upsert_queue(i: int) -> object:
        return await driver.fetch(dialect.queue_create_or_set_updated_at(f"bench_{i % 10}"))

    await measured("upsert_queue", upsert_queue)

    async def leader_acquire(i: int) -> object:
        rows = await driver.fetch(dialect.leader_attempt_elect(leader_id=f"bench{i}", ttl=15))
        if rows:
            leader = dialect.decode_leader(rows[0])
            # Resign outside the measured statement count's intent: it is part of the
            # cycle and counted, so the op reports elect + resign per call.
            await driver.execute(
                dialect.leader_resign(leader_id=leader.leader_id, elected_at=leader.elected_at)
            )
        return rows

    await measured("leader_elect_resign", leader_acquire)

    await reset()
    ids = await _insert_jobs(driver, calls)

    async def cancel(i: int) -> object:
        return await client.job_cancel(ids[i])

    await measured("cancel", cancel)

    async def retry(i: int) -> object:
        return await client.job_retry(ids[i])

    await measured("retry", retry)

    batch = 1000
    rounds = max(3, min(calls // 20, 20))

    async def delete_finalized(_i: int) -> object:
        return await driver.execute(
            dialect.job_delete_before(
                cancelled_retention=0.0,
                completed_retention=0.0,
                discarded_retention=0.0,
                max=batch,
            )
        )

    await reset()
    ids = await _insert_jobs(driver, batch * rounds)
    await driver.fetch(
        dialect.job_get_available(queue="default", max_to_lock=len(ids), client_id="bench")
    )
    for start in range(0, len(ids), 5000):
        await driver.execute(
            dialect.job_set_state_if_running_many(
                [
                    JobStateUpdate(i, JobState.COMPLETED, finalized=True)
                    for i in ids[start : start + 5000]
                ],
                returning=False,
            )
        )
    await measured(f"delete_finalized_{batch}", delete_finalized, rounds)
    return results


def _truncate(dialect: Any) -> str:
    prefix = f'"{dialect.schema}".' if dialect.schema else ""
    if dialect.name == "sqlite":
        return f"DELETE FROM {prefix}river_job; DELETE FROM {prefix}river_leader;"
    return f"TRUNCATE {prefix}river_job, {prefix}river_leader"
