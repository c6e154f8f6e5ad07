"""Inserting jobs into real Postgres with Client and AsyncClient, checked column by column.

Every test runs once with the sync ``Client`` (psycopg) and once with ``AsyncClient``
(async psycopg) on a freshly migrated schema. Rows are read back with a separate plain
psycopg connection, so the assertions are about what is stored, not what was returned.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import psycopg
import pytest
from psycopg.rows import dict_row

from riverboat import (
    AsyncClient,
    Client,
    InsertManyParams,
    InsertOpts,
    InsertResult,
    JobState,
    UniqueOpts,
)


@dataclass
class EmailArgs:
    kind: ClassVar[str] = "email"
    to: str
    subject: str = "hello"


class ToJsonArgs:
    kind = "to_json_args"

    def __init__(self, n: int) -> None:
        self.n = n

    def to_json(self) -> str:
        return json.dumps({"n": self.n, "label": "é<>"})


@dataclass
class KindDefaultsArgs:
    kind: ClassVar[str] = "kind_defaults"
    x: int = 1

    def insert_opts(self) -> InsertOpts:
        return InsertOpts(queue="per_kind", priority=3, max_attempts=7, tags=["from_kind"])


@dataclass
class NumberedArgs:
    kind: ClassVar[str] = "numbered"
    n: int


class Inserter:
    """One face over Client and AsyncClient, so each test body covers both."""

    def __init__(self, client: Client | AsyncClient, driver: Any) -> None:
        self.client = client
        self.driver = driver
        self.is_async = isinstance(client, AsyncClient)

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.client, name)(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def insert(
        self, args: object, opts: InsertOpts | None = None, *, kind: str | None = None
    ) -> InsertResult:
        result: InsertResult = await self._call("insert", args, opts, kind=kind)
        return result

    async def insert_many(self, params: list[Any]) -> list[InsertResult]:
        result: list[InsertResult] = await self._call("insert_many", params)
        return result


def _make(kind: str, pg_driver: Any, apg_driver: Any, **kwargs: Any) -> Inserter:
    if kind == "sync":
        return Inserter(Client(pg_driver, **kwargs), pg_driver)
    return Inserter(AsyncClient(apg_driver, **kwargs), apg_driver)


@pytest.fixture(params=["sync", "async"])
def client_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def inserter(client_kind: str, pg_driver: Any, apg_driver: Any) -> Inserter:
    return _make(client_kind, pg_driver, apg_driver)


@pytest.fixture
def db(pg_url: str, pg_schema: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    with psycopg.connect(
        pg_url, autocommit=True, row_factory=dict_row, options=f"-csearch_path={pg_schema}"
    ) as conn:
        yield conn


def row(db: psycopg.Connection[dict[str, Any]], job_id: int) -> dict[str, Any]:
    found = db.execute(
        "SELECT id, args, attempt, attempted_at, attempted_by, created_at, errors,"
        " finalized_at, kind, max_attempts, metadata, priority, queue, scheduled_at,"
        " state::text AS state, tags, unique_key, unique_states::text AS unique_states,"
        " now() AS db_now FROM river_job WHERE id = %s",
        [job_id],
    ).fetchone()
    assert found is not None, f"job {job_id} is not in river_job"
    return found


def count(db: psycopg.Connection[dict[str, Any]]) -> int:
    got = db.execute("SELECT count(*) AS n FROM river_job").fetchone()
    assert got is not None
    return int(got["n"])


def assert_fresh_defaults(r: dict[str, Any]) -> None:
    """Columns River leaves at their insert values for every new job."""
    assert r["attempt"] == 0
    assert r["attempted_at"] is None
    assert r["attempted_by"] is None
    assert r["errors"] is None
    assert r["finalized_at"] is None
    assert abs(r["db_now"] - r["created_at"]) < timedelta(seconds=30)


# --- args shapes and column values -----------------------------------------------------


async def test_dataclass_args_all_defaults(inserter: Inserter, db: Any) -> None:
    res = await inserter.insert(EmailArgs(to="a@example.com"))
    assert not res.unique_skipped_as_duplicate
    r = row(db, res.job.id)
    assert r["args"] == {"to": "a@example.com", "subject": "hello"}
    assert r["kind"] == "email"
    assert r["queue"] == "default"
    assert r["priority"] == 1
    assert r["max_attempts"] == 25
    assert r["state"] == "available"
    assert r["tags"] == []
    assert r["metadata"] == {}
    assert r["unique_key"] is None
    assert r["unique_states"] is None
    # Not scheduled: scheduled_at is the insert time itself.
    assert r["scheduled_at"] == r["created_at"]
    assert_fresh_defaults(r)
    # The returned JobRow is the stored row.
    job = res.job
    assert (job.kind, job.queue, job.priority, job.max_attempts, job.state) == (
        "email",
        "default",
        1,
        25,
        JobState.AVAILABLE,
    )
    assert job.args == r["args"]
    assert job.created_at == r["created_at"]
    assert job.scheduled_at == r["scheduled_at"]
    assert job.tags == [] and job.metadata == {} and job.attempted_by == []


async def test_to_json_args(inserter: Inserter, db: Any) -> None:
    res = await inserter.insert(ToJsonArgs(5))
    r = row(db, res.job.id)
    assert r["kind"] == "to_json_args"
    assert r["args"] == {"n": 5, "label": "é<>"}
    assert res.job.args == {"n": 5, "label": "é<>"}


async def test_dict_args_with_kind(inserter: Inserter, db: Any) -> None:
    args = {"nested": {"z": [1, 2.5, None], "a": True}, "s": "x"}
    res = await inserter.insert(args, kind="dict_kind")
    r = row(db, res.job.id)
    assert r["kind"] == "dict_kind"
    assert r["args"] == args


async def test_pydantic_args(inserter: Inserter, db: Any) -> None:
    pydantic = pytest.importorskip("pydantic")

    class Model(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        kind: ClassVar[str] = "pydantic_kind"
        name: str
        count: int = 0

    res = await inserter.insert(Model(name="p", count=2))
    r = row(db, res.job.id)
    assert r["kind"] == "pydantic_kind"
    assert r["args"] == {"name": "p", "count": 2}


async def test_all_options(inserter: Inserter, db: Any) -> None:
    opts = InsertOpts(
        queue="mail_out",
        priority=4,
        max_attempts=3,
        tags=["alpha", "beta-1", "with_underscore"],
        metadata={"source": "api", "nested": {"n": 1, "l": [1, "two"]}},
    )
    res = await inserter.insert(EmailArgs(to="b@example.com"), opts)
    r = row(db, res.job.id)
    assert r["queue"] == "mail_out"
    assert r["priority"] == 4
    assert r["max_attempts"] == 3
    assert r["tags"] == ["alpha", "beta-1", "with_underscore"]
    assert r["metadata"] == {"source": "api", "nested": {"n": 1, "l": [1, "two"]}}
    assert r["state"] == "available"
    assert_fresh_defaults(r)
    assert res.job.tags == r["tags"]
    assert res.job.metadata == r["metadata"]


async def test_scheduled_in_the_future(inserter: Inserter, db: Any) -> None:
    at = datetime.now(UTC).replace(microsecond=123456) + timedelta(hours=2)
    res = await inserter.insert(EmailArgs(to="c"), InsertOpts(scheduled_at=at))
    r = row(db, res.job.id)
    assert r["state"] == "scheduled"
    assert r["scheduled_at"] == at
    assert res.job.state == JobState.SCHEDULED
    assert_fresh_defaults(r)


async def test_scheduled_in_the_past_is_still_scheduled(inserter: Inserter, db: Any) -> None:
    # River: any explicit ScheduledAt means state scheduled, even a past one; the
    # scheduler makes it available.
    at = datetime(2020, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    res = await inserter.insert(EmailArgs(to="d"), InsertOpts(scheduled_at=at))
    r = row(db, res.job.id)
    assert r["state"] == "scheduled"
    assert r["scheduled_at"] == at


async def test_scheduled_at_with_offset_is_stored_as_the_same_instant(
    inserter: Inserter, db: Any
) -> None:
    from datetime import timezone

    at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=timezone(timedelta(hours=-7)))
    res = await inserter.insert(EmailArgs(to="e"), InsertOpts(scheduled_at=at))
    assert row(db, res.job.id)["scheduled_at"] == at.astimezone(UTC)


async def test_pending(inserter: Inserter, db: Any) -> None:
    res = await inserter.insert(EmailArgs(to="f"), InsertOpts(pending=True))
    r = row(db, res.job.id)
    assert r["state"] == "pending"
    assert r["scheduled_at"] == r["created_at"]
    # Pending wins over a scheduled time as well.
    at = datetime.now(UTC) + timedelta(days=1)
    res2 = await inserter.insert(EmailArgs(to="g"), InsertOpts(pending=True, scheduled_at=at))
    r2 = row(db, res2.job.id)
    assert r2["state"] == "pending"
    assert abs(r2["scheduled_at"] - at) < timedelta(microseconds=1)


async def test_per_kind_insert_opts_defaults_and_overrides(inserter: Inserter, db: Any) -> None:
    res = await inserter.insert(KindDefaultsArgs())
    r = row(db, res.job.id)
    assert (r["queue"], r["priority"], r["max_attempts"], r["tags"]) == (
        "per_kind",
        3,
        7,
        ["from_kind"],
    )
    # Per-insert options win field by field; unset ones keep the kind's defaults.
    res2 = await inserter.insert(KindDefaultsArgs(), InsertOpts(priority=2, tags=[]))
    r2 = row(db, res2.job.id)
    assert (r2["queue"], r2["priority"], r2["max_attempts"], r2["tags"]) == (
        "per_kind",
        2,
        7,
        [],
    )


async def test_client_max_attempts_default(
    client_kind: str, pg_driver: Any, apg_driver: Any, db: Any
) -> None:
    inserter = _make(client_kind, pg_driver, apg_driver, max_attempts=5)
    res = await inserter.insert(EmailArgs(to="h"))
    assert row(db, res.job.id)["max_attempts"] == 5
    # The kind's own default still beats the client's.
    res2 = await inserter.insert(KindDefaultsArgs())
    assert row(db, res2.job.id)["max_attempts"] == 7


# --- insert_many ---------------------------------------------------------------------------


async def test_insert_many_mixed_shapes_in_order(inserter: Inserter, db: Any) -> None:
    params: list[Any] = [
        EmailArgs(to="1"),
        InsertManyParams({"k": 2}, kind="dict_kind"),
        ToJsonArgs(3),
        InsertManyParams(EmailArgs(to="4"), InsertOpts(queue="other", priority=2)),
        InsertManyParams(
            NumberedArgs(5), InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(hours=1))
        ),
        KindDefaultsArgs(6),
    ]
    results = await inserter.insert_many(params)
    assert [r.job.kind for r in results] == [
        "email",
        "dict_kind",
        "to_json_args",
        "email",
        "numbered",
        "kind_defaults",
    ]
    ids = [r.job.id for r in results]
    assert ids == sorted(ids) and len(set(ids)) == 6
    rows = [row(db, i) for i in ids]
    assert rows[1]["args"] == {"k": 2}
    assert rows[3]["queue"] == "other" and rows[3]["priority"] == 2
    assert rows[4]["state"] == "scheduled"
    assert rows[5]["queue"] == "per_kind" and rows[5]["max_attempts"] == 7
    for r in rows:
        assert_fresh_defaults(r)
    assert not any(r.unique_skipped_as_duplicate for r in results)


async def test_insert_many_over_one_batch(inserter: Inserter, db: Any) -> None:
    total = 5_003
    before = inserter.driver.stats.by_query.get("job_insert_many", 0)
    results = await inserter.insert_many([NumberedArgs(n) for n in range(total)])
    assert len(results) == total
    assert [r.job.args["n"] for r in results] == list(range(total))
    ids = [r.job.id for r in results]
    assert len(set(ids)) == total
    assert count(db) == total
    stored = db.execute("SELECT (args->>'n')::int AS n FROM river_job ORDER BY id").fetchall()
    assert [s["n"] for s in stored] == list(range(total))
    # 5,000 per statement: two batches, two statements.
    assert inserter.driver.stats.by_query["job_insert_many"] - before == 2


# --- unique jobs -----------------------------------------------------------------------------


async def test_unique_duplicate_returns_existing_row(inserter: Inserter, db: Any) -> None:
    opts = InsertOpts(unique_opts=UniqueOpts(by_args=True))
    first = await inserter.insert(EmailArgs(to="u"), opts)
    second = await inserter.insert(EmailArgs(to="u"), opts)
    other = await inserter.insert(EmailArgs(to="v"), opts)
    assert not first.unique_skipped_as_duplicate
    assert second.unique_skipped_as_duplicate
    assert second.job.id == first.job.id
    assert second.job == first.job
    assert not other.unique_skipped_as_duplicate and other.job.id != first.job.id
    assert count(db) == 2
    r = row(db, first.job.id)
    key = '&kind=email&args={"subject":"hello","to":"u"}'
    assert r["unique_key"] == hashlib.sha256(key.encode()).digest()
    assert r["unique_states"] == "11110101"
    assert first.job.unique_key == r["unique_key"]
    assert first.job.unique_states == 245


async def test_unique_row_outside_its_states_no_longer_blocks(inserter: Inserter, db: Any) -> None:
    opts = InsertOpts(unique_opts=UniqueOpts(by_queue=True))
    first = await inserter.insert(EmailArgs(to="w"), opts)
    # Cancelled is not in the default unique states, so a cancelled job frees the key.
    db.execute(
        "UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = %s",
        [first.job.id],
    )
    again = await inserter.insert(EmailArgs(to="w"), opts)
    assert not again.unique_skipped_as_duplicate
    assert again.job.id != first.job.id
    assert count(db) == 2


async def test_unique_custom_states_bitmask(inserter: Inserter, db: Any) -> None:
    states = ["available", "cancelled", "pending", "running", "scheduled"]
    res = await inserter.insert(
        EmailArgs(to="x"), InsertOpts(unique_opts=UniqueOpts(by_args=True, by_state=states))
    )
    assert row(db, res.job.id)["unique_states"] == "11010011"  # 211
    assert res.job.unique_states == 211


async def test_unique_in_insert_many_mixes_new_and_duplicates(inserter: Inserter, db: Any) -> None:
    opts = InsertOpts(unique_opts=UniqueOpts(by_args=True))
    existing = await inserter.insert(NumberedArgs(1), opts)
    results = await inserter.insert_many(
        [
            InsertManyParams(NumberedArgs(0), opts),
            InsertManyParams(NumberedArgs(1), opts),
            NumberedArgs(2),
        ]
    )
    assert [r.unique_skipped_as_duplicate for r in results] == [False, True, False]
    assert results[1].job.id == existing.job.id
    assert [r.job.args["n"] for r in results] == [0, 1, 2]
    assert count(db) == 3


async def test_two_identical_unique_jobs_in_one_batch_insert_once(
    inserter: Inserter, db: Any
) -> None:
    # River's single INSERT ... ON CONFLICT DO UPDATE fails the whole batch here (Postgres
    # refuses to update one row twice in a statement); riverboat sends each unique key
    # once per statement and reports the twin as the duplicate a second insert would be.
    opts = InsertOpts(unique_opts=UniqueOpts(by_args=True))
    first, twin = await inserter.insert_many(
        [InsertManyParams(NumberedArgs(9), opts), InsertManyParams(NumberedArgs(9), opts)]
    )
    assert (first.unique_skipped_as_duplicate, twin.unique_skipped_as_duplicate) == (False, True)
    assert twin.job.id == first.job.id
    assert count(db) == 1


# --- transactions ---------------------------------------------------------------------------


@pytest.fixture
async def tx_conn(
    client_kind: str, pg_url: str
) -> AsyncIterator[psycopg.Connection[Any] | psycopg.AsyncConnection[Any]]:
    if client_kind == "sync":
        with psycopg.connect(pg_url) as conn:
            yield conn
    else:
        async with await psycopg.AsyncConnection.connect(pg_url) as aconn:
            yield aconn


async def _finish(conn: Any, commit: bool) -> None:
    result = conn.commit() if commit else conn.rollback()
    if inspect.isawaitable(result):
        await result


@pytest.mark.parametrize("commit", [False, True])
async def test_insert_tx(inserter: Inserter, tx_conn: Any, db: Any, commit: bool) -> None:
    res = await inserter._call("insert_tx", tx_conn, EmailArgs(to="tx"))
    assert res.job.kind == "email"
    # Not visible to anyone else before the caller's transaction ends.
    assert count(db) == 0
    await _finish(tx_conn, commit)
    assert count(db) == (1 if commit else 0)
    if commit:
        assert row(db, res.job.id)["args"] == {"to": "tx", "subject": "hello"}


@pytest.mark.parametrize("commit", [False, True])
async def test_insert_many_tx(inserter: Inserter, tx_conn: Any, db: Any, commit: bool) -> None:
    results = await inserter._call(
        "insert_many_tx", tx_conn, [NumberedArgs(n) for n in range(5_002)]
    )
    assert len(results) == 5_002
    assert count(db) == 0
    await _finish(tx_conn, commit)
    assert count(db) == (5_002 if commit else 0)


# --- the insert notification -----------------------------------------------------------------


@pytest.fixture
def listener(pg_url: str, pg_schema: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'LISTEN "{pg_schema}.river_insert"')
        yield conn


def notifications_until(conn: psycopg.Connection[Any], marker_queue: str) -> list[tuple[str, str]]:
    """Every notification up to and including the marker queue's, waiting at most 10s."""
    seen: list[tuple[str, str]] = []
    for note in conn.notifies(timeout=10):
        seen.append((note.channel, note.payload))
        if json.loads(note.payload) == {"queue": marker_queue}:
            return seen
    raise AssertionError(f"no notification for {marker_queue!r} within 10s; got {seen}")


async def test_insert_notifies_available_queue(
    inserter: Inserter, listener: psycopg.Connection[Any], pg_schema: str
) -> None:
    await inserter.insert(EmailArgs(to="n"))
    note = next(listener.notifies(timeout=10, stop_after=1), None)
    assert note is not None, "no insert notification within 10s"
    assert note.channel == f"{pg_schema}.river_insert"
    assert note.payload == '{"queue": "default"}'  # River's exact bytes, space included


async def test_no_notification_for_scheduled_or_pending(
    inserter: Inserter, listener: psycopg.Connection[Any], pg_schema: str
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    await inserter.insert(EmailArgs(to="s"), InsertOpts(queue="quiet", scheduled_at=later))
    await inserter.insert(EmailArgs(to="p"), InsertOpts(queue="quiet", pending=True))
    await inserter.insert_many(
        [InsertManyParams(EmailArgs(to="m"), InsertOpts(queue="quiet", scheduled_at=later))]
    )
    await inserter.insert(EmailArgs(to="marker"), InsertOpts(queue="marker"))
    seen = notifications_until(listener, "marker")
    assert seen == [(f"{pg_schema}.river_insert", '{"queue": "marker"}')]


async def test_insert_many_notifies_each_queue_once(
    inserter: Inserter, listener: psycopg.Connection[Any]
) -> None:
    await inserter.insert_many(
        [
            InsertManyParams(EmailArgs(to="1"), InsertOpts(queue="q_a")),
            InsertManyParams(EmailArgs(to="2"), InsertOpts(queue="q_b")),
            InsertManyParams(EmailArgs(to="3"), InsertOpts(queue="q_a")),
        ]
    )
    await inserter.insert(EmailArgs(to="marker"), InsertOpts(queue="marker"))
    payloads = sorted(p for _, p in notifications_until(listener, "marker"))
    assert payloads == ['{"queue": "marker"}', '{"queue": "q_a"}', '{"queue": "q_b"}']


async def test_notification_cooldown_per_queue(
    client_kind: str, pg_driver: Any, apg_driver: Any, listener: psycopg.Connection[Any]
) -> None:
    # River's notify limiter: at most one insert notification per queue per FetchCooldown.
    inserter = _make(client_kind, pg_driver, apg_driver, fetch_cooldown=3600)
    await inserter.insert(EmailArgs(to="1"), InsertOpts(queue="busy"))
    await inserter.insert(EmailArgs(to="2"), InsertOpts(queue="busy"))
    await inserter.insert(EmailArgs(to="m"), InsertOpts(queue="marker"))
    payloads = [p for _, p in notifications_until(listener, "marker")]
    assert payloads == ['{"queue": "busy"}', '{"queue": "marker"}']


async def test_rolled_back_insert_tx_sends_no_notification(
    inserter: Inserter, tx_conn: Any, listener: psycopg.Connection[Any]
) -> None:
    await inserter._call("insert_tx", tx_conn, EmailArgs(to="r"), InsertOpts(queue="rolled"))
    await _finish(tx_conn, False)
    await inserter.insert(EmailArgs(to="m"), InsertOpts(queue="marker"))
    assert [p for _, p in notifications_until(listener, "marker")] == ['{"queue": "marker"}']


# --- statement counts ------------------------------------------------------------------------


async def test_one_statement_per_insert_and_per_batch(inserter: Inserter) -> None:
    stats = inserter.driver.stats
    start = stats.statements
    await inserter.insert(EmailArgs(to="1"))
    assert stats.statements - start == 1
    await inserter.insert(EmailArgs(to="2"), InsertOpts(unique_opts=UniqueOpts(by_args=True)))
    assert stats.statements - start == 2
    await inserter.insert_many([NumberedArgs(n) for n in range(10)])
    assert stats.statements - start == 3
    await inserter.insert_many([NumberedArgs(n) for n in range(5_001)])
    assert stats.statements - start == 5
    # One job goes by the single-row statement: two inserts and the 5,001st job's batch.
    assert stats.by_query.get("job_insert_one", 0) >= 3
    assert stats.by_query.get("job_insert_many", 0) >= 2
