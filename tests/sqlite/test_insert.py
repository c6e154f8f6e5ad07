"""Inserting through riverboat.Client / AsyncClient on a SQLite file."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from riverboat import AsyncClient, Client, InsertManyParams, InsertOpts, JobState, UniqueOpts
from riverboat._unique import unique_states_bitmask
from riverboat.drivers.sqlite import SqliteDriver
from tests.sqlite.helpers import query, raw

_TS = re.compile(r"\A\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\Z")
UNIQUE = InsertOpts(unique_opts=UniqueOpts(by_args=True))


def test_insert_stores_rivers_encodings(sqlite_url: str) -> None:
    scheduled = datetime(2030, 1, 2, 3, 4, 5, 678_900, tzinfo=UTC)
    with Client(sqlite_url) as client:
        result = client.insert(
            {"n": 1, "s": "<&>"},
            InsertOpts(
                queue="q1",
                priority=2,
                max_attempts=7,
                tags=["alpha", "beta"],
                metadata={"m": 1},
                scheduled_at=scheduled,
            ),
            kind="email",
        )
    job = result.job
    assert not result.unique_skipped_as_duplicate
    assert (job.kind, job.queue, job.priority, job.max_attempts) == ("email", "q1", 2, 7)
    assert job.state is JobState.SCHEDULED
    assert job.args == {"n": 1, "s": "<&>"}
    assert job.tags == ["alpha", "beta"]
    assert job.metadata == {"m": 1}
    assert job.scheduled_at == scheduled.replace(microsecond=679_000)
    assert job.created_at.tzinfo is UTC
    assert abs(job.created_at - datetime.now(UTC)) < timedelta(seconds=5)
    (row,) = query(
        sqlite_url,
        "SELECT typeof(args), typeof(metadata), typeof(tags), json(args), scheduled_at, "
        "created_at, attempt, attempted_by, errors, unique_key, unique_states FROM river_job",
    )
    assert row[:3] == ("blob", "blob", "blob")
    assert row[3] == '{"n":1,"s":"\\u003c\\u0026\\u003e"}'  # Go's HTML escaping kept
    assert row[4] == "2030-01-02 03:04:05.679"
    assert _TS.match(row[5])
    assert row[6:] == (0, None, None, None, None)


def test_insert_many_in_order(sqlite_url: str) -> None:
    with Client(sqlite_url) as client:
        results = client.insert_many([InsertManyParams({"i": i}, kind="batch") for i in range(25)])
        assert [r.job.args["i"] for r in results] == list(range(25))
        assert all(r.job.state is JobState.AVAILABLE for r in results)
        assert not any(r.unique_skipped_as_duplicate for r in results)
        assert client.job_get(results[3].job.id) == results[3].job


def test_unique_duplicates_are_detected(sqlite_url: str) -> None:
    with Client(sqlite_url) as client:
        first = client.insert({"x": 1}, UNIQUE, kind="uq")
        again = client.insert({"x": 1}, UNIQUE, kind="uq")
        other = client.insert({"x": 2}, UNIQUE, kind="uq")
        assert not first.unique_skipped_as_duplicate
        assert again.unique_skipped_as_duplicate
        assert again.job.id == first.job.id
        assert not other.unique_skipped_as_duplicate
        assert first.job.unique_key is not None and len(first.job.unique_key) == 32
        assert first.job.unique_states == unique_states_bitmask(None)
        # River's nonce trick leaves the nonce in stored metadata, as River does.
        assert "river:unique_nonce" in first.job.metadata

        batch = client.insert_many(
            [
                InsertManyParams({"x": 1}, UNIQUE, kind="uq"),  # exists already
                InsertManyParams({"x": 3}, UNIQUE, kind="uq"),
                InsertManyParams({"x": 3}, UNIQUE, kind="uq"),  # same as the previous one
                InsertManyParams({"x": 3}, kind="uq"),  # not unique
            ]
        )
    assert [r.unique_skipped_as_duplicate for r in batch] == [True, False, True, False]
    assert batch[0].job.id == first.job.id
    assert batch[2].job.id == batch[1].job.id
    assert batch[3].job.id != batch[1].job.id
    assert "river:unique_nonce" not in batch[3].job.metadata
    assert query(sqlite_url, "SELECT count(*) FROM river_job") == [(4,)]


def test_unique_states_allow_reinsert_outside_them(sqlite_url: str) -> None:
    opts = InsertOpts(
        unique_opts=UniqueOpts(
            by_args=True, by_state=["available", "pending", "running", "scheduled"]
        )
    )
    with Client(sqlite_url) as client:
        first = client.insert({"y": 1}, opts, kind="uq")
        conn = raw(sqlite_url)
        try:
            conn.execute(
                "UPDATE river_job SET state = 'completed', finalized_at = ? WHERE id = ?",
                ("2026-01-01 00:00:00.000", first.job.id),
            )
        finally:
            conn.close()
        second = client.insert({"y": 1}, opts, kind="uq")
    assert not second.unique_skipped_as_duplicate
    assert second.job.id != first.job.id


def test_insert_notifies_through_outbox(sqlite_url: str) -> None:
    with Client(sqlite_url, fetch_cooldown=0) as client:
        client.insert({}, InsertOpts(queue="alpha"), kind="nk")
        client.insert(
            {}, InsertOpts(queue="beta", scheduled_at=datetime.now(UTC) + timedelta(1)), kind="nk"
        )
        client.insert_many(
            [
                InsertManyParams({}, InsertOpts(queue="gamma"), kind="nk"),
                InsertManyParams({}, InsertOpts(queue="gamma"), kind="nk"),
                InsertManyParams({}, InsertOpts(queue="delta", pending=True), kind="nk"),
            ]
        )
    rows = query(
        sqlite_url, "SELECT topic, payload, created_at FROM river_notification ORDER BY id"
    )
    assert [(t, p) for t, p, _ in rows] == [
        ("river_insert", '{"queue": "alpha"}'),
        ("river_insert", '{"queue": "gamma"}'),
    ]
    assert all(_TS.match(created) for _, _, created in rows)


def test_failed_insert_leaves_no_notification(sqlite_url: str) -> None:
    with SqliteDriver(sqlite_url) as driver:
        dialect = driver.dialect
        client = Client(driver, fetch_cooldown=0)
        client.insert({}, kind="ok")
        conn = raw(sqlite_url)
        try:
            # Break inserts with a trigger so the chained notification must roll back.
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON river_job "
                "BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
        finally:
            conn.close()
        with pytest.raises(Exception, match="refused"):
            client.insert({}, InsertOpts(queue="other"), kind="ok")
        assert dialect.name == "sqlite"
    assert query(sqlite_url, "SELECT payload FROM river_notification") == [
        ('{"queue": "default"}',)
    ]


def test_insert_tx_follows_callers_transaction(sqlite_url: str) -> None:
    with Client(sqlite_url) as client:
        conn = raw(sqlite_url)
        try:
            conn.execute("BEGIN IMMEDIATE")
            client.insert_tx(conn, {"t": 1}, kind="tx")
            conn.execute("ROLLBACK")
            conn.execute("BEGIN IMMEDIATE")
            kept = client.insert_tx(conn, {"t": 2}, kind="tx")
            conn.execute("COMMIT")
        finally:
            conn.close()
        assert client.job_get(kept.job.id).args == {"t": 2}
    assert query(sqlite_url, "SELECT count(*) FROM river_job") == [(1,)]


async def test_async_client_inserts(sqlite_url: str) -> None:
    async with AsyncClient(sqlite_url) as client:
        one = await client.insert({"a": 1}, kind="async")
        many = await client.insert_many(
            [InsertManyParams({"a": i}, UNIQUE, kind="async") for i in (1, 1, 2)]
        )
        assert [r.unique_skipped_as_duplicate for r in many] == [False, True, False]
        got = await client.job_get(one.job.id)
        assert got == one.job
