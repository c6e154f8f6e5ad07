"""The leader's maintenance services, run by a real client on real Postgres."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from riverboat import AsyncClient, InsertOpts, Job, JobRow, QueueConfig, RetryPolicy, Workers
from riverboat.runtime.maintenance import Service, backoff_delay
from riverboat.runtime.outcomes import RESCUE_ERROR
from tests.leadership._helpers import (
    elector_of,
    fast_maintenance,
    make_client,
    sql,
)
from tests.waiting import wait_until_async


def service(client: AsyncClient, name: str) -> Service:
    maintainer = client.runtime.maintainer
    assert maintainer is not None
    found: Service = maintainer.services[name]
    return found


async def _started_leader(client: AsyncClient) -> AsyncClient:
    await client.start()
    await asyncio.wait_for(elector_of(client).leader.wait(), 5)
    return client


def _insert_running(
    pg_url: str,
    schema: str,
    kind: str,
    *,
    ago: str = "2 hours",
    attempt: int = 1,
    max_attempts: int = 25,
    metadata: dict[str, Any] | None = None,
    args: str = "{}",
) -> int:
    rows = sql(
        pg_url,
        schema,
        """INSERT INTO river_job (args, kind, queue, state, attempt, max_attempts,
                                  attempted_at, metadata, scheduled_at)
           VALUES (%s::jsonb, %s, 'elsewhere', 'running', %s, %s, now() - %s::interval,
                   %s::jsonb, now() - %s::interval)
           RETURNING id""",
        args,
        kind,
        attempt,
        max_attempts,
        ago,
        json.dumps(metadata or {}),
        ago,
    )
    return int(rows[0][0])


class _RetryInAnHour(RetryPolicy):
    def next_retry(self, job: JobRow, now: datetime) -> datetime:
        return now + timedelta(hours=1)


async def test_rescuer_follows_rivers_rules(pg_url: str, pg_schema: str) -> None:
    ids = {
        "retry": _insert_running(pg_url, pg_schema, "noop", metadata={"river:rescue_count": 2}),
        "cancel": _insert_running(
            pg_url, pg_schema, "noop", metadata={"cancel_attempted_at": "2024-01-01T00:00:00Z"}
        ),
        "unknown": _insert_running(pg_url, pg_schema, "nobody_works_this"),
        "exhausted": _insert_running(pg_url, pg_schema, "noop", attempt=3, max_attempts=3),
        "bad_args": _insert_running(pg_url, pg_schema, "typed", args='{"n": "not an int"}'),
        "recent": _insert_running(pg_url, pg_schema, "noop", ago="10 seconds"),
        "odd_count": _insert_running(
            pg_url, pg_schema, "noop", metadata={"river:rescue_count": "x"}
        ),
    }
    workers = Workers()

    @workers.register("noop")
    async def noop(job: Job[Any]) -> None:
        return None

    def strict(row: Any) -> Any:
        raise TypeError("bad args")

    @workers.register("typed")
    async def typed(job: Job[Any]) -> None:
        return None

    registered = workers.get("typed")
    assert registered is not None
    registered.decode = strict  # args that never decode for this worker
    before = datetime.now(UTC)
    client = make_client(
        pg_url,
        pg_schema,
        "rescuer",
        workers=workers,
        maintenance=fast_maintenance(rescuer_interval=0.2, rescue_stuck_jobs_after=3600),
        # The default policy retries these jobs about a second later, inside the
        # scheduler's lookahead: when its first run came after the rescuer's, it made them
        # available before the client stopped (seen once in a full run).
        retry_policy=_RetryInAnHour(),
    )
    await _started_leader(client)
    try:
        await service(client, "rescuer").wait_for(lambda s: s.successes >= 1)
    finally:
        await client.stop()
        await client.close()

    rows = {
        r[0]: r[1:]
        for r in sql(
            pg_url,
            pg_schema,
            """SELECT id, state::text, attempt, finalized_at, scheduled_at, metadata,
                      errors::text[]
               FROM river_job""",
        )
    }
    expected = {
        "retry": "retryable",
        "cancel": "cancelled",
        "unknown": "discarded",
        "exhausted": "discarded",
        "bad_args": "retryable",
        "recent": "running",
        "odd_count": "retryable",
    }
    assert {name: rows[i][0] for name, i in ids.items()} == expected
    for name, job_id in ids.items():
        state, attempt, finalized_at, scheduled_at, metadata, errors = rows[job_id]
        if name == "recent":
            assert errors is None and "river:rescue_count" not in metadata
            continue
        assert attempt == (3 if name == "exhausted" else 1)  # the attempt is unchanged
        assert len(errors) == 1
        entry = json.loads(errors[0])
        assert entry["error"] == RESCUE_ERROR and entry["trace"] == ""
        assert entry["attempt"] == attempt
        assert datetime.fromisoformat(entry["at"].replace("Z", "+00:00")) >= before
        assert (finalized_at is not None) == (state in ("cancelled", "discarded"))
        if state == "retryable":
            assert scheduled_at > before
        expected_count = 3 if name == "retry" else 1
        assert metadata["river:rescue_count"] == expected_count


async def test_cleaner_deletes_exactly_the_jobs_past_retention(pg_url: str, pg_schema: str) -> None:
    def job(state: str, finalized_ago: str | None) -> int:
        rows = sql(
            pg_url,
            pg_schema,
            """INSERT INTO river_job (args, kind, queue, state, finalized_at)
               VALUES ('{}', 'noop', 'elsewhere', %s::river_job_state,
                       now() - %s::interval) RETURNING id""",
            state,
            finalized_ago,
        )
        return int(rows[0][0])

    doomed = {
        job("completed", "25 hours"),
        job("cancelled", "25 hours"),
        job("discarded", "8 days"),
    }
    kept = {
        job("completed", "23 hours"),
        job("cancelled", "23 hours"),
        job("discarded", "6 days"),
        job("available", None),
    }
    client = make_client(
        pg_url, pg_schema, "cleaner", maintenance=fast_maintenance(cleaner_interval=0.2)
    )
    await _started_leader(client)
    try:
        cleaner = service(client, "cleaner")
        await cleaner.wait_for(lambda s: s.successes >= 1)
        assert getattr(cleaner, "deleted") == len(doomed)  # noqa: B009
    finally:
        await client.stop()
        await client.close()
    remaining = {r[0] for r in sql(pg_url, pg_schema, "SELECT id FROM river_job")}
    assert remaining == kept


async def test_cleaner_keeps_forever_with_none_retention(pg_url: str, pg_schema: str) -> None:
    sql(
        pg_url,
        pg_schema,
        """INSERT INTO river_job (args, kind, queue, state, finalized_at)
           VALUES ('{}', 'noop', 'elsewhere', 'discarded', now() - interval '400 days'),
                  ('{}', 'noop', 'elsewhere', 'completed', now() - interval '400 days')""",
    )
    client = make_client(
        pg_url,
        pg_schema,
        "keeper",
        maintenance=fast_maintenance(cleaner_interval=0.2, discarded_job_retention=None),
    )
    await _started_leader(client)
    try:
        await service(client, "cleaner").wait_for(lambda s: s.successes >= 1)
    finally:
        await client.stop()
        await client.close()
    assert sql(pg_url, pg_schema, "SELECT state::text FROM river_job") == [("discarded",)]


async def test_scheduler_promotes_due_jobs_which_then_run(pg_url: str, pg_schema: str) -> None:
    client = make_client(
        pg_url, pg_schema, "sched", maintenance=fast_maintenance(scheduler_interval=0.2)
    )
    await _started_leader(client)
    try:
        result = await client.insert(
            {}, InsertOpts(scheduled_at=datetime.now(UTC) - timedelta(seconds=1)), kind="noop"
        )
        assert result.job.state == "scheduled"
        scheduler = service(client, "scheduler")
        await scheduler.wait_for(lambda s: getattr(scheduler, "promoted") >= 1)  # noqa: B009

        async def completed() -> bool:
            return (await client.job_get(result.job.id)).state == "completed"

        await wait_until_async(completed, timeout=5)
    finally:
        await client.stop()
        await client.close()


async def test_a_failing_service_backs_off_and_wake_ups_cannot_bypass_it(
    pg_url: str, pg_schema: str
) -> None:
    client = make_client(
        pg_url,
        pg_schema,
        "backoff",
        queues={"default": QueueConfig(max_workers=5, fetch_cooldown=0.001)},
        maintenance=fast_maintenance(queue_cleaner_interval=0.05, error_backoff_base=1.0),
    )
    await _started_leader(client)
    qc = service(client, "queue_cleaner")
    renamed = False
    try:
        await qc.wait_for(lambda s: s.successes >= 1)
        # Inject a real database error: the queue cleaner's table disappears.
        sql(pg_url, pg_schema, "ALTER TABLE river_queue RENAME TO river_queue_away")
        renamed = True
        stats = await qc.wait_for(lambda s: s.errors >= 1)
        first_error_run = stats.run_started[-1]
        # A burst of ordinary wake-ups during the backoff: insert notifications from
        # another connection, local inserts (which wake the producers), direct wakes.
        # The 50 notifications go out in one statement (distinct payloads, which Postgres
        # would otherwise fold into one) from a thread: 50 connections opened on the
        # event loop blocked it for longer than the backoff on a loaded machine, so the
        # backoff was over, and the leader's term untrusted, before the wakes below.
        channel = f"{pg_schema}.river_insert"
        await asyncio.to_thread(
            sql,
            pg_url,
            pg_schema,
            "SELECT pg_notify(%s, json_build_object('queue', 'default', 'n', n)::text)"
            " FROM generate_series(1, 50) AS n",
            channel,
        )
        for _ in range(10):
            await client.insert({}, kind="noop")
        assert client.runtime.maintainer is not None
        for _ in range(20):
            for svc in client.runtime.maintainer.services.values():
                svc.wake()
        assert stats.wakes_ignored >= 20
        assert stats.runs == stats.errors + stats.successes  # no run started meanwhile

        stats = await qc.wait_for(lambda s: s.errors >= 2)  # still failing: backs off more
        second_error_run = stats.run_started[-1]
        assert second_error_run - first_error_run >= 0.9 * 1.0
        sql(pg_url, pg_schema, "ALTER TABLE river_queue_away RENAME TO river_queue")
        renamed = False
        for _ in range(20):
            qc.wake()
        stats = await qc.wait_for(lambda s: s.successes >= 2)
        assert stats.run_started[-1] - second_error_run >= 0.9 * 2.0
        assert stats.consecutive_errors == 0
    finally:
        if renamed:
            sql(pg_url, pg_schema, "ALTER TABLE river_queue_away RENAME TO river_queue")
        await client.stop()
        await client.close()


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff_delay(n, 1.0, 64.0, jitter=False) for n in range(1, 9)] == [
        1,
        2,
        4,
        8,
        16,
        32,
        64,
        64,
    ]
    assert 0.9 <= backoff_delay(1, 1.0, 64.0) <= 1.1
