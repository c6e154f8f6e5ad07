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
    assert leader.leader_id == "conf-a"
    assert (leader.expires_at - leader.elected_at).total_seconds() == 30
    # Held: neither another client nor the holder itself wins an election.
    for candidate in ("conf-b", "conf-a"):
        lost = await h.fetch(h.driver, dialect.leader_attempt_elect(leader_id=candidate, ttl=30.0))
        assert lost == []
    again = await h.fetch(
        h.driver,
        dialect.leader_attempt_reelect(leader_id="conf-a", elected_at=leader.elected_at, ttl=60),
    )
    assert len(again) == 1
    assert dialect.decode_leader(again[0]).expires_at > leader.expires_at
    current = await h.fetch(h.driver, dialect.leader_get_elected())
    assert dialect.decode_leader(current[0]).leader_id == "conf-a"
    # Only the holder, with its own term, may re-elect or resign.
    term = leader.elected_at
    assert (
        await h.fetch(
            h.driver, dialect.leader_attempt_reelect(leader_id="conf-b", elected_at=term, ttl=30)
        )
        == []
    )
    assert await h.fetch(h.driver, dialect.leader_resign(leader_id="conf-b", elected_at=term)) == []
    wrong_term = term + timedelta(milliseconds=1)
    assert (
        await h.fetch(h.driver, dialect.leader_resign(leader_id="conf-a", elected_at=wrong_term))
        == []
    )
    with h.notifications("river_leadership") as leadership:
        resigned = await h.fetch(
            h.driver, dialect.leader_resign(leader_id="conf-a", elected_at=term)
        )
        assert [tuple(r) for r in resigned] == [("conf-a",)]
        assert leadership.drain() == [{"leader_id": "conf-a", "action": "resigned"}]
    assert await h.fetch(h.driver, dialect.leader_get_elected()) == []
    won_b = await h.fetch(h.driver, dialect.leader_attempt_elect(leader_id="conf-b", ttl=30))
    assert dialect.decode_leader(won_b[0]).leader_id == "conf-b"


async def test_expired_term_is_replaced_in_one_statement(h: Harness) -> None:
    dialect = h.driver.dialect
    old = dialect.decode_leader(
        (await h.fetch(h.driver, dialect.leader_attempt_elect(leader_id="conf-a", ttl=-1)))[0]
    )
    reelect = dialect.leader_attempt_reelect(leader_id="conf-a", elected_at=old.elected_at, ttl=15)
    assert await h.fetch(h.driver, reelect) == []  # an expired term is not renewed
    before = h.driver.stats.statements
    rows = await h.fetch(h.driver, dialect.leader_attempt_elect(leader_id="conf-b", ttl=15))
    assert h.driver.stats.statements - before == 1
    assert dialect.decode_leader(rows[0]).leader_id == "conf-b"


async def test_job_schedule_moves_due_jobs(h: Harness) -> None:
    client = h.client()
    soon = InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(seconds=1))
    far = InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(hours=1))
    due = (await h.call(client.insert, {}, soon, kind="conf_sched")).job
    not_due = (await h.call(client.insert, {}, far, kind="conf_sched")).job
    await h.fetch(h.driver, h.driver.dialect.job_schedule(max=100, lookahead=5))
    assert (await h.call(client.job_get, due.id)).state is JobState.AVAILABLE
    assert (await h.call(client.job_get, not_due.id)).state is JobState.SCHEDULED


async def test_job_schedule_promotes_discards_conflicts_and_notifies(h: Harness) -> None:
    every_unique_state_but_retryable = 213
    rows = [
        dict(queue="q1", state="scheduled", scheduled_at=-1),
        dict(
            queue="q2",
            state="retryable",
            scheduled_at=-1,
            unique_key=b"\x01",
            unique_states=every_unique_state_but_retryable,
        ),
        dict(
            queue="q2",
            state="available",
            scheduled_at=0,
            unique_key=b"\x01",
            unique_states=every_unique_state_but_retryable,
        ),
        dict(queue="q3", state="scheduled", scheduled_at=3600),
        dict(queue="q4", state="scheduled", scheduled_at=2),
        dict(queue="q5", state="scheduled", scheduled_at=-1, unique_key=b"\x02", unique_states=1),
        dict(queue="q5", state="scheduled", scheduled_at=-2, unique_key=b"\x02", unique_states=1),
    ]
    ids = [h.insert_job_row(kind="kk", **row) for row in rows]
    with h.notifications("river_insert") as inserts:
        scheduled = await h.fetch(h.driver, h.driver.dialect.job_schedule(max=100))
        # q4 is promoted early (look-ahead) but not announced; of q5's two rows the
        # earlier one wins and the other is discarded.
        assert [(q, bool(discard)) for _, q, discard in scheduled] == [
            ("q1", False),
            ("q2", True),
            ("q4", False),
            ("q5", True),
            ("q5", False),
        ]
        assert sorted(p["queue"] for p in inserts.drain()) == ["q1", "q5"]
    client = h.client()
    jobs = [await h.call(client.job_get, job_id) for job_id in ids]
    assert [j.state.value for j in jobs] == [
        "available", "discarded", "available", "scheduled", "available", "discarded", "available"
    ]  # fmt: skip
    assert jobs[1].metadata == {"unique_key_conflict": "scheduler_discarded"}


async def test_job_delete_before_and_queue_delete_expired(h: Harness) -> None:
    day = 86400
    finalized = [
        ("a", "completed", -2 * day),
        ("a", "completed", -3600),
        ("a", "cancelled", -30 * day),
        ("kept", "discarded", -30 * day),
        ("a", "discarded", -8 * day),
    ]
    for queue, state, finalized_at in finalized:
        h.insert_job_row(kind="kk", queue=queue, state=state, finalized_at=finalized_at)
    h.sql(
        "INSERT INTO river_queue (name, created_at, updated_at) "
        f"VALUES ('old', {h.now_sql(-25 * 3600)}, {h.now_sql(-25 * 3600)}), "
        f"('fresh', {h.now_sql()}, {h.now_sql()})"
    )
    dialect = h.driver.dialect
    stmt = dialect.job_delete_before(
        cancelled_retention=None,  # kept forever
        completed_retention=day,
        discarded_retention=7 * day,
        max=100,
        queues_excluded=["kept"],
    )
    assert await h.execute(h.driver, stmt) == 2
    expired = await h.fetch(h.driver, dialect.queue_delete_expired(retention=day, max=10))
    assert [tuple(r) for r in expired] == [("old",)]
    left = h.sql("SELECT queue, state FROM river_job ORDER BY id")
    assert [(q, str(s)) for q, s in left] == [
        ("a", "completed"), ("a", "cancelled"), ("kept", "discarded")
    ]  # fmt: skip
    assert h.sql("SELECT name FROM river_queue") == [("fresh",)]
