"""Inserts through Client/AsyncClient: one statement each, unique duplicates flagged, and
``*_tx`` on each driver's own connection types committing or rolling back with them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from riverboat import InsertManyParams, InsertOpts, InvalidInputError, JobState, UniqueOpts
from tests.drivers.harness import Harness


async def test_insert_returns_full_row(h: Harness) -> None:
    client = h.client()
    scheduled = datetime.now(UTC) + timedelta(hours=1)
    opts = InsertOpts(
        queue="q1",
        priority=2,
        max_attempts=5,
        scheduled_at=scheduled,
        tags=["tag_a", "tag-b"],
        metadata={"m": 1},
    )
    result = await h.call(client.insert, {"n": 1, "s": "é"}, opts, kind="conf_insert")
    job = result.job
    assert not result.unique_skipped_as_duplicate
    assert isinstance(job.id, int)
    assert job.args == {"n": 1, "s": "é"}
    assert (job.kind, job.queue, job.priority, job.max_attempts) == ("conf_insert", "q1", 2, 5)
    assert job.state is JobState.SCHEDULED
    assert job.tags == ["tag_a", "tag-b"]
    assert job.metadata == {"m": 1}
    assert job.attempt == 0 and job.attempted_by == [] and job.errors == []
    assert abs(job.scheduled_at - scheduled) < timedelta(milliseconds=1)
    assert job.scheduled_at.utcoffset() == timedelta(0) or job.scheduled_at.tzinfo is not None
    assert await h.call(client.job_get, job.id) == job


async def test_insert_many_one_statement(h: Harness) -> None:
    client = h.client()
    before = h.driver.stats.statements
    results = await h.call(
        client.insert_many,
        [InsertManyParams({"i": i}, kind="conf_many") for i in range(25)],
    )
    # One statement (SQLite adds its notification outbox row as a second one).
    expected = 1 if h.driver.dialect.name == "postgres" else 2
    assert h.driver.stats.statements - before == expected
    assert [r.job.args["i"] for r in results] == list(range(25))
    assert len({r.job.id for r in results}) == 25
    assert all(r.job.state is JobState.AVAILABLE for r in results)
    assert await h.count_jobs("conf_many") == 25


async def test_stats_count_one_statement_per_insert(h: Harness) -> None:
    client = h.client()
    stats = h.driver.stats
    before, by_query = stats.statements, dict(stats.by_query)
    for i in range(3):
        await h.call(client.insert, {"i": i}, kind="conf_stats")
    delta = {q: n - by_query.get(q, 0) for q, n in stats.by_query.items()}
    # Postgres has a single-row statement for one job; SQLite uses the batch one.
    insert = "job_insert_one" if h.driver.dialect.name == "postgres" else "job_insert_many"
    assert delta[insert] == 3
    # Postgres sends the insert notification from inside the insert statement; SQLite
    # writes an outbox row in the insert's transaction, for every insert at the default
    # fetch cooldown (riverboat notifies each insert of available jobs; River limits
    # them to one per queue per cooldown).
    extra = {q: n for q, n in delta.items() if n and q != insert}
    if h.driver.dialect.name == "postgres":
        assert not extra, extra
    else:
        assert extra == {"notify_insert": 3}, extra
    assert stats.statements - before == sum(delta.values())
    assert stats.leases >= 3


async def test_unique_duplicate_flagged(h: Harness) -> None:
    client = h.client()
    opts = InsertOpts(unique_opts=UniqueOpts(by_args=True))
    first = await h.call(client.insert, {"u": 1}, opts, kind="conf_unique")
    again = await h.call(client.insert, {"u": 1}, opts, kind="conf_unique")
    other = await h.call(client.insert, {"u": 2}, opts, kind="conf_unique")
    assert not first.unique_skipped_as_duplicate
    assert again.unique_skipped_as_duplicate and again.job.id == first.job.id
    assert not other.unique_skipped_as_duplicate and other.job.id != first.job.id
    assert first.job.unique_key is not None and isinstance(first.job.unique_key, bytes)
    many = await h.call(
        client.insert_many,
        [InsertManyParams({"u": u}, opts, kind="conf_unique") for u in (1, 3)],
    )
    assert [r.unique_skipped_as_duplicate for r in many] == [True, False]
    assert many[0].job.id == first.job.id
    assert await h.count_jobs("conf_unique") == 3


async def test_a_duplicate_of_another_kind_leaves_the_existing_kind(h: Harness) -> None:
    # River 0.49 (PR #1421): with exclude_kind a job of another kind can be the
    # duplicate, and the existing row keeps its own kind.
    client = h.client()
    opts = InsertOpts(unique_opts=UniqueOpts(by_args=True, exclude_kind=True))
    first = await h.call(client.insert, {"u": 1}, opts, kind="conf_kind_a")
    again = await h.call(client.insert, {"u": 1}, opts, kind="conf_kind_b")
    many = await h.call(client.insert_many, [InsertManyParams({"u": 1}, opts, kind="conf_kind_c")])
    assert again.unique_skipped_as_duplicate and again.job.id == first.job.id
    assert many[0].unique_skipped_as_duplicate and many[0].job.id == first.job.id
    assert again.job.kind == many[0].job.kind == "conf_kind_a"
    assert (await h.call(client.job_get, first.job.id)).kind == "conf_kind_a"


async def test_unique_duplicates_within_one_batch(h: Harness) -> None:
    # Postgres's ON CONFLICT DO UPDATE cannot touch one row twice in a statement; the
    # client sends each unique key once per batch and flags the later twins.
    client = h.client()
    opts = InsertOpts(unique_opts=UniqueOpts(by_args=True))
    many = await h.call(
        client.insert_many,
        [InsertManyParams({"u": u}, opts, kind="conf_unique_batch") for u in (1, 1, 2)],
    )
    assert [r.unique_skipped_as_duplicate for r in many] == [False, True, False]
    assert many[0].job.id == many[1].job.id
    assert await h.count_jobs("conf_unique_batch") == 2


def test_unique_batches_take_their_keys_in_one_order(pg_url: str, pg_schema: str) -> None:
    """Postgres: a batch writes its unique jobs in key order, so batches sharing keys
    lock them in one order. Here a transaction holds the smaller key, a batch of both
    (given larger first) waits for it, and the transaction then inserts the larger key.
    Written in the order given, the batch held the larger key while it waited: the two
    deadlocked and Postgres failed one (River's insert does the same). The batch's ids
    and results still follow the order given."""
    import threading

    import psycopg

    from riverboat import Client, InsertResult
    from tests.waiting import wait_until

    opts = InsertOpts(unique_opts=UniqueOpts(by_args=True))
    jobs = [InsertManyParams({"n": n}, opts, kind="lock_order") for n in range(2)]
    with Client(pg_url, schema=pg_schema) as client:
        with psycopg.connect(pg_url) as scratch:  # the keys' order, from a rolled-back insert
            keys = [r.job.unique_key or b"" for r in client.insert_many_tx(scratch, jobs)]
            scratch.rollback()
        smaller, larger = sorted(jobs, key=lambda j: keys[jobs.index(j)])
        results: list[InsertResult] = []
        errors: list[BaseException] = []

        def batch() -> None:
            try:
                results.extend(client.insert_many([larger, smaller]))
            except BaseException as exc:
                errors.append(exc)

        with (
            psycopg.connect(pg_url) as holder,
            psycopg.connect(pg_url, autocommit=True) as watcher,
        ):
            held = client.insert_many_tx(holder, [smaller])[0].job
            waiter = threading.Thread(target=batch)
            waiter.start()
            wait_until(
                lambda: (
                    watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND query LIKE '%river_job%'"
                    ).fetchone()[0]  # type: ignore[index]
                    == 1
                ),
                what="the batch waiting for the held key",
            )
            other = client.insert_many_tx(holder, [larger])[0].job
            holder.commit()
            waiter.join(30)
    assert not errors, errors
    assert [(r.job.id, r.unique_skipped_as_duplicate) for r in results] == [
        (other.id, True),
        (held.id, True),
    ]


async def test_insert_tx_commits_and_rolls_back_with_caller(h: Harness) -> None:
    client = h.client()
    for native_kind in h.native_kinds:
        kind = f"conf_tx_{native_kind}"
        async with h.native(native_kind, commit=False) as conn:
            gone = await h.call(client.insert_tx, conn, {"t": "rollback"}, kind=kind)
            assert gone.job.id > 0
        assert await h.count_jobs(kind) == 0, native_kind
        async with h.native(native_kind, commit=True) as conn:
            kept = await h.call(client.insert_tx, conn, {"t": "commit"}, kind=kind)
            many = await h.call(
                client.insert_many_tx,
                conn,
                [InsertManyParams({"t": i}, kind=kind) for i in range(2)],
            )
            assert len(many) == 2
        assert await h.count_jobs(kind) == 3, native_kind
        assert (await h.call(client.job_get, kept.job.id)).args == {"t": "commit"}


async def test_wrap_refuses_foreign_objects(h: Harness) -> None:
    with pytest.raises(TypeError):
        h.driver.wrap(object())


# --- insert_many_fast ------------------------------------------------------------------


def _copies(h: Harness) -> bool:
    """Drivers whose transactions can COPY (psycopg, asyncpg): the rest use the insert
    statement for every job."""
    return type(h.driver).__name__ in ("PsycopgDriver", "AsyncPsycopgDriver", "AsyncpgDriver")


async def test_insert_many_fast_counts_and_stores_every_column(h: Harness) -> None:
    client = h.client()
    scheduled = datetime.now(UTC) + timedelta(hours=1)
    params = [InsertManyParams({"i": i, "s": "é\t\\n"}, kind="conf_fast") for i in range(30)]
    params.append(
        InsertManyParams(
            {"i": 30},
            InsertOpts(
                queue="q_fast",
                priority=3,
                max_attempts=4,
                scheduled_at=scheduled,
                tags=["tag_a", "tag-b"],
                metadata={"m": [1, "x"]},
            ),
            kind="conf_fast",
        )
    )
    stats = h.driver.stats
    before = dict(stats.by_query)
    assert await h.call(client.insert_many_fast, params) == 31
    assert await h.count_jobs("conf_fast") == 31
    used = {k: v - before.get(k, 0) for k, v in stats.by_query.items() if v != before.get(k, 0)}
    if _copies(h):
        # Two COPYs (with and without scheduled_at) and the insert notification.
        assert used == {"copy_river_job": 2, "job_insert_notify": 1}
    else:
        # One insert statement (SQLite adds its notification outbox row).
        assert "copy_river_job" not in used and used["job_insert_many"] == 1
    plain = await h.call(client.job_list, kinds=["conf_fast"], queues=["default"], limit=100)
    jobs = sorted(plain.jobs, key=lambda j: j.args["i"])
    assert [j.args for j in jobs] == [{"i": i, "s": "é\t\\n"} for i in range(30)]
    first = jobs[0]
    assert first.state is JobState.AVAILABLE and first.attempt == 0
    assert (first.priority, first.max_attempts, first.tags, first.metadata) == (1, 25, [], {})
    assert abs(first.scheduled_at - first.created_at) < timedelta(seconds=5)
    (special,) = (await h.call(client.job_list, queues=["q_fast"])).jobs
    assert special.state is JobState.SCHEDULED
    assert (special.priority, special.max_attempts) == (3, 4)
    assert special.tags == ["tag_a", "tag-b"] and special.metadata == {"m": [1, "x"]}
    assert abs(special.scheduled_at - scheduled) < timedelta(milliseconds=1)


async def test_insert_many_fast_skips_unique_duplicates_without_counting_them(
    h: Harness,
) -> None:
    client = h.client()
    opts = InsertOpts(unique_opts=UniqueOpts(by_args=True))
    await h.call(client.insert, {"n": 1}, opts, kind="conf_fast_unique")
    count = await h.call(
        client.insert_many_fast,
        [
            InsertManyParams({"n": 1}, opts, kind="conf_fast_unique"),  # already stored
            InsertManyParams({"n": 2}, opts, kind="conf_fast_unique"),
            InsertManyParams({"n": 2}, opts, kind="conf_fast_unique"),  # twin in the call
            InsertManyParams({"n": 3}, kind="conf_fast_unique"),  # not unique
        ],
    )
    assert count == 2
    assert await h.count_jobs("conf_fast_unique") == 3


async def test_insert_many_fast_is_all_or_nothing(h: Harness) -> None:
    client = h.client()
    with pytest.raises(InvalidInputError):
        await h.call(
            client.insert_many_fast,
            [InsertManyParams({"n": 1}, kind="conf_fast_bad"), InsertManyParams({"n": 2})],
        )
    assert await h.count_jobs("conf_fast_bad") == 0


async def test_insert_many_fast_tx_rolls_back_with_caller(h: Harness) -> None:
    client = h.client()
    for native_kind in h.native_kinds:
        kind = f"conf_fast_tx_{native_kind}"
        async with h.native(native_kind, commit=False) as conn:
            params = [InsertManyParams({"t": i}, kind=kind) for i in range(3)]
            assert await h.call(client.insert_many_fast_tx, conn, params) == 3
        assert await h.count_jobs(kind) == 0, native_kind
        async with h.native(native_kind, commit=True) as conn:
            params = [InsertManyParams({"t": i}, kind=kind) for i in range(3)]
            assert await h.call(client.insert_many_fast_tx, conn, params) == 3
        assert await h.count_jobs(kind) == 3, native_kind
