"""Jobs both ways: River inserts with every insert API and riverboat works them;
riverboat inserts with every insert API and River works them; scheduled and retryable
jobs are promoted by the other side's leader."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from riverboat import InsertManyParams, InsertOpts, Job, Workers
from tests.interop import helpers
from tests.interop.river_go import RiverGo, Target

GO_INSERT_MODES = [
    "insert",
    "insert_tx",
    "insert_many",
    "insert_many_tx",
    "insert_many_fast",
    "insert_many_fast_tx",
]


def recording_workers(seen: list[tuple[int, dict[str, Any]]], *kinds: str) -> Workers:
    workers = Workers()
    for kind in kinds:

        @workers.register(kind)
        def record(job: Job[Any]) -> None:
            seen.append((job.id, job.args))

    return workers


@pytest.mark.parametrize("mode", GO_INSERT_MODES)
def test_river_inserts_and_riverboat_works(river: RiverGo, target: Target, mode: str) -> None:
    jobs = [
        {"kind": "go_made", "args": {"n": 1, "name": "plain"}},
        {
            "kind": "go_made",
            "args": {"n": 2, "tags": ["x"]},
            "opts": {"priority": 3, "tags": ["urgent"]},
        },
        {"type": "map", "args": {"n": 3, "nested": {"b": [1, 2], "a": "é"}}},
    ]
    inserted = river.insert(mode, jobs)
    assert inserted["count"] == 3
    seen: list[tuple[int, dict[str, Any]]] = []
    with helpers.client(target, recording_workers(seen, "go_made", "interop_map")) as client:
        client.run_until_idle()
        rows = client.job_list(kinds=["go_made", "interop_map"]).jobs
    assert sorted(args["n"] for _, args in seen) == [1, 2, 3]
    by_n = {args["n"]: args for _, args in seen}
    assert by_n[3] == {"n": 3, "nested": {"b": [1, 2], "a": "é"}}
    assert {row.state for row in rows} == {"completed"}
    prioritized = [row for row in rows if row.priority == 3]
    assert len(prioritized) == 1 and prioritized[0].tags == ["urgent"]


def test_river_insert_tx_rolled_back_leaves_nothing(river: RiverGo, target: Target) -> None:
    river.insert("insert_tx", [{"kind": "go_made", "args": {"n": 1}}], rollback=True)
    with helpers.client(target) as client:
        assert client.job_list(kinds=["go_made"]).jobs == []


@contextmanager
def user_transaction(target: Target) -> Iterator[Any]:
    """The caller's own open transaction, as an application holds one for insert_tx."""
    if target.dialect == "postgres":
        import psycopg

        with psycopg.connect(target.url) as conn, conn.transaction():
            yield conn
        return
    from riverboat.drivers._sqlite_module import sqlite_module

    conn = sqlite_module().connect(target.url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("COMMIT")
    finally:
        conn.close()


RIVERBOAT_INSERT_MODES = ["insert", "insert_tx", "insert_many", "insert_many_fast"]


@pytest.mark.parametrize("mode", RIVERBOAT_INSERT_MODES)
def test_riverboat_inserts_and_river_works(river: RiverGo, target: Target, mode: str) -> None:
    args = [{"n": 1}, {"n": 2, "name": "<b>ü</b>"}, {"n": 3, "nested": {"z": 1.5, "a": None}}]
    opts = InsertOpts(queue="default", tags=["from-python"])
    with helpers.client(target) as client:
        if mode == "insert":
            ids = [client.insert(a, opts, kind="py_made").job.id for a in args]
        elif mode == "insert_tx":
            with user_transaction(target) as conn:
                ids = [client.insert_tx(conn, a, opts, kind="py_made").job.id for a in args]
        elif mode == "insert_many":
            params = [InsertManyParams(a, opts, kind="py_made") for a in args]
            ids = [r.job.id for r in client.insert_many(params)]
        else:
            params = [InsertManyParams(a, opts, kind="py_made") for a in args]
            assert client.insert_many_fast(params) == 3
            ids = [row.id for row in client.job_list(kinds=["py_made"]).jobs]
        worker = river.worker("--kinds=py_made")
        try:
            finished = [helpers.wait_for_state(client, i, "completed") for i in ids]
        finally:
            worker.stop()
    assert sorted(e["id"] for e in worker.events_of("done")) == sorted(ids)
    assert all(job.attempt == 1 and job.attempted_by for job in finished)
    assert all(job.tags == ["from-python"] for job in finished)


def test_river_schedules_and_riverboat_leader_promotes(river: RiverGo, target: Target) -> None:
    at = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    job_id = river.insert(
        "insert", [{"kind": "go_later", "args": {}, "opts": {"scheduled_at": at}}]
    )["results"][0]["job"]["id"]
    seen: list[tuple[int, dict[str, Any]]] = []
    with helpers.client(target, recording_workers(seen, "go_later")) as client:
        assert client.job_get(job_id).state == "scheduled"
        client.start()
        try:
            job = helpers.wait_for_state(client, job_id, "completed")
        finally:
            client.stop()
    assert job.scheduled_at >= datetime.fromisoformat(at) - timedelta(milliseconds=1)
    assert [i for i, _ in seen] == [job_id]


def test_riverboat_schedules_and_river_leader_promotes(river: RiverGo, target: Target) -> None:
    with helpers.client(target) as client:
        job = client.insert(
            {}, InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(seconds=1)), kind="py_later"
        ).job
        assert job.state == "scheduled"
        worker = river.worker("--kinds=py_later")
        try:
            # River's scheduler runs every 5 s: the job becomes available within that.
            done = helpers.wait_for_state(client, job.id, "completed", timeout=30)
        finally:
            worker.stop()
    assert done.attempt == 1 and done.attempted_by == [worker.events[0]["client_id"]]


def test_river_fails_and_riverboat_leader_retries(river: RiverGo, target: Target) -> None:
    """River's attempt 1 fails (retry in 6 s: River makes a retry due within its 5 s
    scheduler interval available at once); River stops; the riverboat leader makes the
    job available when due and riverboat's attempt 2 completes it, with River's error."""
    job_id = river.insert(
        "insert", [{"kind": "flaky", "args": {"do": "fail", "fail_attempts": 1, "message": "boom"}}]
    )["results"][0]["job"]["id"]
    with helpers.client(target) as reader:
        worker = river.worker("--kinds=flaky", "--retry-after=6")
        try:
            helpers.wait_for_state(reader, job_id, "retryable")
        finally:
            worker.stop()
    seen: list[tuple[int, dict[str, Any]]] = []
    with helpers.client(target, recording_workers(seen, "flaky")) as client:
        client.start()
        try:
            job = helpers.wait_for_state(client, job_id, "completed")
        finally:
            client.stop()
    assert job.attempt == 2
    assert [e.error for e in job.errors] == ["boom"]
    assert job.errors[0].attempt == 1
    assert len(job.attempted_by) == 2


def test_riverboat_fails_and_river_leader_retries(river: RiverGo, target: Target) -> None:
    workers = Workers()

    @workers.register("flaky")
    def flaky(job: Job[Any]) -> None:
        raise RuntimeError("python said no")

    # Retried in 6 s: past the 5 s scheduler interval within which riverboat (like River)
    # makes a retry available at once, so the job waits as retryable for River's leader.
    with helpers.client(target, workers, retry_policy=helpers.RetryAfter(6)) as client:
        job_id = client.insert({"do": "ok"}, kind="flaky").job.id
        client.start()
        try:
            helpers.wait_for_state(client, job_id, "retryable")
        finally:
            client.stop()
        worker = river.worker("--kinds=flaky")
        try:
            job = helpers.wait_for_state(client, job_id, "completed", timeout=30)
        finally:
            worker.stop()
    assert job.attempt == 2
    assert job.attempted_by[-1] == worker.events[0]["client_id"]
    assert len(job.errors) == 1 and "python said no" in job.errors[0].error
    go_job = river.job("get", job_id)
    assert go_job["errors"][0]["attempt"] == 1
    assert "python said no" in go_job["errors"][0]["error"]
