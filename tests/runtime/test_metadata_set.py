"""Staged metadata (River's ``MetadataSet``): set from the work function, from
middleware before and after ``call_next``, and through ``set_metadata()``; written with
the outcome, whatever it is, on Postgres and SQLite."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

import riverboat
from riverboat import (
    InvalidInputError,
    Job,
    JobState,
    QueueConfig,
    Workers,
    record_output,
    set_metadata,
)
from tests.runtime.dbs import Db, any_db  # noqa: F401


class Stamp:
    async def work(self, job: Job[Any], call_next: Callable[[], Awaitable[None]]) -> None:
        job.set_metadata("before", "middleware")
        try:
            await call_next()
        finally:
            job.set_metadata("after", sorted(job.staged_metadata))


def test_staged_metadata_is_written_with_every_outcome(any_db: Db) -> None:  # noqa: F811
    db = any_db
    workers = Workers()
    errors: list[str] = []

    @workers.register("stage", next_retry=lambda job: job.row.created_at + timedelta(hours=1))
    def stage(job: Job[Any]) -> None:
        job.set_metadata("from_job", {"n": job.args["n"]})
        set_metadata("from_function", True)
        set_metadata("overwritten", "first")
        job.set_metadata("overwritten", "second")
        record_output("out")
        for bad_key, bad_value in ((1, "x"), ("", "x"), ("k", object())):
            try:
                job.set_metadata(bad_key, bad_value)  # type: ignore[arg-type]
            except (InvalidInputError, TypeError) as exc:
                errors.append(type(exc).__name__)
        # A value JSON can't hold is named, as NaN is (a bare TypeError before).
        for unstorable in (b"bytes", datetime(2026, 1, 1)):
            try:
                record_output(unstorable)
            except InvalidInputError as exc:
                errors.append(exc.field)
        if job.args["n"] == 2:
            raise RuntimeError("fails, metadata still written")

    client = riverboat.Client(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        middleware=[Stamp()],
        fetch_poll_interval=0.1,
    )
    with client:
        ok = client.insert({"n": 1}, riverboat.InsertOpts(metadata={"kept": 1}), kind="stage")
        failed = client.insert({"n": 2}, kind="stage")
        client.run_until_idle()
        done = client.job_get(ok.job.id)
        retry = client.job_get(failed.job.id)

    assert done.state is JobState.COMPLETED
    assert retry.state is JobState.RETRYABLE
    per_run = ["InvalidInputError"] * 3 + ["output"] * 2
    assert errors == per_run * 2
    staged_keys = ["before", "from_function", "from_job", "output", "overwritten"]
    assert done.metadata == {
        "kept": 1,
        "before": "middleware",
        "from_job": {"n": 1},
        "from_function": True,
        "overwritten": "second",
        "output": "out",
        "after": staged_keys,
    }
    assert retry.metadata["from_job"] == {"n": 2}
    assert retry.metadata["after"] == staged_keys


def test_set_metadata_outside_a_job_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="being worked"):
        set_metadata("k", "v")
    job: Job[Any] = Job.__new__(Job)
    job._ctx = None
    with pytest.raises(RuntimeError, match="client is working"):
        job.set_metadata("k", "v")
    assert job.staged_metadata == {}
