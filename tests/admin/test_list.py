"""job_list: every filter, every order, and keyset pagination (River's JobList)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import riverboat
from riverboat import InvalidInputError, JobListCursor, JobRow, JobState
from tests.admin.helpers import counting, force_state, insert, sql


def ids(jobs: list[JobRow]) -> list[int]:
    return [j.id for j in jobs]


def test_defaults_id_order_limit_100(client: riverboat.Client, pg_driver: Any) -> None:
    client.insert_many([riverboat.InsertManyParams({"n": i}, kind="many") for i in range(105)])
    with counting(pg_driver) as seen:
        page = client.job_list()
    assert seen == {"job_list": 1}
    assert len(page.jobs) == 100
    assert ids(page.jobs) == sorted(ids(page.jobs))
    assert page.next_cursor is not None and page.last_cursor == page.next_cursor
    rest = client.job_list(cursor=page.next_cursor)
    assert len(rest.jobs) == 5 and rest.next_cursor is None
    assert rest.last_cursor is not None and rest.last_cursor.id == rest.jobs[-1].id
    assert rest.jobs[0].id > page.jobs[-1].id
    empty = client.job_list(cursor=rest.last_cursor)
    assert empty.jobs == [] and empty.next_cursor is None and empty.last_cursor is None


def test_filters(client: riverboat.Client, pg_url: str, pg_schema: str) -> None:
    a = insert(client, kind="kind_a", queue="q1", priority=1, tags=["red", "big"])
    b = insert(client, kind="kind_b", queue="q2", priority=2, tags=["red"], metadata={"x": 1})
    c = insert(client, kind="kind_b", queue="q1", priority=3, metadata={"x": 1, "y": {"z": 2}})
    force_state(pg_url, pg_schema, c.id, "completed")

    assert ids(client.job_list(ids=[c.id, a.id]).jobs) == [a.id, c.id]
    assert ids(client.job_list(kinds=["kind_b"]).jobs) == [b.id, c.id]
    assert ids(client.job_list(queues=["q1"]).jobs) == [a.id, c.id]
    assert ids(client.job_list(states=["completed"]).jobs) == [c.id]
    assert ids(client.job_list(states=[JobState.AVAILABLE]).jobs) == [a.id, b.id]
    assert ids(client.job_list(priorities=[2, 3]).jobs) == [b.id, c.id]
    assert ids(client.job_list(tags_all=["red", "big"]).jobs) == [a.id]
    assert ids(client.job_list(tags_any=["big", "nope"]).jobs) == [a.id]
    assert ids(client.job_list(tags_any=["red"]).jobs) == [a.id, b.id]
    assert ids(client.job_list(metadata={"x": 1}).jobs) == [b.id, c.id]
    assert ids(client.job_list(metadata={"y": {"z": 2}}).jobs) == [c.id]
    # Filters combine with AND.
    assert ids(client.job_list(kinds=["kind_b"], queues=["q1"]).jobs) == [c.id]
    assert client.job_list(kinds=["kind_a"], states=["completed"]).jobs == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"states": ["bogus"]}, "states"),
        ({"states": "available"}, "states"),
        ({"ids": ["1"]}, "ids"),
        ({"ids": []}, "ids"),
        ({"queues": ["Not A Queue"]}, "queues"),
        ({"priorities": [5]}, "priorities"),
        ({"kinds": [""]}, "kinds"),
        ({"metadata": [1]}, "metadata"),
        ({"limit": 0}, "limit"),
        ({"limit": 10_001}, "limit"),
        ({"order_by": "kind"}, "order_by"),
        ({"cursor": "garbage!"}, "cursor"),
    ],
)
def test_invalid_inputs_run_no_sql(
    client: riverboat.Client, pg_driver: Any, kwargs: dict[str, Any], field: str
) -> None:
    with counting(pg_driver) as seen, pytest.raises(InvalidInputError) as info:
        client.job_list(**kwargs)
    assert info.value.field == field
    assert seen == {}


def test_cursor_must_match_the_order(client: riverboat.Client) -> None:
    job = insert(client)
    cursor = JobListCursor.from_job(job, "scheduled_at")
    with pytest.raises(InvalidInputError):
        client.job_list(order_by="id", cursor=cursor)
    # The string form round-trips.
    assert JobListCursor.decode(str(cursor)) == cursor
    assert client.job_list(order_by="scheduled_at", cursor=str(cursor)).jobs == []


def _paginate(client: riverboat.Client, page_size: int, **kwargs: Any) -> list[int]:
    seen: list[int] = []
    cursor = None
    while True:
        page = client.job_list(limit=page_size, cursor=cursor, **kwargs)
        seen.extend(ids(page.jobs))
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


def test_pagination_by_scheduled_at_with_ties(client: riverboat.Client) -> None:
    base = datetime(2030, 1, 1, tzinfo=UTC)
    # Ties on scheduled_at are broken by id.
    times = [base + timedelta(minutes=m) for m in (5, 1, 5, 3, 1, 5, 2)]
    jobs = [insert(client, scheduled_at=t) for t in times]
    expected = [j.id for j in sorted(jobs, key=lambda j: (j.scheduled_at, j.id))]
    for size in (1, 2, 3, 100):
        assert _paginate(client, size, order_by="scheduled_at") == expected
        assert _paginate(client, size, order_by="scheduled_at", descending=True) == list(
            reversed(expected)
        )


def test_pagination_by_id_descending(client: riverboat.Client) -> None:
    jobs = [insert(client) for _ in range(7)]
    assert _paginate(client, 3, descending=True) == [j.id for j in reversed(jobs)]


def test_pagination_by_finalized_at_with_nulls(
    client: riverboat.Client, pg_url: str, pg_schema: str
) -> None:
    jobs = [insert(client) for _ in range(6)]
    base = datetime(2025, 6, 1, tzinfo=UTC)
    for job, minutes in zip(jobs[:4], (3, 1, 3, 2), strict=True):
        force_state(pg_url, pg_schema, job.id, "completed")
        sql(
            pg_url,
            pg_schema,
            "UPDATE river_job SET finalized_at = %s WHERE id = %s",
            base + timedelta(minutes=minutes),
            job.id,
        )
    stored = [client.job_get(j.id) for j in jobs]
    finalized = sorted((j for j in stored if j.finalized_at), key=lambda j: (j.finalized_at, j.id))
    unfinalized = [j.id for j in stored if j.finalized_at is None]
    # NULLs last ascending, first descending (Postgres's order), id as the tiebreak.
    asc = [j.id for j in finalized] + unfinalized
    for size in (1, 2, 4, 100):
        assert _paginate(client, size, order_by="finalized_at") == asc
        assert _paginate(client, size, order_by="finalized_at", descending=True) == list(
            reversed(asc)
        )


def test_order_by_time_follows_the_first_state(
    client: riverboat.Client, pg_url: str, pg_schema: str
) -> None:
    jobs = [insert(client) for _ in range(3)]
    base = datetime(2025, 6, 1, tzinfo=UTC)
    for job, minutes in zip(jobs, (3, 1, 2), strict=True):
        force_state(pg_url, pg_schema, job.id, "running")
        sql(
            pg_url,
            pg_schema,
            "UPDATE river_job SET attempted_at = %s, scheduled_at = %s WHERE id = %s",
            base + timedelta(minutes=minutes),
            base - timedelta(minutes=minutes),
            job.id,
        )
    by_attempted = [jobs[1].id, jobs[2].id, jobs[0].id]
    page = client.job_list(order_by="time", states=["running"], limit=2)
    assert ids(page.jobs) == by_attempted[:2]
    assert page.next_cursor is not None and page.next_cursor.column == "attempted_at"
    rest = client.job_list(order_by="time", states=["running"], cursor=page.next_cursor)
    assert ids(rest.jobs) == by_attempted[2:]
    # Without a state filter "time" is scheduled_at (River lists available first).
    assert ids(client.job_list(order_by="time").jobs) == [jobs[0].id, jobs[2].id, jobs[1].id]
    # finalized states order by finalized_at.
    for job in jobs:
        force_state(pg_url, pg_schema, job.id, "cancelled")
    assert client.job_list(order_by="time", states=["cancelled"]).last_cursor is not None
    page = client.job_list(order_by="time", states=["cancelled"])
    assert page.last_cursor is not None and page.last_cursor.column == "finalized_at"


def test_list_tx(client: riverboat.Client, pg_url: str) -> None:
    import psycopg

    job = insert(client, kind="listed")
    with psycopg.connect(pg_url) as conn:
        page = client.job_list_tx(conn, kinds=["listed"])
    assert ids(page.jobs) == [job.id]
    with psycopg.connect(pg_url) as conn, pytest.raises(InvalidInputError):
        client.job_list_tx(conn, colour=["blue"])  # type: ignore[call-arg]
