"""The same job inserted by riverboat and by the ``riverqueue`` 0.7.0 PyPI client.

Both write into one migrated schema (riverqueue through SQLAlchemy with the schema on
``search_path``); the rows must agree on every column except id and timestamps. For
unique jobs riverqueue 0.7.0 predates River's current unique-key scheme, so those are
compared against River's algorithm in test_unique.py instead; the divergences found are
pinned at the bottom of this file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

riverqueue = pytest.importorskip("riverqueue")
sqlalchemy = pytest.importorskip("sqlalchemy")

from riverqueue.driver import riversqlalchemy  # noqa: E402

from riverboat import Client, InsertManyParams, InsertOpts, UniqueOpts  # noqa: E402

COMPARED = (
    "args",
    "kind",
    "queue",
    "priority",
    "max_attempts",
    "state",
    "tags",
    "metadata",
    "attempt",
    "errors",
    "attempted_by",
    "attempted_at",
    "finalized_at",
    "unique_key",
    "unique_states",
)


class SharedArgs:
    """Args both clients accept: a ``kind`` and ``to_json()``."""

    kind = "compat_job"

    def __init__(self, customer_id: int, note: str = "héllo <world> & co") -> None:
        self.customer_id = customer_id
        self.note = note

    def to_json(self) -> str:
        return json.dumps({"customer_id": self.customer_id, "note": self.note, "n": [1, 2.5]})


@pytest.fixture
def rq_client(pg_url: str, pg_schema: str) -> Iterator[Any]:
    url = pg_url.replace("postgresql://", "postgresql+psycopg://", 1).replace(
        "postgres://", "postgresql+psycopg://", 1
    )
    engine = sqlalchemy.create_engine(url, connect_args={"options": f"-csearch_path={pg_schema}"})
    yield riverqueue.Client(riversqlalchemy.Driver(engine))
    engine.dispose()


@pytest.fixture
def rb_client(pg_driver: Any) -> Client:
    return Client(pg_driver)


@pytest.fixture
def db(pg_url: str, pg_schema: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    with psycopg.connect(
        pg_url, autocommit=True, row_factory=dict_row, options=f"-csearch_path={pg_schema}"
    ) as conn:
        yield conn


def row(db: psycopg.Connection[dict[str, Any]], job_id: int) -> dict[str, Any]:
    found = db.execute(
        "SELECT *, state::text AS state, unique_states::text AS unique_states"
        " FROM river_job WHERE id = %s",
        [job_id],
    ).fetchone()
    assert found is not None
    return dict(found)


FUTURE = datetime.now(UTC).replace(microsecond=250000) + timedelta(days=2)
PAST = datetime(2021, 6, 1, 8, 30, tzinfo=UTC)

CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "queue_and_priority": {"queue": "mail_out", "priority": 3},
    "tags": {"tags": ["alpha", "beta-2", "under_score"]},
    "scheduled_future": {"scheduled_at": FUTURE},
    "scheduled_past": {"scheduled_at": PAST},
    "max_attempts": {"max_attempts": 4},
    "everything": {
        "queue": "q9",
        "priority": 4,
        "tags": ["xyz"],
        "scheduled_at": FUTURE,
        "max_attempts": 2,
    },
}


def compare(rb: dict[str, Any], rq: dict[str, Any]) -> None:
    assert {c: rb[c] for c in COMPARED} == {c: rq[c] for c in COMPARED}


@pytest.mark.parametrize("case", list(CASES))
def test_single_insert_matches(case: str, rb_client: Client, rq_client: Any, db: Any) -> None:
    options = CASES[case]
    rb_res = rb_client.insert(SharedArgs(1), InsertOpts(**options))
    rq_res = rq_client.insert(SharedArgs(1), riverqueue.InsertOpts(**options))
    rb, rq = row(db, rb_res.job.id), row(db, rq_res.job.id)
    compare(rb, rq)
    assert rb["state"] == ("scheduled" if "scheduled_at" in options else "available")
    if "scheduled_at" in options:
        assert rb["scheduled_at"] == rq["scheduled_at"] == options["scheduled_at"]
    else:
        # Both stamp scheduled_at with the insert's own now().
        assert rb["scheduled_at"] == rb["created_at"]
        assert rq["scheduled_at"] == rq["created_at"]
    assert rb["unique_key"] is None and rb["unique_states"] is None


def test_insert_many_matches(rb_client: Client, rq_client: Any, db: Any) -> None:
    names = list(CASES)
    rb_results = rb_client.insert_many(
        [InsertManyParams(SharedArgs(i), InsertOpts(**CASES[n])) for i, n in enumerate(names)]
    )
    rq_count = rq_client.insert_many(
        [
            riverqueue.InsertManyParams(SharedArgs(i), riverqueue.InsertOpts(**CASES[n]))
            for i, n in enumerate(names)
        ]
    )
    assert rq_count == len(names)
    rb_ids = {r.job.id for r in rb_results}
    rq_rows = [
        r
        for r in db.execute(
            "SELECT *, state::text AS state, unique_states::text AS unique_states"
            " FROM river_job ORDER BY id"
        ).fetchall()
        if r["id"] not in rb_ids
    ]
    assert len(rq_rows) == len(names)
    for rb_res, rq in zip(rb_results, rq_rows, strict=True):
        compare(row(db, rb_res.job.id), dict(rq))


# --- divergences of riverqueue 0.7.0 from River, pinned so a change is noticed ----------


def test_riverqueue_treats_priority_zero_as_default(rb_client: Client, rq_client: Any) -> None:
    # riverqueue picks options with `or`, so 0 silently means "default" (Go's cmp.Or does
    # the same); riverboat refuses 0 as out of range instead of guessing.
    res = rq_client.insert(SharedArgs(1), riverqueue.InsertOpts(priority=0))
    assert res.job.priority == 1
    with pytest.raises(ValueError):
        rb_client.insert(SharedArgs(1), InsertOpts(priority=0))


def test_riverqueue_unique_fast_path_fails_on_current_schema(rq_client: Any, db: Any) -> None:
    # 0.7.0's unique insert uses ON CONFLICT (kind, unique_key), an index River dropped in
    # migration 006 for the (unique_key) + unique_states bitmask index.
    with pytest.raises(sqlalchemy.exc.ProgrammingError, match="ON CONFLICT"):
        rq_client.insert(
            SharedArgs(1),
            riverqueue.InsertOpts(unique_opts=riverqueue.UniqueOpts(by_args=True)),
        )
    assert db.execute("SELECT count(*) AS n FROM river_job").fetchone()["n"] == 0


def test_riverqueue_unique_by_state_writes_no_unique_key(
    rb_client: Client, rq_client: Any, db: Any
) -> None:
    # With by_state, 0.7.0 takes an advisory lock and a lookup instead, and inserts the job
    # with unique_key and unique_states NULL: River's unique index never sees it, so a Go
    # (or riverboat) insert of the same unique job is not deduplicated against it.
    states = ["available", "completed", "pending", "running", "retryable", "scheduled"]
    rq_res = rq_client.insert(
        SharedArgs(1),
        riverqueue.InsertOpts(unique_opts=riverqueue.UniqueOpts(by_args=True, by_state=states)),
    )
    rq = row(db, rq_res.job.id)
    assert rq["unique_key"] is None and rq["unique_states"] is None
    rb_res = rb_client.insert(
        SharedArgs(1), InsertOpts(unique_opts=UniqueOpts(by_args=True, by_state=states))
    )
    assert not rb_res.unique_skipped_as_duplicate
    rb = row(db, rb_res.job.id)
    assert rb["unique_key"] is not None and len(rb["unique_key"]) == 32
    assert rb["unique_states"] == "11110101"
