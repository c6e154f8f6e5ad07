"""riverboat's own features beside real River workers: a workflow whose tasks are
worked partly by Go (River only sees ordinary jobs, and never claims a task still
pending), and a flow-controlled queue shared with a River worker (River ignores the
limit, documented; every job is still worked exactly once)."""

from __future__ import annotations

import threading
from typing import Any

from riverboat import (
    ConcurrencyLimit,
    InsertManyParams,
    InsertOpts,
    Job,
    JobState,
    QueueConfig,
    Workers,
    Workflow,
)
from tests.interop import helpers
from tests.interop.river_go import RiverGo, Target
from tests.waiting import wait_until


def test_a_workflow_worked_partly_by_river(river: RiverGo, target: Target) -> None:
    """a -> b -> c -> d: River works b and d (queue ``go``), riverboat a and c; riverboat's
    sweep promotes what River's completer finished."""
    ran: list[str] = []
    workers = Workers()

    @workers.register("wf_py")
    def wf_py(job: Job[Any]) -> None:
        ran.append(job.args["name"])

    wf = Workflow("mixed")
    wf.add("a", {"name": "a"}, kind="wf_py")
    # Each side works its own queue: a River client fails jobs of kinds it has no
    # worker for, so a queue is shared only by clients that know all of its kinds.
    go_queue = InsertOpts(queue="go")
    wf.add("b", {"name": "b"}, go_queue, kind="wf_go", deps=["a"])
    wf.add("c", {"name": "c"}, kind="wf_py", deps=["b"])
    wf.add("d", {"name": "d"}, go_queue, kind="wf_go", deps=["c"])
    go = river.worker("--kinds=wf_go", "--queues=go")
    try:
        with helpers.client(target) as inserter:  # no workers: any kind may be inserted
            info = inserter.workflow_insert(wf)
        with helpers.client(
            target, workers, queues={"default": QueueConfig(max_workers=4)}
        ) as client:
            client.start()
            done = client.workflow_wait(wf.id, timeout=60)
            client.stop()
    finally:
        go.stop()
    assert done.state == "completed", [(t.name, t.state) for t in done.tasks]
    assert ran == ["a", "c"]
    by_name = {t.name: t.job for t in done.tasks}
    assert by_name["b"].attempted_by[-1].startswith("go-")
    assert by_name["d"].attempted_by[-1].startswith("go-")
    # River never claimed a task before its dependencies completed.
    assert by_name["b"].attempted_at > by_name["a"].finalized_at  # type: ignore[operator]
    assert by_name["d"].attempted_at > by_name["c"].finalized_at  # type: ignore[operator]
    assert info.task("d").state is JobState.PENDING


def test_a_flow_controlled_queue_shared_with_river_works_every_job_once(
    river: RiverGo, target: Target
) -> None:
    counts: dict[int, int] = {}
    lock = threading.Lock()
    workers = Workers()

    @workers.register("shared")
    def shared(job: Job[Any]) -> None:
        with lock:
            counts[job.id] = counts.get(job.id, 0) + 1

    limited = QueueConfig(max_workers=5, concurrency=ConcurrencyLimit(global_limit=2))
    with helpers.client(target, workers, queues={"default": limited}) as client:
        ids = [
            r.job.id
            for r in client.insert_many(
                [InsertManyParams({"n": n}, kind="shared") for n in range(60)]
            )
        ]
        go = river.worker("--kinds=shared", "--queues=default")
        try:
            client.start()
            wait_until(
                lambda: all(client.job_get(i).finalized_at is not None for i in ids),
                timeout=60,
                what="every job finished",
            )
            rows = [client.job_get(i) for i in ids]
            client.stop()
        finally:
            go.stop()
    assert {r.state for r in rows} == {JobState.COMPLETED}
    assert {r.attempt for r in rows} == {1}  # each job claimed once, by one side
    by_go = [r for r in rows if r.attempted_by[-1].startswith("go-")]
    assert len(by_go) + sum(counts.values()) == 60
    assert all(n == 1 for n in counts.values())
