"""The producer's fetch policy: a backlog is refilled without waiting out the default
cooldown, at most two claims per max_workers jobs; a cooldown the user set is kept."""

from __future__ import annotations

from typing import Any

import pytest

import riverboat
from riverboat import EventKind, InsertManyParams, QueueConfig
from tests.runtime.helpers import fetch_row, next_events, noop_workers

JOBS = 200
MAX_WORKERS = 10


async def _insert_backlog(client: riverboat.AsyncClient) -> None:
    await client.insert_many([InsertManyParams({}, kind="noop") for _ in range(JOBS)])


async def test_backlog_refills_without_waiting_out_the_default_cooldown(
    apg_driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A default cooldown of a minute: were refills waiting it out, 200 jobs at 10 per
    # fetch would take 20 minutes and next_events would fail.
    monkeypatch.setattr("riverboat.runtime.runner.DEFAULT_FETCH_COOLDOWN", 60.0)
    client = riverboat.AsyncClient(
        apg_driver,
        queues={"default": QueueConfig(max_workers=MAX_WORKERS)},
        workers=noop_workers(),
        fetch_poll_interval=120.0,
    )
    await _insert_backlog(client)
    sub = client.subscribe(EventKind.JOB_COMPLETED, maxsize=JOBS + 10)
    claims_before = apg_driver.stats.by_query.get("job_get_available", 0)
    await client.start()
    try:
        await next_events(sub, JOBS, timeout=60)
    finally:
        await client.stop()
    claims = apg_driver.stats.by_query.get("job_get_available", 0) - claims_before
    # A refill waits for half the slots: at most two claims per max_workers jobs, plus
    # the one that finds the queue empty. A claim takes at most twice max_workers (the
    # free slots and as many claimed ahead: test_claim_ahead.py).
    assert JOBS // (2 * MAX_WORKERS) <= claims <= 2 * JOBS // MAX_WORKERS + 1


async def test_a_cooldown_the_user_set_is_kept_between_fetches(apg_driver: Any) -> None:
    client = riverboat.AsyncClient(
        apg_driver,
        queues={"default": QueueConfig(max_workers=MAX_WORKERS, fetch_cooldown=60.0)},
        workers=noop_workers(),
        fetch_poll_interval=120.0,
    )
    await _insert_backlog(client)
    sub = client.subscribe(EventKind.JOB_COMPLETED, maxsize=JOBS + 10)
    claims_before = apg_driver.stats.by_query.get("job_get_available", 0)
    await client.start()
    try:
        await next_events(sub, MAX_WORKERS)
        # The first batch is done and its slots free, but the next fetch is a minute off.
        assert apg_driver.stats.by_query.get("job_get_available", 0) - claims_before == 1
        assert client._runtime is not None
        assert client._runtime.producers["default"].last_fetch_count == MAX_WORKERS
    finally:
        await client.stop()


@pytest.mark.parametrize("hard", [False, True], ids=["stop", "stop_and_cancel"])
async def test_a_claim_in_flight_at_stop_strands_no_job(
    apg_driver: Any, pg_url: str, pg_schema: str, hard: bool
) -> None:
    # Working a backlog with refills that skip the cooldown, a stop usually finds a
    # claim in flight. Its jobs are this client's (running) and must be worked (or
    # handed back by a hard stop), not left running for the rescuer; and no job runs
    # twice.
    jobs = 3000
    client = riverboat.AsyncClient(
        apg_driver,
        queues={"default": QueueConfig(max_workers=MAX_WORKERS)},
        workers=noop_workers(),
        fetch_poll_interval=120.0,
    )
    await client.insert_many([InsertManyParams({}, kind="noop") for _ in range(jobs)])
    sub = client.subscribe(EventKind.JOB_COMPLETED, maxsize=jobs + 10)
    await client.start()
    try:
        await next_events(sub, 300, timeout=60)
    finally:
        await (client.stop_and_cancel() if hard else client.stop())
    running, completed, available, max_attempt, stray = fetch_row(
        pg_url,
        pg_schema,
        "SELECT count(*) FILTER (WHERE state = 'running'),"
        " count(*) FILTER (WHERE state = 'completed'),"
        " count(*) FILTER (WHERE state = 'available'),"
        " max(attempt),"
        " count(*) FILTER (WHERE (state = 'completed') <> (attempt = 1))"
        " FROM river_job",
    )
    assert running == 0
    assert completed + available == jobs
    assert completed >= 300
    assert max_attempt == 1  # no job ran twice (an interrupted one is rolled back to 0)
    assert stray == 0  # every completed job ran once, every available one not at all
