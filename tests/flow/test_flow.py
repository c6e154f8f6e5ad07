"""Flow control (riverboat.flow) across real worker processes, on Postgres and SQLite,
checked from the database's own record: each job's ``attempted_at`` (claimed, i.e.
counted as running) and ``finalized_at`` (no longer running) bound what the claim
statements of every process saw."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import riverboat
from riverboat import (
    ConcurrencyLimit,
    InsertManyParams,
    InsertOpts,
    InvalidInputError,
    JobRow,
    JobState,
    MigrationError,
    QueueConfig,
    RateLimit,
)
from riverboat.flow import FlowControl
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def workers(
    db: Db,
    count: int,
    flow: dict[str, Any],
    max_workers: int = 10,
    hard_stop: bool = False,
    fast_fleet: bool = False,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` real ``riverboat worker`` processes with this flow control; with
    ``hard_stop`` a second signal hands their running jobs back instead of waiting; with
    ``fast_fleet`` a killed one counts as dead within seconds (tests/flow/_app.py)."""
    env = {
        **os.environ,
        "RB_FAST_FLEET": "1" if fast_fleet else "0",
        "RB_URL": db.url,
        "RB_SCHEMA": db.schema or "",
        "RB_FLOW": json.dumps(flow),
        "RB_MAX_WORKERS": str(max_workers),
        "PYTHONPATH": str(REPO),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "riverboat.cli", "worker", "tests.flow._app:client"],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        if hard_stop:
            for proc in procs:
                try:
                    proc.wait(2)  # stopped already, or the second signal stops it hard
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _jobs(client: riverboat.Client) -> list[JobRow]:
    return sorted(client.job_list(limit=10_000).jobs, key=lambda j: j.id)


def _all_finalized(client: riverboat.Client, count: int) -> bool:
    jobs = _jobs(client)
    return len(jobs) == count and all(j.finalized_at is not None for j in jobs)


def _max_overlap(jobs: Sequence[JobRow]) -> int:
    """Most jobs whose [attempted_at, finalized_at) intervals overlap at one moment."""
    events: list[tuple[datetime, int]] = []
    for job in jobs:
        assert job.attempted_at is not None and job.finalized_at is not None
        events += [(job.attempted_at, 1), (job.finalized_at, -1)]
    events.sort(key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    most = current = 0
    for _, delta in events:
        current += delta
        most = max(most, current)
    return most


def _insert(db: Db, params: list[InsertManyParams]) -> riverboat.Client:
    client = riverboat.Client(db.url, schema=db.schema)
    client.insert_many(params)
    return client


def test_a_global_limit_holds_across_processes(any_db: Db) -> None:  # noqa: F811
    jobs = [InsertManyParams({"sleep": 0.15}, kind="flow_job") for _ in range(24)]
    client = _insert(any_db, jobs)
    with client:
        with workers(any_db, 3, {"concurrency": {"global_limit": 3}}):
            wait_until(lambda: _all_finalized(client, 24), timeout=60, what="every job finished")
        rows = _jobs(client)
        assert {j.state for j in rows} == {JobState.COMPLETED}
        assert {j.attempt for j in rows} == {1}  # a held-back job is not attempted
        assert _max_overlap(rows) == 3  # reached, never passed


def test_a_global_limit_holds_while_a_killed_process_leaves_jobs_running(
    any_db: Db,  # noqa: F811
) -> None:
    # The killed process's jobs stay running in the table until the registry holds it
    # dead and the leader makes them available again: until then the others count them
    # (by its record, then by its rows) and never run more beside them than the limit
    # leaves; then they run again, under the limit too.
    jobs = [InsertManyParams({"sleep": 0.2}, kind="flow_job") for _ in range(24)]
    client = _insert(any_db, jobs)

    def running_by_pid() -> dict[int, list[JobRow]]:
        by_pid: dict[int, list[JobRow]] = {}
        for job in _jobs(client):
            if job.state is JobState.RUNNING and job.attempted_by:
                by_pid.setdefault(int(job.attempted_by[-1].split("_")[1]), []).append(job)
        return by_pid

    flow = {"concurrency": {"global_limit": 4}}
    with client, workers(any_db, 3, flow, fast_fleet=True) as procs:
        victim_pid = wait_until(
            lambda: next(iter(running_by_pid()), None), timeout=60, what="a job running"
        )
        assert victim_pid is not None
        [victim] = [proc for proc in procs if proc.pid == victim_pid]
        victim.kill()
        victim.wait()
        stuck = {job.id: job for job in running_by_pid().get(victim_pid, [])}
        assert stuck
        wait_until(lambda: _all_finalized(client, 24), timeout=60, what="every job finished")
        rows = _jobs(client)
    assert {j.state for j in rows} == {JobState.COMPLETED}
    # The killed runs, from their claim to their rescue (the error the rescuer wrote),
    # beside every completed run: never more than the limit at once.
    killed = []
    for job in rows:
        if job.id in stuck:
            assert job.attempt == 2 and len(job.errors) == 1  # rescued once, ran again
            killed.append(replace(stuck[job.id], finalized_at=job.errors[0].at))
    assert _max_overlap([*rows, *killed]) <= 4


# A key with a quote and a backslash: on SQLite it sat unescaped in a JSON path, named
# no key, and every job shared one partition (one at a time for the whole queue).
@pytest.mark.parametrize("key", ["customer_id", 'customer "id" \\ 2'])
def test_a_partitioned_limit_caps_each_customer_not_the_queue(any_db: Db, key: str) -> None:  # noqa: F811
    jobs = [
        InsertManyParams({"sleep": 0.15, key: c}, kind="flow_job")
        for _ in range(6)
        for c in (1, 2, 3)
    ]
    client = _insert(any_db, jobs)
    flow = {"concurrency": {"global_limit": 1, "by_args": [key]}}
    with client:
        with workers(any_db, 2, flow):
            wait_until(lambda: _all_finalized(client, 18), timeout=60, what="every job finished")
        rows = _jobs(client)
        for customer in (1, 2, 3):
            assert _max_overlap([j for j in rows if j.args[key] == customer]) == 1
        assert _max_overlap(rows) > 1  # customers ran side by side


def test_a_local_limit_caps_each_process(any_db: Db) -> None:  # noqa: F811
    jobs = [InsertManyParams({"sleep": 0.15}, kind="flow_job") for _ in range(16)]
    client = _insert(any_db, jobs)
    with client:
        with workers(any_db, 2, {"concurrency": {"local_limit": 2}}):
            wait_until(lambda: _all_finalized(client, 16), timeout=60, what="every job finished")
        rows = _jobs(client)
        by_process: dict[str, list[JobRow]] = {}
        for job in rows:
            by_process.setdefault(job.attempted_by[-1], []).append(job)
        assert all(_max_overlap(mine) <= 2 for mine in by_process.values())
        assert _max_overlap(rows) <= 4


def test_a_rate_limit_never_starts_more_than_n_in_any_window(any_db: Db) -> None:  # noqa: F811
    jobs = [InsertManyParams({"sleep": 0.01}, kind="flow_job") for _ in range(12)]
    client = _insert(any_db, jobs)
    with client:
        with workers(any_db, 2, {"rate_limit": {"limit": 4, "period": 1.0}}):
            wait_until(lambda: _all_finalized(client, 12), timeout=60, what="every job finished")
        starts = sorted(j.attempted_at for j in _jobs(client) if j.attempted_at is not None)
        assert len(starts) == 12
        window = timedelta(seconds=1)
        for i, start in enumerate(starts):
            assert sum(1 for s in starts[i:] if s < start + window) <= 4
        assert starts[-1] - starts[0] >= timedelta(seconds=2)  # 12 starts at 4 a second


def test_a_rate_limit_bounds_the_starts_of_bodies_not_only_of_claims(any_db: Db) -> None:  # noqa: F811
    """With the default cooldown a producer claimed ahead of its free slots: a job
    claimed ahead counts in the window of its claim (attempted_at) but its body starts
    when a slot frees, up to a job's duration later, so RateLimit(4, 1s) let 6 bodies
    start within a second (two long jobs held both slots while four more were claimed
    ahead). A rate-limited queue claims nothing ahead now."""
    import threading
    import time

    starts: list[float] = []
    lock = threading.Lock()
    rate_workers = riverboat.Workers()

    @rate_workers.register("rate_body")
    def body(job: riverboat.Job[dict[str, float]]) -> None:
        with lock:
            starts.append(time.monotonic())
        time.sleep(job.args["sleep"])

    # Polled often (as a queue waiting on its rate limit wants): each poll after a full
    # claim claimed ahead.
    queue = riverboat.QueueConfig(
        max_workers=2, rate_limit=RateLimit(limit=4, period=1.0), fetch_poll_interval=0.05
    )
    with riverboat.Client(
        any_db.url,
        schema=any_db.schema,
        queues={"default": queue},
        workers=rate_workers,
    ) as client:
        client.insert_many(
            [
                InsertManyParams({"sleep": 0.9 if n < 2 else 0.05}, kind="rate_body")
                for n in range(12)
            ]
        )
        client.start()
        wait_until(lambda: len(starts) == 12, timeout=60, what="every body started")
        client.stop()
    starts.sort()
    # A body starts a few ms after its claim: within 0.95 s, never more than 4.
    assert max(sum(1 for s in starts[i:] if s < t + 0.95) for i, t in enumerate(starts)) <= 4


def test_sequences_run_one_at_a_time_in_order(any_db: Db) -> None:  # noqa: F811
    params = [
        InsertManyParams({"sleep": 0.05, "n": n}, InsertOpts(sequence=key), kind="flow_job")
        for n in range(8)
        for key in ("acct-1", "acct-2")
    ]
    params.append(InsertManyParams({"sleep": 0.05, "n": 99}, kind="flow_job"))  # no sequence
    client = _insert(any_db, params)
    with client:
        with workers(any_db, 2, {"sequences": True}):
            wait_until(lambda: _all_finalized(client, 17), timeout=60, what="every job finished")
        rows = _jobs(client)
        for key in ("acct-1", "acct-2"):
            mine = [j for j in rows if j.metadata.get("riverboat_sequence", {}).get("key") == key]
            assert len(mine) == 8
            assert _max_overlap(mine) == 1
            by_start = sorted(mine, key=lambda j: j.attempted_at or datetime.min)
            assert [j.args["n"] for j in by_start] == list(range(8))  # insertion order
        assert _max_overlap(rows) > 1  # the two sequences ran side by side


@pytest.mark.parametrize("on_discard", ["halt", "continue"])
def test_a_discarded_job_halts_its_sequence_or_not(any_db: Db, on_discard: str) -> None:  # noqa: F811
    seq = InsertOpts(sequence="s", max_attempts=1)
    params = [
        InsertManyParams({"sleep": 0.01, "n": 0}, seq, kind="flow_job"),
        InsertManyParams({"sleep": 0.01, "n": 1, "fail": True}, seq, kind="flow_job"),
        InsertManyParams({"sleep": 0.01, "n": 2}, seq, kind="flow_job"),
        InsertManyParams({"sleep": 0.01, "n": 3}, InsertOpts(sequence="other"), kind="flow_job"),
    ]
    client = _insert(any_db, params)
    flow = {"sequences": True, "sequence_on_discard": on_discard}
    with client:
        with workers(any_db, 1, flow):
            wait_until(
                lambda: (
                    [j.state for j in _jobs(client)][3] is JobState.COMPLETED
                    and _jobs(client)[1].state is JobState.DISCARDED
                    and (on_discard == "halt" or _jobs(client)[2].state is JobState.COMPLETED)
                ),
                timeout=60,
                what="the sequences settled",
            )
            rows = _jobs(client)
            if on_discard == "halt":
                assert rows[2].state is JobState.AVAILABLE and rows[2].attempt == 0
                client.job_delete(rows[1].id)  # deleting (or retrying) it releases the sequence
                wait_until(
                    lambda: client.job_get(rows[2].id).state is JobState.COMPLETED,
                    timeout=60,
                    what="the sequence went on",
                )


def test_bad_flow_control_is_refused_before_anything_runs() -> None:
    with pytest.raises(InvalidInputError, match="global_limit"):
        ConcurrencyLimit(global_limit=0)
    with pytest.raises(InvalidInputError, match="needs global_limit or local_limit"):
        ConcurrencyLimit()
    with pytest.raises(InvalidInputError, match="by_args"):
        ConcurrencyLimit(global_limit=1, by_args="customer_id")
    with pytest.raises(InvalidInputError, match="limit"):
        RateLimit(limit=-1, period=1)
    with pytest.raises(InvalidInputError, match="period"):
        RateLimit(limit=1, period=0)
    # An int too large for a float raised OverflowError.
    with pytest.raises(InvalidInputError, match="period"):
        RateLimit(limit=1, period=10**400)
    # No args key holds a NUL or a lone surrogate: accepted, the claim failed on every
    # fetch (Postgres) or ended the queue's producer (SQLite).
    for key in ("a\x00", "a\ud800"):
        with pytest.raises(InvalidInputError, match="by_args"):
            ConcurrencyLimit(global_limit=1, by_args=[key])
        with pytest.raises(InvalidInputError, match="by_args"):
            RateLimit(limit=1, period=1, by_args=[key])
    # A string went to the claim as the partition flag: every claim failed on Postgres.
    for bad in ("x", "false", 1, None):
        with pytest.raises(InvalidInputError, match="by_kind"):
            ConcurrencyLimit(global_limit=1, by_kind=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="by_kind"):
            RateLimit(limit=1, period=1, by_kind=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="sequence_on_discard"):
        FlowControl.of(QueueConfig(sequences=True, sequence_on_discard="skip"))  # type: ignore[arg-type]
    assert FlowControl.of(QueueConfig()) is None  # no flow control: River's plain claim
    with (
        riverboat.Client("sqlite:///:memory:") as client,
        pytest.raises(InvalidInputError, match="sequence"),
    ):
        client.insert({}, InsertOpts(sequence=42), kind="flow_job")  # type: ignore[arg-type]
    # Through the metadata (a job's copied onto a new insert) the key was stored as
    # given: on Postgres, jobs with the number 5 as their key ran all at once.
    for sequence in ({"key": 5}, {"key": ""}, {"key": "a", "more": 1}, "a", None):
        with (
            riverboat.Client("sqlite:///:memory:") as client,
            pytest.raises(InvalidInputError, match=r"opts\.metadata"),
        ):
            client.insert(
                {}, InsertOpts(metadata={"riverboat_sequence": sequence}), kind="flow_job"
            )


def test_a_sequence_in_copied_metadata_is_kept_as_written(any_db: Db) -> None:  # noqa: F811
    as_written = {"riverboat_sequence": {"key": "acct-1"}}
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        job = client.insert({}, InsertOpts(metadata=as_written), kind="flow_job").job
        assert job.metadata == as_written


def test_a_job_without_a_partition_key_is_refused_at_insert(any_db: Db) -> None:  # noqa: F811
    limited = QueueConfig(
        concurrency=ConcurrencyLimit(global_limit=2, by_args=["customer_id"]),
        rate_limit=RateLimit(limit=5, period=1, by_args=["region"]),
    )
    with riverboat.Client(any_db.url, schema=any_db.schema, queues={"default": limited}) as client:
        with pytest.raises(InvalidInputError, match=r"^args: has no 'customer_id'"):
            client.insert({"region": "eu"}, kind="flow_job")
        both = {"customer_id": 1, "region": "eu"}
        batch = [
            InsertManyParams(both, kind="flow_job"),
            InsertManyParams({"customer_id": 2}, kind="flow_job"),
        ]
        with pytest.raises(InvalidInputError, match=r"^params\[1\]\.args: has no 'region'"):
            client.insert_many(batch)
        assert client.job_list().jobs == []  # nothing was written
        client.insert(both, kind="flow_job")
        client.insert({}, InsertOpts(queue="unlimited"), kind="flow_job")  # no limits there
        assert len(client.job_list().jobs) == 2
    # An inserting client that does not know the queue's limits can't check: the claim
    # puts such a job in the partition of null (docs/flow-control.md).
    with riverboat.Client(any_db.url, schema=any_db.schema) as insert_only:
        insert_only.insert({"region": "eu"}, kind="flow_job")
        assert len(insert_only.job_list().jobs) == 3


def test_a_job_an_insert_hook_moves_into_a_partitioned_queue_is_checked(any_db: Db) -> None:  # noqa: F811
    """The partition key was checked before the insert hooks ran: a hook that moved a
    job into a queue partitioned by an args key it lacks put it in the partition of
    null, shared with every other such job. Checked again once the hooks ran, before
    anything is written."""
    from riverboat.middleware import insert_hook

    def to_payments(job: Any) -> None:
        job.queue = "payments"

    per = QueueConfig(concurrency=ConcurrencyLimit(global_limit=2, by_args=["customer_id"]))
    with riverboat.Client(
        any_db.url,
        schema=any_db.schema,
        queues={"payments": per},
        middleware=[insert_hook(to_payments)],
    ) as client:
        with pytest.raises(InvalidInputError, match=r"^args: has no 'customer_id'"):
            client.insert({"cents": 100}, kind="charge")  # to "default", moved by the hook
        batch = [
            InsertManyParams({"customer_id": 1}, kind="charge"),
            InsertManyParams({"cents": 100}, kind="charge"),
        ]
        with pytest.raises(InvalidInputError, match=r"^params\[1\]\.args: has no"):
            client.insert_many(batch)
        assert client.job_list().jobs == []  # nothing was written
        moved = client.insert({"customer_id": 7}, kind="charge").job
        assert moved.queue == "payments"


def test_flow_control_on_postgres_needs_riverboats_line(pg_url: str, pg_schema: str) -> None:
    from riverboat.migrations import Migrator

    with riverboat.Client(pg_url, schema=pg_schema) as client:
        Migrator(client.driver, line="riverboat").down(target_version=0)
    limited = QueueConfig(concurrency=ConcurrencyLimit(global_limit=1))
    client = riverboat.Client(pg_url, schema=pg_schema, queues={"default": limited})
    with client, pytest.raises(MigrationError, match="run `riverboat migrate up`"):
        client.start()


def test_a_queue_without_flow_control_claims_without_riverboats_claim_function(
    pg_url: str, pg_schema: str
) -> None:
    """No cost when unused: with no limit the claim is River's plain statement, which
    needs nothing of riverboat's line past its client registry (version 1)."""
    from riverboat.flow import FLOW_CLAIM_LINE_VERSION
    from riverboat.migrations import Migrator

    with riverboat.Client(pg_url, schema=pg_schema) as client:
        Migrator(client.driver, line="riverboat").down(target_version=FLOW_CLAIM_LINE_VERSION - 1)
    try:
        db = Db("postgres", pg_url, pg_schema)
        client = _insert(db, [InsertManyParams({"sleep": 0}, kind="flow_job") for _ in range(5)])
        with workers(db, 1, {}):
            wait_until(lambda: _all_finalized(client, 5), timeout=60, what="jobs worked")
        assert all(job.state is JobState.COMPLETED for job in _jobs(client))
        limited = QueueConfig(concurrency=ConcurrencyLimit(global_limit=1))
        refused = riverboat.Client(pg_url, schema=pg_schema, queues={"default": limited})
        with refused, pytest.raises(MigrationError, match="run `riverboat migrate up`"):
            refused.start()
    finally:
        with riverboat.Client(pg_url, schema=pg_schema) as client:
            Migrator(client.driver, line="riverboat").up()
