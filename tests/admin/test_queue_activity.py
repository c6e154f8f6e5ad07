"""``queue_activity()``: each queue's latency (its oldest available job) and the jobs it
completed and discarded over the last hour, day and week, on Postgres and SQLite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import riverboat
from riverboat import InsertManyParams, InsertOpts
from tests.runtime.dbs import Db, any_db  # noqa: F401


def test_latency_and_throughput_per_queue(any_db: Db) -> None:  # noqa: F811
    now = datetime.now(UTC)
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        waiting = client.insert_many(
            [
                InsertManyParams({}, InsertOpts(queue="mail"), kind="job_a"),
                InsertManyParams({}, InsertOpts(queue="mail"), kind="job_a"),
                InsertManyParams({}, InsertOpts(queue="idle"), kind="job_a"),
            ]
        )
        done = client.insert({}, InsertOpts(queue="reports"), kind="job_b").job
        dropped = client.insert({}, InsertOpts(queue="reports"), kind="job_b").job
        old = client.insert({}, InsertOpts(queue="reports"), kind="job_b").job
    finished_at = {
        done.id: ("completed", now - timedelta(minutes=10)),
        dropped.id: ("discarded", now - timedelta(hours=3)),
        old.id: ("completed", now - timedelta(days=3)),
    }
    # Due five minutes ago and still waiting: the queue's latency.
    finished_at[waiting[0].job.id] = ("available", now - timedelta(minutes=5))
    for job_id, (state, at) in finished_at.items():
        column = "scheduled_at" if state == "available" else "finalized_at"
        stamp = at if any_db.dialect == "postgres" else at.strftime("%Y-%m-%d %H:%M:%S.000")
        any_db.execute(
            f"UPDATE river_job SET state = %s, {column} = %s WHERE id = %s",
            state,
            stamp,
            job_id,
        )
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        activity = {a.queue: a for a in client.queue_activity()}
    assert sorted(activity) == ["idle", "mail", "reports"]
    mail = activity["mail"]
    latency = mail.latency(datetime.now(UTC))
    assert latency is not None and 299 < latency < 600
    assert mail.completed == {"1h": 0, "24h": 0, "7d": 0}
    reports = activity["reports"]
    assert reports.oldest_available_at is None and reports.latency(now) is None
    assert reports.completed == {"1h": 1, "24h": 1, "7d": 2}
    assert reports.discarded == {"1h": 0, "24h": 1, "7d": 1}
