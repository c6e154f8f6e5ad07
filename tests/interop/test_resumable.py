"""Resumable jobs across the two sides: a job whose cursor step one side stopped in is
resumed by the other from that cursor, as River resumes it.

The job walks items 0-4 in the cursor step ``process`` and then runs ``finish``; its
first attempt stops at item 2, recording 2 as the step's cursor, and fails."""

from __future__ import annotations

from typing import Any

from riverboat import Job, Workers
from tests.interop import helpers
from tests.interop.river_go import RiverGo, Target
from tests.waiting import wait_until

KIND = "resumable_items"


def resumable_workers(processed: list[int], finished: list[int]) -> Workers:
    workers = Workers()

    @workers.register(KIND)
    def items(job: Job[Any]) -> None:
        def process(cursor: int | None) -> None:
            for i in range(cursor or 0, job.args["items"]):
                if i == job.args["fail_at"] and job.attempt == 1:
                    job.set_cursor(i)
                    raise RuntimeError("stopped at an item on purpose")
                processed.append(i)

        if job.args.get("prepare"):
            job.step("prepare", lambda: None)
        job.step_cursor("process", process)
        job.step("finish", lambda: finished.append(job.id))

    return workers


def river_stops_at_item_2(river: RiverGo, target: Target, use_tx: bool) -> int:
    spec = {"kind": KIND, "args": {"items": 5, "fail_at": 2, "use_tx": use_tx}}
    job_id: int = river.insert("insert", [spec])["results"][0]["job"]["id"]
    # A retry 3 s out is made available at once (within the scheduler interval) with that
    # time; River stops well before it comes.
    worker = river.worker("--retry-after=3")
    try:
        worker.wait_event(lambda e: e.get("event") == "done" and e["id"] == job_id)
    finally:
        worker.stop()
    assert [e["item"] for e in worker.events_of("item")] == [0, 1]
    return job_id


def resume_in_riverboat(target: Target, job_id: int) -> tuple[list[int], list[int], Any]:
    processed: list[int] = []
    finished: list[int] = []
    with helpers.client(target, resumable_workers(processed, finished)) as client:
        stopped = client.job_get(job_id)
        assert stopped.attempt == 1 and stopped.errors
        client.start()
        try:
            done = helpers.wait_for_state(client, job_id, "completed")
        finally:
            client.stop()
    return processed, finished, done


def test_river_resumable_set_cursor_resumed_by_riverboat(river: RiverGo, target: Target) -> None:
    """River's ResumableSetCursor inside the step, then the attempt fails."""
    job_id = river_stops_at_item_2(river, target, use_tx=False)
    processed, finished, done = resume_in_riverboat(target, job_id)
    assert processed == [2, 3, 4]
    assert finished == [job_id] and done.attempt == 2


def test_river_set_step_cursor_tx_resumed_by_riverboat(river: RiverGo, target: Target) -> None:
    job_id = river_stops_at_item_2(river, target, use_tx=True)
    processed, finished, done = resume_in_riverboat(target, job_id)
    assert processed == [2, 3, 4], "riverboat must re-run the step from River's cursor"
    assert finished == [job_id] and done.attempt == 2


def riverboat_stops_and_river_resumes(river: RiverGo, target: Target, prepare: bool) -> None:
    processed: list[int] = []
    finished: list[int] = []
    workers = resumable_workers(processed, finished)
    with helpers.client(target, workers, retry_policy=helpers.RetryAfter(3)) as client:
        args = {"items": 5, "fail_at": 2, "prepare": prepare}
        job_id = client.insert(args, kind=KIND).job.id
        client.start()
        try:
            # The failed attempt's error and metadata are written in one statement.
            wait_until(lambda: client.job_get(job_id).errors, what="attempt 1 failed")
        finally:
            client.stop()
        assert processed == [0, 1] and finished == []
        stopped = client.job_get(job_id)
        assert stopped.metadata.get("river:resumable_cursor") == {"process": 2}
        worker = river.worker()
        try:
            done = helpers.wait_for_state(client, job_id, "completed")
        finally:
            worker.stop()
    assert [e["item"] for e in worker.events_of("item")] == [2, 3, 4]
    assert [e["id"] for e in worker.events_of("finish")] == [job_id]
    assert done.attempt == 2


def test_riverboat_cursor_after_a_finished_step_resumed_by_river(
    river: RiverGo, target: Target
) -> None:
    riverboat_stops_and_river_resumes(river, target, prepare=True)


def test_riverboat_cursor_in_the_first_step_resumed_by_river(
    river: RiverGo, target: Target
) -> None:
    riverboat_stops_and_river_resumes(river, target, prepare=False)
