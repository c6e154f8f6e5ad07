"""Job and queue administration through the clients, on every driver (River's JobCancel,
JobRetry, JobDelete, JobList, JobUpdate, QueuePause...). Operations a client does not
have yet are skipped, by name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from riverboat import InsertManyParams, InsertOpts, JobState, NotFoundError
from tests.drivers.harness import Harness


def client_has(client: Any, *names: str) -> None:
    missing = [n for n in names if not hasattr(client, n)]
    if missing:
        pytest.skip(f"{type(client).__name__} lacks {', '.join(missing)} (not written yet)")


def later() -> InsertOpts:
    return InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(hours=1))


async def test_job_cancel_retry_delete(h: Harness) -> None:
    client = h.client()
    client_has(client, "job_cancel", "job_retry", "job_delete")
    job = (await h.call(client.insert, {"a": 1}, later(), kind="conf_admin")).job
    cancelled = await h.call(client.job_cancel, job.id)
    assert cancelled.id == job.id
    assert cancelled.state is JobState.CANCELLED and cancelled.finalized_at is not None
    retried = await h.call(client.job_retry, job.id)
    assert retried.state is JobState.AVAILABLE and retried.finalized_at is None
    deleted = await h.call(client.job_delete, job.id)
    assert deleted.id == job.id
    with pytest.raises(NotFoundError):
        await h.call(client.job_get, job.id)
    with pytest.raises(NotFoundError):
        await h.call(client.job_cancel, job.id)


async def test_job_cancel_tx_follows_caller(h: Harness) -> None:
    client = h.client()
    client_has(client, "job_cancel_tx")
    job = (await h.call(client.insert, {"a": 1}, later(), kind="conf_admin_tx")).job
    native_kind = h.native_kinds[-1]  # the session, where the driver has one
    async with h.native(native_kind, commit=False) as conn:
        inside = await h.call(client.job_cancel_tx, conn, job.id)
        assert inside.state is JobState.CANCELLED
    assert (await h.call(client.job_get, job.id)).state is JobState.SCHEDULED
    async with h.native(native_kind, commit=True) as conn:
        await h.call(client.job_cancel_tx, conn, job.id)
    assert (await h.call(client.job_get, job.id)).state is JobState.CANCELLED


async def test_job_list_and_delete_many(h: Harness) -> None:
    client = h.client()
    client_has(client, "job_list", "job_delete_many")
    await h.call(
        client.insert_many,
        [InsertManyParams({"i": i}, InsertOpts(queue="lq"), kind="conf_list") for i in range(5)]
        + [InsertManyParams({"i": 9}, later(), kind="conf_list")],
    )
    page = await h.call(client.job_list, kinds=["conf_list"], states=["available"], limit=3)
    assert [j.args["i"] for j in page.jobs] == [0, 1, 2]
    assert page.next_cursor is not None
    rest = await h.call(
        client.job_list, kinds=["conf_list"], states=["available"], cursor=page.next_cursor
    )
    assert [j.args["i"] for j in rest.jobs] == [3, 4]
    scheduled = await h.call(client.job_list, kinds=["conf_list"], states=[JobState.SCHEDULED])
    assert [j.args["i"] for j in scheduled.jobs] == [9]
    deleted = await h.call(client.job_delete_many, kinds=["conf_list"], queues=["lq"])
    assert sorted(j.args["i"] for j in deleted) == [0, 1, 2, 3, 4]
    assert await h.count_jobs("conf_list") == 1


async def test_job_update_metadata(h: Harness) -> None:
    client = h.client()
    client_has(client, "job_update")
    job = (await h.call(client.insert, {"a": 1}, InsertOpts(metadata={"k": 1}), kind="conf_up")).job
    updated = await h.call(client.job_update, job.id, metadata={"m": "x"})
    assert updated.metadata == {"k": 1, "m": "x"}


async def test_queues_pause_resume_update(h: Harness) -> None:
    client = h.client()
    client_has(client, "queue_get", "queue_list", "queue_pause", "queue_resume", "queue_update")
    dialect = h.driver.dialect
    await h.fetch(h.driver, dialect.queue_create_or_set_updated_at("conf_q"))
    queue = await h.call(client.queue_get, "conf_q")
    assert queue.name == "conf_q" and not queue.paused
    paused = await h.call(client.queue_pause, "conf_q")
    assert [q.name for q in paused] == ["conf_q"] and paused[0].paused
    assert (await h.call(client.queue_get, "conf_q")).paused
    resumed = await h.call(client.queue_resume, "conf_q")
    assert not resumed[0].paused
    updated = await h.call(client.queue_update, "conf_q", metadata={"owner": "conf"})
    assert updated.metadata == {"owner": "conf"}
    assert "conf_q" in [q.name for q in await h.call(client.queue_list)]
    with pytest.raises(NotFoundError):
        await h.call(client.queue_get, "conf_no_such_queue")
