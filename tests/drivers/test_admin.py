"""Job and queue administration through the clients, on every driver (River's JobCancel,
JobRetry, JobDelete, JobList, JobUpdate, QueuePause...).

What producers are told goes out as NOTIFY on Postgres and as rows of the
river_notification outbox on SQLite (``h.notifications``); the statement counts differ
by the outbox's follow-up statements. SQLite's documented difference (no metadata
filter) is asserted where it applies.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from riverboat import (
    InsertManyParams,
    InsertOpts,
    InvalidInputError,
    JobRow,
    JobRunningError,
    JobState,
    NotFoundError,
    NotSupportedError,
)
from riverboat._job import parse_rfc3339
from tests.drivers.harness import Harness
from tests.waiting import wait_until


def later() -> InsertOpts:
    return InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(hours=1))


async def insert(h: Harness, client: Any, kind: str = "thing", **opts: Any) -> JobRow:
    args = opts.pop("args", {"n": 1})
    job: JobRow = (await h.call(client.insert, args, InsertOpts(**opts), kind=kind)).job
    return job


def ids(jobs: list[JobRow]) -> list[int]:
    return [j.id for j in jobs]


@contextmanager
def counting(h: Harness) -> Iterator[dict[str, int]]:
    """The statements the driver ran inside the block, by query name."""
    before = dict(h.driver.stats.by_query)
    seen: dict[str, int] = {}
    yield seen
    for name, count in h.driver.stats.by_query.items():
        delta = count - before.get(name, 0)
        if delta:
            seen[name] = delta


def statements(h: Harness, name: str, sqlite_follow_up: str | None = None) -> dict[str, int]:
    """One statement, plus on SQLite the follow-up that writes the outbox or applies it."""
    expected = {name: 1}
    if sqlite_follow_up is not None and h.dialect_name == "sqlite":
        expected[sqlite_follow_up] = 1
    return expected


def clock_passes(moment: datetime) -> None:
    """Wait until the wall clock is past ``moment`` by more than a millisecond (the
    coarsest precision a dialect stores), so a later write gets a later timestamp."""
    wait_until(lambda: datetime.now(UTC) > moment + timedelta(milliseconds=2), timeout=1)


# -- cancel ---------------------------------------------------------------------------


async def test_cancel_available_job_finalizes_it_and_tells_producers(h: Harness) -> None:
    client = h.client()
    job = await insert(h, client)
    with h.notifications("river_control") as control:
        before = datetime.now(UTC)
        with counting(h) as seen:
            cancelled = await h.call(client.job_cancel, job.id)
        assert seen == statements(h, "job_cancel", "job_cancel_notify")  # one transaction
        assert cancelled.state is JobState.CANCELLED and cancelled.finalized_at is not None
        stamp = cancelled.metadata["cancel_attempted_at"]
        assert isinstance(stamp, str) and stamp.endswith("Z")
        assert before - timedelta(seconds=1) <= parse_rfc3339(stamp) <= datetime.now(UTC)
        assert await h.call(client.job_get, job.id) == cancelled
        assert control.drain() == [{"action": "cancel", "job_id": job.id, "queue": "default"}]


async def test_cancel_running_job_keeps_it_running_and_tells_its_producer(h: Harness) -> None:
    client = h.client()
    job = await insert(h, client, queue="other")
    h.force_state(job.id, "running")
    with h.notifications("river_control") as control:
        out = await h.call(client.job_cancel, job.id)
        assert out.state is JobState.RUNNING and out.finalized_at is None
        assert "cancel_attempted_at" in out.metadata
        assert control.drain() == [{"action": "cancel", "job_id": job.id, "queue": "other"}]


@pytest.mark.parametrize("state", ["completed", "discarded", "cancelled"])
async def test_cancel_finalized_job_changes_nothing(h: Harness, state: str) -> None:
    client = h.client()
    job = await insert(h, client)
    h.force_state(job.id, state)
    stored = await h.call(client.job_get, job.id)
    with h.notifications("river_control") as control:
        assert await h.call(client.job_cancel, job.id) == stored
        assert await h.call(client.job_get, job.id) == stored
        assert control.drain() == []


@pytest.mark.parametrize("state", ["scheduled", "retryable", "pending"])
async def test_cancel_waiting_jobs(h: Harness, state: str) -> None:
    client = h.client()
    job = await insert(h, client)
    h.force_state(job.id, state)
    assert (await h.call(client.job_cancel, job.id)).state is JobState.CANCELLED


async def test_cancel_missing_job(h: Harness) -> None:
    client = h.client()
    with h.notifications("river_control") as control:
        with pytest.raises(NotFoundError):
            await h.call(client.job_cancel, 123456789)
        assert control.drain() == []


async def test_job_cancel_tx_follows_caller(h: Harness) -> None:
    """Cancelled inside the caller's transaction: rolled back with it, producers told
    nothing (a NOTIFY is sent at commit; the outbox row rolls back with the job)."""
    client = h.client()
    job = (await h.call(client.insert, {"a": 1}, later(), kind="conf_admin_tx")).job
    native_kind = h.native_kinds[-1]  # the session, where the driver has one
    with h.notifications("river_control") as control:
        async with h.native(native_kind, commit=False) as conn:
            inside = await h.call(client.job_cancel_tx, conn, job.id)
            assert inside.state is JobState.CANCELLED
        assert (await h.call(client.job_get, job.id)).state is JobState.SCHEDULED
        assert control.drain() == []
        async with h.native(native_kind, commit=True) as conn:
            await h.call(client.job_cancel_tx, conn, job.id)
        assert (await h.call(client.job_get, job.id)).state is JobState.CANCELLED
        assert control.drain() == [{"action": "cancel", "job_id": job.id, "queue": "default"}]


# -- cancel, retry, delete in a row -----------------------------------------------------


async def test_job_cancel_retry_delete(h: Harness) -> None:
    client = h.client()
    job = (await h.call(client.insert, {"a": 1}, later(), kind="conf_admin")).job
    cancelled = await h.call(client.job_cancel, job.id)
    assert cancelled.id == job.id
    assert cancelled.state is JobState.CANCELLED and cancelled.finalized_at is not None
    assert "cancel_attempted_at" in cancelled.metadata
    retried = await h.call(client.job_retry, job.id)
    assert retried.state is JobState.AVAILABLE and retried.finalized_at is None
    # River 0.51: the earlier cancellation request is cleared, so it can't cancel the
    # retried attempt; the job's other metadata stays.
    assert "cancel_attempted_at" not in retried.metadata
    deleted = await h.call(client.job_delete, job.id)
    assert deleted.id == job.id
    with pytest.raises(NotFoundError):
        await h.call(client.job_get, job.id)
    with pytest.raises(NotFoundError):
        await h.call(client.job_cancel, job.id)


# -- retry ----------------------------------------------------------------------------


async def test_retry_discarded_job_that_used_every_attempt_gets_one_more(h: Harness) -> None:
    client = h.client()
    error = {"at": "2026-01-01T00:00:00Z", "attempt": 2, "error": "boom", "trace": ""}
    discarded = h.insert_job_row(
        kind="thing",
        state="discarded",
        attempt=2,
        max_attempts=2,
        attempted_at=-60,
        finalized_at=-60,
        scheduled_at=datetime(2020, 1, 1, tzinfo=UTC),
        errors=[error],
    )
    before = datetime.now(UTC) - timedelta(milliseconds=5)
    with counting(h) as seen:
        out = await h.call(client.job_retry, discarded)
    assert seen == {"job_retry": 1}
    assert (out.state, out.max_attempts, out.attempt) == (JobState.AVAILABLE, 3, 2)
    assert out.finalized_at is None and [e.error for e in out.errors] == ["boom"]
    assert out.scheduled_at >= before
    assert await h.call(client.job_get, discarded) == out


async def test_retry_rules(h: Harness) -> None:
    client = h.client()
    kept = await insert(h, client, max_attempts=5)
    h.force_state(kept.id, "completed", attempt=1)
    out = await h.call(client.job_retry, kept.id)
    assert (out.state, out.max_attempts, out.attempt) == (JobState.AVAILABLE, 5, 1)

    hour_later = datetime.now(UTC) + timedelta(hours=1)
    scheduled = await insert(h, client, scheduled_at=hour_later)
    retried = await h.call(client.job_retry, scheduled.id)
    assert retried.scheduled_at < hour_later - timedelta(minutes=30)

    running = await insert(h, client)
    h.force_state(running.id, "running")
    stored = await h.call(client.job_get, running.id)
    assert await h.call(client.job_retry, running.id) == stored

    due = await insert(h, client, scheduled_at=datetime.now(UTC) - timedelta(hours=1))
    h.force_state(due.id, "available")
    stored = await h.call(client.job_get, due.id)
    assert await h.call(client.job_retry, due.id) == stored
    with pytest.raises(NotFoundError):
        await h.call(client.job_retry, 987654321)


# -- delete ---------------------------------------------------------------------------


async def test_delete(h: Harness) -> None:
    client = h.client()
    job = await insert(h, client)
    with counting(h) as seen:
        assert await h.call(client.job_delete, job.id) == job
    assert seen == statements(h, "job_delete", "job_delete_apply")
    with pytest.raises(NotFoundError):
        await h.call(client.job_get, job.id)
    with pytest.raises(NotFoundError):
        await h.call(client.job_delete, job.id)

    running = await insert(h, client)
    h.force_state(running.id, "running")
    with pytest.raises(JobRunningError):
        await h.call(client.job_delete, running.id)
    assert (await h.call(client.job_get, running.id)).state is JobState.RUNNING


async def test_delete_tx_rolls_back(h: Harness) -> None:
    client = h.client()
    job = await insert(h, client)
    async with h.native(h.native_kinds[-1], commit=False) as conn:
        assert (await h.call(client.job_delete_tx, conn, job.id)).id == job.id
    assert (await h.call(client.job_get, job.id)).id == job.id


async def test_delete_many_skips_running_respects_filters_and_returns_id_order(
    h: Harness,
) -> None:
    client = h.client()
    with pytest.raises(InvalidInputError):
        await h.call(client.job_delete_many)
    a = await insert(h, client, kind="kind_a")
    b = await insert(h, client, kind="kind_b")
    a_running = await insert(h, client, kind="kind_a")
    h.force_state(a_running.id, "running")
    a_done = await insert(h, client, kind="kind_a")
    h.force_state(a_done.id, "completed")
    with counting(h) as seen:
        deleted = await h.call(client.job_delete_many, kinds=["kind_a"])
    assert seen == {"job_delete_many": 1}
    assert ids(deleted) == [a.id, a_done.id]
    assert deleted[1].state is JobState.COMPLETED
    assert ids(await h.call(client.job_delete_many, all=True)) == [b.id]
    assert ids((await h.call(client.job_list)).jobs) == [a_running.id]

    many = [await insert(h, client) for _ in range(30)]
    first = await h.call(client.job_delete_many, states=["available"], limit=12)
    assert ids(first) == ids(many[:12])
    rest = await h.call(client.job_delete_many, states=[JobState.AVAILABLE])
    assert ids(rest) == ids(many[12:])


async def test_job_list_and_delete_many(h: Harness) -> None:
    client = h.client()
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


async def test_job_list_preview_reads_what_a_listing_shows(h: Harness) -> None:
    """job_list(preview=True): args past 16,384 characters cut to one more, metadata
    empty, only the last attempt's error; everything else as a full row has it."""
    client = h.client()
    error = {"at": "2026-01-01T00:00:00Z", "attempt": 1, "error": "first", "trace": ""}
    big = h.insert_job_row(
        kind="conf_preview",
        args={"blob": "y" * 40_000},
        metadata={"output": "z" * 40_000},
        errors=[error, {**error, "attempt": 2, "error": "second"}],
        attempt=2,
    )
    small = h.insert_job_row(kind="conf_preview", args={"i": 1}, errors=[])
    full = await h.call(client.job_list, kinds=["conf_preview"])
    shown = await h.call(client.job_list, kinds=["conf_preview"], preview=True)
    assert [j.id for j in shown.jobs] == [j.id for j in full.jobs] == [big, small]
    big_row, small_row = shown.jobs
    assert len(big_row.encoded_args) == 16_385
    assert full.jobs[0].encoded_args.startswith(big_row.encoded_args)
    assert (big_row.metadata, [e.error for e in big_row.errors]) == ({}, ["second"])
    assert (small_row.args, small_row.errors) == ({"i": 1}, [])
    for cut, whole in zip(shown.jobs, full.jobs, strict=True):
        assert (cut.state, cut.attempt, cut.kind, cut.tags, cut.scheduled_at) == (
            whole.state,
            whole.attempt,
            whole.kind,
            whole.tags,
            whole.scheduled_at,
        )
    with pytest.raises(InvalidInputError, match="preview"):
        await h.call(client.job_list, preview="yes")


# -- update ---------------------------------------------------------------------------


async def test_job_update_metadata(h: Harness) -> None:
    client = h.client()
    job = (await h.call(client.insert, {"a": 1}, InsertOpts(metadata={"k": 1}), kind="conf_up")).job
    updated = await h.call(client.job_update, job.id, metadata={"m": "x"})
    assert updated.metadata == {"k": 1, "m": "x"}


async def test_update_merges_metadata_and_sets_output(h: Harness) -> None:
    client = h.client()
    job = await insert(h, client, metadata={"keep": 1, "nested": {"a": 1}, "gone": True})
    h.force_state(job.id, "completed")
    with counting(h) as seen:
        out = await h.call(
            client.job_update,
            job.id,
            output={"result": [1, 2]},
            metadata={"nested": {"b": 2}, "gone": None},
        )
    assert seen == {"job_update": 1}
    # Top-level keys replaced whole, nulls kept: Postgres's jsonb ||, and River's SQLite
    # merge since 0.50.
    merged: dict[str, Any] = {"keep": 1, "nested": {"b": 2}, "gone": None}
    assert out.metadata == {**merged, "output": {"result": [1, 2]}}
    assert out.state is JobState.COMPLETED
    assert await h.call(client.job_get, job.id) == out
    with counting(h) as seen:
        assert await h.call(client.job_update, job.id) == out
    assert seen == {"job_get_by_id": 1}
    # Output may be any JSON value, including null, stored as null on both databases.
    cleared = await h.call(client.job_update, job.id, output=None)
    assert cleared.metadata["output"] is None
    with pytest.raises(NotFoundError):
        await h.call(client.job_update, 424242, output=1)


async def test_update_tx_follows_caller(h: Harness) -> None:
    client = h.client()
    job = await insert(h, client, metadata={})
    native_kind = h.native_kinds[-1]
    async with h.native(native_kind, commit=False) as conn:
        inside = await h.call(client.job_update_tx, conn, job.id, output=6)
        assert inside.metadata == {"output": 6}
    assert (await h.call(client.job_get, job.id)).metadata == {}
    async with h.native(native_kind, commit=True) as conn:
        await h.call(client.job_update_tx, conn, job.id, output=7)
    assert (await h.call(client.job_get, job.id)).metadata == {"output": 7}


# -- list -----------------------------------------------------------------------------


async def test_list_filters(h: Harness) -> None:
    client = h.client()
    a = await insert(h, client, kind="kind_a", queue="q1", priority=1, tags=["red", "big"])
    b = await insert(h, client, kind="kind_b", queue="q2", priority=2, tags=["red"])
    c = await insert(h, client, kind="kind_b", queue="q1", priority=3)
    h.force_state(c.id, "completed")

    async def listed(**filters: Any) -> list[int]:
        return ids((await h.call(client.job_list, **filters)).jobs)

    with counting(h) as seen:
        assert await listed(ids=[c.id, a.id]) == [a.id, c.id]
    assert seen == {"job_list": 1}
    assert await listed(kinds=["kind_b"]) == [b.id, c.id]
    assert await listed(queues=["q1"]) == [a.id, c.id]
    assert await listed(states=["completed"]) == [c.id]
    assert await listed(priorities=[2, 3]) == [b.id, c.id]
    assert await listed(tags_all=["red", "big"]) == [a.id]
    assert await listed(tags_any=["big", "nope"]) == [a.id]
    assert await listed(tags_any=["red"]) == [a.id, b.id]
    assert await listed(kinds=["kind_b"], queues=["q1"]) == [c.id]


async def test_metadata_filter(h: Harness) -> None:
    client = h.client()
    marked = await insert(h, client, metadata={"x": 1, "y": 2})
    await insert(h, client, metadata={"x": 2})
    if h.dialect_name == "postgres":
        assert ids((await h.call(client.job_list, metadata={"x": 1})).jobs) == [marked.id]
        deleted = await h.call(client.job_delete_many, metadata={"x": 1})
        assert ids(deleted) == [marked.id]
        return
    # SQLite has no jsonb containment: refused before any statement runs.
    with counting(h) as seen:
        with pytest.raises(NotSupportedError, match="metadata"):
            await h.call(client.job_list, metadata={"x": 1})
        with pytest.raises(NotSupportedError, match="metadata"):
            await h.call(client.job_delete_many, metadata={"x": 1})
    assert seen == {}


async def paginate(h: Harness, client: Any, size: int, **kwargs: Any) -> list[int]:
    seen: list[int] = []
    cursor = None
    while True:
        page = await h.call(client.job_list, limit=size, cursor=cursor, **kwargs)
        seen.extend(ids(page.jobs))
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


async def test_pagination_with_ties_and_nulls(h: Harness) -> None:
    client = h.client()
    base = datetime(2030, 1, 1, tzinfo=UTC)
    jobs = [
        await insert(h, client, scheduled_at=base + timedelta(minutes=m)) for m in (5, 1, 5, 3, 1)
    ]
    expected = [j.id for j in sorted(jobs, key=lambda j: (j.scheduled_at, j.id))]
    for size in (1, 2, 100):
        assert await paginate(h, client, size, order_by="scheduled_at") == expected
        assert (
            await paginate(h, client, size, order_by="scheduled_at", descending=True)
            == expected[::-1]
        )
    assert await paginate(h, client, 2, descending=True) == [j.id for j in reversed(jobs)]

    # finalized_at: NULLs last ascending, first descending (Postgres's order). Two rows
    # tie (on SQLite one is spelled as Go writes it, without trailing zeros, "...:00.5"
    # against "...:00.500"), and the tie is broken by id.
    stamps = (
        "2025-06-01 00:03:00.500",
        "2025-06-01 00:01:00.000",
        "2025-06-01 00:03:00.5",
        "2025-06-01 00:02:00",
    )
    for job, stamp in zip(jobs[:4], stamps, strict=True):
        h.force_state(job.id, "completed")
        h.sql("UPDATE river_job SET finalized_at = ? WHERE id = ?", stamp, job.id)
    ascending = [jobs[1].id, jobs[3].id, jobs[0].id, jobs[2].id, jobs[4].id]
    for size in (1, 2, 100):
        assert await paginate(h, client, size, order_by="finalized_at") == ascending
        assert (
            await paginate(h, client, size, order_by="finalized_at", descending=True)
            == ascending[::-1]
        )
    page = await h.call(client.job_list, order_by="time", states=["completed"], limit=2)
    assert page.next_cursor is not None and page.next_cursor.column == "finalized_at"


# -- queues ---------------------------------------------------------------------------


async def make_queue(h: Harness, name: str) -> None:
    await h.fetch(h.driver, h.driver.dialect.queue_create_or_set_updated_at(name))


async def test_queues_pause_resume_update(h: Harness) -> None:
    client = h.client()
    await make_queue(h, "conf_q")
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


async def test_queue_get_list(h: Harness) -> None:
    client = h.client()
    for name in ("zeta", "alpha", "mid"):
        await make_queue(h, name)
    with counting(h) as seen:
        alpha = await h.call(client.queue_get, "alpha")
    assert seen == {"queue_get": 1}
    assert alpha.name == "alpha" and alpha.metadata == {} and not alpha.paused
    assert [q.name for q in await h.call(client.queue_list)] == ["alpha", "mid", "zeta"]
    assert [q.name for q in await h.call(client.queue_list, limit=2)] == ["alpha", "mid"]
    with pytest.raises(NotFoundError):
        await h.call(client.queue_get, "nope")


async def test_pause_resume_tell_producers(h: Harness) -> None:
    client = h.client()
    with h.notifications("river_control") as control:
        # With no queue rows "*" matches nothing, yet producers are still told (River).
        assert await h.call(client.queue_pause, "*") == []
        assert control.drain() == [{"action": "pause", "queue": "*"}]
        with pytest.raises(NotFoundError):
            await h.call(client.queue_pause, "ghost")
        with pytest.raises(NotFoundError):
            await h.call(client.queue_resume, "ghost")
        assert control.drain() == []

        await make_queue(h, "work")
        await make_queue(h, "other")
        created = await h.call(client.queue_get, "work")
        clock_passes(created.updated_at)
        with counting(h) as seen:
            (paused,) = await h.call(client.queue_pause, "work")
        assert seen == statements(h, "queue_pause", "queue_control_notify")
        assert paused.paused_at is not None and paused.updated_at > created.updated_at
        assert (await h.call(client.queue_get, "other")).paused_at is None
        (again,) = await h.call(client.queue_pause, "work")  # keeps its times, still tells
        assert (again.paused_at, again.updated_at) == (paused.paused_at, paused.updated_at)
        clock_passes(paused.updated_at)
        everything = await h.call(client.queue_pause, "*")
        assert [q.name for q in everything] == ["other", "work"]  # by name
        assert everything[1].paused_at == paused.paused_at
        resumed = await h.call(client.queue_resume, "*")
        assert [q.paused_at for q in resumed] == [None, None]
        assert control.drain() == [
            {"action": "pause", "queue": "work"},
            {"action": "pause", "queue": "work"},
            {"action": "pause", "queue": "*"},
            {"action": "resume", "queue": "*"},
        ]


async def test_resume_moves_updated_at_once(h: Harness) -> None:
    client = h.client()
    await make_queue(h, "work")
    (paused,) = await h.call(client.queue_pause, "work")
    clock_passes(paused.updated_at)
    (resumed,) = await h.call(client.queue_resume, "work")
    assert resumed.paused_at is None and resumed.updated_at > paused.updated_at
    (still,) = await h.call(client.queue_resume, "work")  # not paused: nothing changes
    assert still.updated_at == resumed.updated_at


async def test_pause_tx_rolls_back_with_what_producers_are_told(h: Harness) -> None:
    client = h.client()
    await make_queue(h, "txq")
    native_kind = h.native_kinds[-1]
    with h.notifications("river_control") as control:
        async with h.native(native_kind, commit=False) as conn:
            await h.call(client.queue_pause_tx, conn, "txq")
        assert not (await h.call(client.queue_get, "txq")).paused
        assert control.drain() == []
        async with h.native(native_kind, commit=True) as conn:
            await h.call(client.queue_pause_tx, conn, "txq")
        assert (await h.call(client.queue_get, "txq")).paused
        assert control.drain() == [{"action": "pause", "queue": "txq"}]


async def test_queue_update_replaces_metadata_and_tells_producers(h: Harness) -> None:
    client = h.client()
    await make_queue(h, "meta")
    old = {"old": 1}
    h.sql(
        "UPDATE river_queue SET metadata = "
        + ("jsonb(?)" if h.dialect_name == "sqlite" else "?::jsonb"),
        '{"old": 1}',
    )
    assert (await h.call(client.queue_get, "meta")).metadata == old
    with h.notifications("river_control") as control:
        out = await h.call(client.queue_update, "meta", metadata={"new": {"deep": True}})
        assert out.metadata == {"new": {"deep": True}}
        assert await h.call(client.queue_get, "meta") == out
        clock_passes(out.updated_at)
        with counting(h) as seen:
            touched = await h.call(client.queue_update, "meta")
        assert seen == {"queue_update": 1}  # nothing to tell
        assert touched.metadata == out.metadata and touched.updated_at > out.updated_at
        with pytest.raises(NotFoundError):
            await h.call(client.queue_update, "ghost", metadata={})
        with pytest.raises(InvalidInputError):
            await h.call(client.queue_update, "meta", metadata={"x": object()})
        assert control.drain() == [
            {"action": "metadata_changed", "metadata": {"new": {"deep": True}}, "queue": "meta"}
        ]
