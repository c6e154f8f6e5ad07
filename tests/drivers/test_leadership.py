"""Leader election and maintenance statements, run straight through each driver
(River's LeaderAttemptElect/Reelect/Resign, JobSchedule, JobDeleteBefore...)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from riverboat import InsertOpts, JobState
from tests.drivers.harness import Harness


async def test_leader_elect_reelect_resign(h: Harness) -> None:
    dialect = h.driver.dialect
    won = await h.fetch(h.driver, dialect.leader_attempt_elect(leader_id="conf-a", ttl=30))
    assert len(won) == 1
    leader = dialect.decode_leader(won[0])
    assert leader.leader_id == "conf-a" and leader.expires_at > leader.elected_at
    lost = await h.fetch(h.driver, dialect.leader_attempt_elect(leader_id="conf-b", ttl=30.0))
    assert lost == []
    again = await h.fetch(
        h.driver,
        dialect.leader_attempt_reelect(leader_id="conf-a", elected_at=leader.elected_at, ttl=60),
    )
    assert len(again) == 1
    assert dialect.decode_leader(again[0]).expires_at > leader.expires_at
    current = await h.fetch(h.driver, dialect.leader_get_elected())
    assert dialect.decode_leader(current[0]).leader_id == "conf-a"
    await h.fetch(h.driver, dialect.leader_resign(leader_id="conf-a", elected_at=leader.elected_at))
    assert await h.fetch(h.driver, dialect.leader_get_elected()) == []
    won_b = await h.fetch(h.driver, dialect.leader_attempt_elect(leader_id="conf-b", ttl=30))
    assert dialect.decode_leader(won_b[0]).leader_id == "conf-b"


async def test_job_schedule_moves_due_jobs(h: Harness) -> None:
    client = h.client()
    soon = InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(seconds=1))
    far = InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(hours=1))
    due = (await h.call(client.insert, {}, soon, kind="conf_sched")).job
    not_due = (await h.call(client.insert, {}, far, kind="conf_sched")).job
    await h.fetch(h.driver, h.driver.dialect.job_schedule(max=100, lookahead=5))
    assert (await h.call(client.job_get, due.id)).state is JobState.AVAILABLE
    assert (await h.call(client.job_get, not_due.id)).state is JobState.SCHEDULED


async def test_job_delete_before_and_queue_delete_expired(h: Harness) -> None:
    dialect = h.driver.dialect
    stmt = dialect.job_delete_before(
        cancelled_retention=3600, completed_retention=None, discarded_retention=86400.0, max=10
    )
    await h.fetch(h.driver, stmt)  # nothing old enough: runs, deletes nothing
    await h.fetch(h.driver, dialect.queue_delete_expired(retention=86400, max=10))
