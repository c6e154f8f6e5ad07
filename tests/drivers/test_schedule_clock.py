"""``job_schedule(now=)``: a test clock's time replaces the database's in the
scheduler's horizon (``use_test_config``), through every driver."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from riverboat import InsertOpts, JobState
from tests.drivers.harness import Harness


async def test_job_schedule_takes_a_stubbed_now(h: Harness) -> None:
    client = h.client()
    real_now = datetime.now(UTC)
    past_due = InsertOpts(scheduled_at=real_now - timedelta(minutes=1))
    in_a_day = InsertOpts(scheduled_at=real_now + timedelta(days=1))
    due = (await h.call(client.insert, {}, past_due, kind="clock_sched")).job
    tomorrow = (await h.call(client.insert, {}, in_a_day, kind="clock_sched")).job
    dialect = h.driver.dialect

    # A clock an hour back: even the job due by the database's clock stays scheduled.
    earlier = real_now - timedelta(hours=1)
    assert await h.fetch(h.driver, dialect.job_schedule(max=100, lookahead=5, now=earlier)) == []

    # A clock two days ahead: both are due.
    later = real_now + timedelta(days=2)
    rows = await h.fetch(h.driver, dialect.job_schedule(max=100, lookahead=5, now=later))
    assert sorted(row[0] for row in rows) == sorted([due.id, tomorrow.id])
    for job in (due, tomorrow):
        assert (await h.call(client.job_get, job.id)).state is JobState.AVAILABLE
