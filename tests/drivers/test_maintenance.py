"""The leader's maintenance services in real clients, on every driver: the scheduler,
the rescuer, the cleaners, and periodic jobs enqueued once per tick across two clients.

Sync drivers run them in the sync client's embedded runtime (its own thread and event
loop), so the tests poll the services' stats rather than await their events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from riverboat import AsyncClient, InsertOpts, JobState, PeriodicJob, QueueConfig
from riverboat.runtime.maintenance import Service
from riverboat.runtime.outcomes import RESCUE_ERROR
from tests.drivers.harness import Harness
from tests.leadership._helpers import TickArgs, default_workers, fast_maintenance
from tests.waiting import wait_until_async


@asynccontextmanager
async def running(h: Harness, client_id: str, **kwargs: Any) -> AsyncIterator[AsyncClient]:
    """A started client on the case's driver, with River's queues and workers; yields
    the AsyncClient that runs the runtime (the sync client's embedded one)."""
    kwargs.setdefault("workers", default_workers())
    kwargs.setdefault("maintenance", fast_maintenance())
    client = h.client(id=client_id, queues={"default": QueueConfig(max_workers=5)}, **kwargs)
    await h.call(client.start)
    try:
        runtime_client = client if h.is_async else client.async_client
        assert runtime_client is not None
        yield runtime_client
    finally:
        await h.call(client.stop)
        await h.call(client.close)


def service(client: AsyncClient, name: str) -> Service:
    maintainer = client.runtime.maintainer
    assert maintainer is not None
    found: Service = maintainer.services[name]
    return found


async def succeeded(client: AsyncClient, name: str) -> None:
    await wait_until_async(
        lambda: (
            client.runtime.maintainer is not None
            and name in client.runtime.maintainer.services
            and service(client, name).stats.successes >= 1
        ),
        timeout=10,
        what=f"a successful {name} run",
    )


async def test_scheduler_promotes_a_scheduled_job_and_it_runs(h: Harness) -> None:
    maintenance = fast_maintenance(scheduler_interval=0.2)
    async with running(h, "sched", maintenance=maintenance) as client:
        opts = InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(seconds=0.5))
        job = (await h.call(h.client().insert, TickArgs(n=1), opts)).job
        assert job.state is JobState.SCHEDULED

        async def completed() -> bool:
            return (await h.call(h.client().job_get, job.id)).state is JobState.COMPLETED

        await wait_until_async(completed, timeout=10)
        assert service(client, "scheduler").stats.successes >= 1


async def test_rescuer_and_cleaners_on_the_leader(h: Harness) -> None:
    def stuck(kind: str, metadata: dict[str, Any], attempt: int = 1, max_attempts: int = 25) -> int:
        return h.insert_job_row(
            kind=kind,
            queue="elsewhere",
            state="running",
            attempt=attempt,
            max_attempts=max_attempts,
            attempted_at=-7200,
            scheduled_at=-7200,
            metadata=metadata,
        )

    ids = {
        "retry": stuck("noop", {"river:rescue_count": 2}),
        "cancel": stuck("noop", {"cancel_attempted_at": "2024-01-01T00:00:00Z"}),
        "unknown": stuck("nobody_works_this", {}),
        "exhausted": stuck("noop", {}, attempt=3, max_attempts=3),
    }
    old_done = h.insert_job_row(kind="kk", state="completed", finalized_at=-2 * 86400)
    fresh_done = h.insert_job_row(kind="kk", state="completed", finalized_at=0)
    services = ["rescuer", "cleaner"]
    if h.dialect_name == "sqlite":  # the outbox, SQLite's LISTEN/NOTIFY, is cleaned too
        services.append("notification_cleaner")
        h.sql(
            "INSERT INTO river_notification (topic, payload, created_at) VALUES "
            f"('river_insert', '{{}}', {h.now_sql(-600)}), ('river_insert', '{{}}', {h.now_sql()})"
        )
    maintenance = fast_maintenance(rescuer_interval=0.2, rescue_stuck_jobs_after=3600)
    async with running(h, "rescuer", maintenance=maintenance) as client:
        for name in services:
            await succeeded(client, name)
    reader = h.client()
    retried = await h.call(reader.job_get, ids["retry"])
    # Its retry is due in about a second: the scheduler may already have made it
    # available (River does the same within the scheduler's look-ahead).
    assert retried.state in (JobState.RETRYABLE, JobState.AVAILABLE) and retried.attempt == 1
    assert retried.metadata["river:rescue_count"] == 3
    assert [e.error for e in retried.errors] == [RESCUE_ERROR]
    assert (await h.call(reader.job_get, ids["cancel"])).state is JobState.CANCELLED
    assert (await h.call(reader.job_get, ids["unknown"])).state is JobState.DISCARDED
    assert (await h.call(reader.job_get, ids["exhausted"])).state is JobState.DISCARDED
    # The cleaner kept the fresh completed job only; the outbox lost its old row.
    listed = (await h.call(reader.job_list, states=["completed"])).jobs
    assert [j.id for j in listed] == [fresh_done] and old_done != fresh_done
    if h.dialect_name == "sqlite":
        old = h.sql(
            "SELECT count(*) FROM river_notification "
            "WHERE created_at < datetime('now', '-5 minutes')"
        )
        assert old == [(0,)]


async def test_periodic_job_once_per_tick_across_two_clients(h: Harness) -> None:
    periodic = [PeriodicJob(timedelta(seconds=0.5), lambda: TickArgs(n=1), id="half_second")]

    def ticks() -> list[tuple[Any, ...]]:
        return h.sql("SELECT scheduled_at FROM river_job WHERE kind = 'periodic_tick'")

    async with running(h, "p1", periodic_jobs=periodic) as first:
        async with running(h, "p2", periodic_jobs=periodic) as second:
            electors = [c.runtime.elector for c in (first, second)]
            await wait_until_async(
                lambda: any(e is not None and e.is_leader for e in electors),
                timeout=30,  # a loaded CI machine; the usual wait is well under a second
                what="a leader",
            )
            await wait_until_async(lambda: len(ticks()) >= 4, timeout=30, what="four ticks")
    stamps = [row[0] for row in ticks()]
    assert len(stamps) == len(set(stamps)), "one job per tick"
