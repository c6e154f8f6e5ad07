"""Errors, attempts, snoozes, cancellation and recorded output: what one side's worker
writes, the other side reads correctly, and continues from."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from riverboat import InsertOpts, Job, JobCancel, JobSnooze, Workers, record_output
from tests.interop import helpers
from tests.interop.river_go import GoError, RiverGo, Target


def go_insert(river: RiverGo, kind: str, args: dict[str, Any], **opts: Any) -> int:
    spec = {"kind": kind, "args": args, "opts": opts or None}
    job_id: int = river.insert("insert", [spec])["results"][0]["job"]["id"]
    return job_id


def test_river_discards_and_riverboat_reads_the_errors(river: RiverGo, target: Target) -> None:
    job_id = go_insert(river, "doomed", {"do": "fail", "message": "disk <full>"}, max_attempts=1)
    with helpers.client(target) as client:
        worker = river.worker("--kinds=doomed")
        try:
            job = helpers.wait_for_state(client, job_id, "discarded")
        finally:
            worker.stop()
    assert job.attempt == 1 and job.finalized_at is not None
    assert [(e.attempt, e.error) for e in job.errors] == [(1, "disk <full>")]


def test_riverboat_discards_and_river_reads_the_errors(river: RiverGo, target: Target) -> None:
    workers = Workers()

    @workers.register("doomed")
    def doomed(job: Job[Any]) -> None:
        raise ValueError("disk <full>")

    with helpers.client(target, workers) as client:
        job_id = client.insert({}, InsertOpts(max_attempts=1), kind="doomed").job.id
        client.run_until_idle()
    job = river.job("get", job_id)
    assert job["state"] == "discarded" and job["attempt"] == 1 and job["finalized_at"]
    assert len(job["errors"]) == 1
    assert job["errors"][0]["attempt"] == 1 and "disk <full>" in job["errors"][0]["error"]


def test_river_snoozes_and_riverboat_continues(river: RiverGo, target: Target) -> None:
    """River snoozes attempt 1 for 3 s (not counted as an attempt); riverboat runs it
    next as attempt 1 and sees River's snooze count."""
    job_id = go_insert(river, "sleepy", {"do": "snooze", "snooze_seconds": 3})
    with helpers.client(target) as reader:
        worker = river.worker("--kinds=sleepy")
        try:
            worker.wait_event(lambda e: e.get("event") == "done" and e["id"] == job_id)
        finally:
            worker.stop()
        snoozed = reader.job_get(job_id)
    assert snoozed.state in ("available", "scheduled")
    assert snoozed.metadata.get("snoozes") == 1
    assert snoozed.attempt == 0 and snoozed.errors == []
    attempts: list[int] = []
    workers = Workers()

    @workers.register("sleepy")
    def sleepy(job: Job[Any]) -> None:
        attempts.append(job.attempt)

    with helpers.client(target, workers) as client:
        client.start()
        try:
            done = helpers.wait_for_state(client, job_id, "completed")
        finally:
            client.stop()
    assert attempts == [1] and done.attempt == 1
    assert done.metadata.get("snoozes") == 1


def test_riverboat_snoozes_and_river_continues(river: RiverGo, target: Target) -> None:
    workers = Workers()

    @workers.register("sleepy")
    def sleepy(job: Job[Any]) -> None:
        raise JobSnooze(3)

    with helpers.client(target, workers) as client:
        job_id = client.insert({"do": "snooze", "snooze_seconds": 3}, kind="sleepy").job.id
        client.start()
        try:
            helpers.wait_until_metadata(client, job_id, "snoozes")
        finally:
            client.stop()
        snoozed = client.job_get(job_id)
        assert snoozed.attempt == 0 and snoozed.metadata["snoozes"] == 1
        # River's worker sees one snooze already and completes this time.
        worker = river.worker("--kinds=sleepy")
        try:
            done = helpers.wait_for_state(client, job_id, "completed")
        finally:
            worker.stop()
    assert done.attempt == 1
    assert [e["attempt"] for e in worker.events_of("run")] == [1]


def test_river_worker_cancels_and_riverboat_reads_it(river: RiverGo, target: Target) -> None:
    job_id = go_insert(river, "refused", {"do": "cancel", "message": "not today"})
    with helpers.client(target) as client:
        worker = river.worker("--kinds=refused")
        try:
            job = helpers.wait_for_state(client, job_id, "cancelled")
        finally:
            worker.stop()
    assert job.finalized_at is not None and job.attempt == 1
    assert len(job.errors) == 1 and "not today" in job.errors[0].error


def test_riverboat_worker_cancels_and_river_reads_it(river: RiverGo, target: Target) -> None:
    workers = Workers()

    @workers.register("refused")
    def refused(job: Job[Any]) -> None:
        raise JobCancel("not today")

    with helpers.client(target, workers) as client:
        job_id = client.insert({}, kind="refused").job.id
        client.run_until_idle()
    job = river.job("get", job_id)
    assert job["state"] == "cancelled" and job["finalized_at"] and job["attempt"] == 1
    assert "not today" in job["errors"][0]["error"]


def test_river_job_cancel_stops_a_job_riverboat_runs(river: RiverGo, target: Target) -> None:
    started = threading.Event()
    workers = Workers()

    @workers.register("long_haul")
    async def long_haul(job: Job[Any]) -> None:
        started.set()
        await asyncio.sleep(60)

    with helpers.client(target, workers) as client:
        job_id = client.insert({}, kind="long_haul").job.id
        client.start()
        try:
            assert started.wait(20), "riverboat never started the job"
            river.job("cancel", job_id)
            job = helpers.wait_for_state(client, job_id, "cancelled")
        finally:
            client.stop()
    assert job.finalized_at is not None
    assert "cancel_attempted_at" in job.metadata


def test_riverboat_job_cancel_stops_a_job_river_runs(river: RiverGo, target: Target) -> None:
    job_id = go_insert(river, "long_haul", {"do": "wait_cancel"})
    with helpers.client(target) as client:
        worker = river.worker("--kinds=long_haul")
        try:
            worker.wait_event(lambda e: e.get("event") == "waiting" and e["id"] == job_id)
            client.job_cancel(job_id)
            job = helpers.wait_for_state(client, job_id, "cancelled")
        finally:
            worker.stop()
    assert job.finalized_at is not None and job.attempt == 1
    assert "cancel_attempted_at" in job.metadata


def test_recorded_output_both_ways(river: RiverGo, target: Target) -> None:
    workers = Workers()

    @workers.register("reporter")
    def reporter(job: Job[Any]) -> None:
        record_output({"rows": 3, "by": "python"})

    go_id = go_insert(river, "reporter", {"do": "ok", "record_output": {"rows": 5, "by": "go"}})
    with helpers.client(target) as client:
        worker = river.worker("--kinds=reporter")
        try:
            from_go = helpers.wait_for_state(client, go_id, "completed")
        finally:
            worker.stop()
    assert from_go.metadata["output"] == {"rows": 5, "by": "go"}
    with helpers.client(target, workers) as client:
        py_id = client.insert({}, kind="reporter").job.id
        client.run_until_idle()
    assert river.job("get", py_id)["metadata"]["output"] == {"rows": 3, "by": "python"}


def test_river_job_retry_reruns_a_job_riverboat_discarded(river: RiverGo, target: Target) -> None:
    """River's JobRetry on a job riverboat discarded makes it available now; riverboat
    works it again with the old error kept."""
    attempts: list[int] = []
    workers = Workers()

    @workers.register("second_chance")
    def second_chance(job: Job[Any]) -> None:
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise ValueError("first time fails")

    with helpers.client(target, workers) as client:
        job_id = client.insert({}, InsertOpts(max_attempts=1), kind="second_chance").job.id
        client.run_until_idle()
        assert client.job_get(job_id).state == "discarded"
        retried = river.job("retry", job_id)
        assert retried["state"] == "available" and retried["finalized_at"] is None
        client.run_until_idle()
        done = client.job_get(job_id)
    assert attempts == [1, 2] and done.state == "completed"
    assert [e.attempt for e in done.errors] == [1]


def test_riverboat_job_retry_and_delete_on_jobs_river_finished(
    river: RiverGo, target: Target
) -> None:
    failed = go_insert(river, "go_done", {"do": "fail"}, max_attempts=1)
    completed = go_insert(river, "go_done", {"do": "ok"})
    with helpers.client(target) as client:
        worker = river.worker("--kinds=go_done")
        try:
            helpers.wait_for_state(client, failed, "discarded")
            helpers.wait_for_state(client, completed, "completed")
            assert client.job_delete(completed).id == completed
            client.job_retry(failed)
            done = helpers.wait_for_state(client, failed, "discarded")
        finally:
            worker.stop()
    # River ran it twice: once before the retry, once after (still failing).
    assert [e["attempt"] for e in worker.events_of("run") if e["id"] == failed] == [1, 2]
    assert done.attempt == 2 and len(done.errors) == 2
    with pytest.raises(GoError, match="not found"):
        river.job("get", completed)
