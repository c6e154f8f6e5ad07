"""Insert hooks may change a job's queue, priority, max_attempts, scheduled_at and tags
(River's insert middleware changes any param), checked as InsertOpts are; on Postgres
and SQLite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import riverboat
from riverboat import InsertManyParams, InsertOpts, InvalidInputError, JobState, UniqueOpts
from riverboat.middleware import InsertingJob, insert_hook
from riverboat.workflow import workflow_meta
from tests.runtime.dbs import Db, any_db  # noqa: F401

LATER = datetime(2040, 1, 1, tzinfo=UTC)


def route(job: InsertingJob) -> None:
    if job.kind.startswith("bulk_"):
        job.queue = "bulk"
        job.priority = 4
        job.max_attempts = 3
        job.tags = [*job.tags, "routed"]
    if job.kind == "bulk_later":
        job.scheduled_at = LATER


def test_hooks_change_params(any_db: Db) -> None:  # noqa: F811
    db = any_db
    with riverboat.Client(db.url, schema=db.schema, middleware=[insert_hook(route)]) as client:
        one = client.insert({}, InsertOpts(tags=["mine"]), kind="bulk_export").job
        assert (one.queue, one.priority, one.max_attempts, one.tags) == (
            "bulk",
            4,
            3,
            ["mine", "routed"],
        )
        assert one.state is JobState.AVAILABLE
        many = client.insert_many(
            [InsertManyParams({}, kind="bulk_later"), InsertManyParams({}, kind="plain")]
        )
        assert (many[0].job.queue, many[0].job.state, many[0].job.scheduled_at) == (
            "bulk",
            JobState.SCHEDULED,
            LATER,
        )
        assert (many[1].job.queue, many[1].job.priority) == ("default", 1)
        unique = InsertOpts(unique_opts=UniqueOpts(by_period=timedelta(hours=1)))
        with pytest.raises(InvalidInputError, match="queue of a unique job"):
            client.insert({}, unique, kind="bulk_unique")

    def bad_priority(job: InsertingJob) -> None:
        job.priority = 9

    def unschedule(job: InsertingJob) -> None:
        job.scheduled_at = None

    for hook, message in ((bad_priority, "priority"), (unschedule, "not removed")):
        with riverboat.Client(db.url, schema=db.schema, middleware=[insert_hook(hook)]) as client:
            with pytest.raises(InvalidInputError, match=message):
                client.insert({}, InsertOpts(scheduled_at=LATER), kind="plain")
            # Refused before anything was written: still only the one plain job.
            assert [j.id for j in client.job_list(kinds=["plain"]).jobs] == [many[1].job.id]


def test_hooks_may_not_take_away_riverboats_own_metadata(any_db: Db) -> None:  # noqa: F811
    """A hook that replaces a job's metadata (``job.metadata = {...}``) dropped the
    workflow part of a workflow task's metadata: the task waiting on another stayed
    pending for ever, nothing left to promote it. A sequence job lost its sequence, and
    ran out of order. Such a hook is refused, naming the key; one that adds to the
    metadata keeps working."""
    db = any_db

    def replace_metadata(job: InsertingJob) -> None:
        job.metadata = {"tenant": "acme"}

    def add_tenant(job: InsertingJob) -> None:
        job.metadata["tenant"] = "acme"

    with riverboat.Client(
        db.url, schema=db.schema, middleware=[insert_hook(replace_metadata)]
    ) as client:
        wf = riverboat.Workflow("hooked")
        wf.add("a", {}, kind="wf_a")
        wf.add("b", {}, kind="wf_b", deps=["a"])
        with pytest.raises(InvalidInputError, match="riverboat_workflow") as info:
            client.workflow_insert(wf)
        assert info.value.field.startswith("middleware insert_begin")
        with pytest.raises(InvalidInputError, match="riverboat_sequence"):
            client.insert({}, InsertOpts(sequence="acct-1"), kind="seq_job")
        assert client.job_list(kinds=["wf_a", "wf_b", "seq_job"]).jobs == []
        # A job without riverboat's keys may have its metadata replaced.
        plain = client.insert({}, InsertOpts(metadata={"x": 1}), kind="plain").job
        assert plain.metadata == {"tenant": "acme"}
    with riverboat.Client(db.url, schema=db.schema, middleware=[insert_hook(add_tenant)]) as client:
        wf = riverboat.Workflow("hooked")
        wf.add("a", {}, kind="wf_a")
        wf.add("b", {}, kind="wf_b", deps=["a"])
        stored = client.workflow_insert(wf)
        task_b = next(t.job for t in stored.tasks if t.name == "b")
        assert task_b.metadata["tenant"] == "acme"
        assert (workflow_meta(task_b) or {}).get("dep_ids")
        seq = client.insert({}, InsertOpts(sequence="acct-1"), kind="seq_job").job
        assert seq.metadata == {"riverboat_sequence": {"key": "acct-1"}, "tenant": "acme"}
