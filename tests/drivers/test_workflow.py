"""Workflows on each driver: a graph inserted on the driver's own connection and in the
caller's transaction, worked by the driver's runtime (promotion, outputs handed on,
a failed dependency under both policies), then read, waited for, retried and
cancelled through the same driver."""

from __future__ import annotations

from typing import Any

import pytest

from riverboat import (
    InsertOpts,
    Job,
    JobState,
    NotFoundError,
    QueueConfig,
    Workers,
    Workflow,
    dep_outputs,
    record_output,
)
from tests.drivers.harness import Harness


def _workers(h: Harness, ran: list[str]) -> Workers:
    workers = Workers()

    def step(job: Job[Any]) -> None:
        name = job.args["name"]
        ran.append(name)
        if name == "fails":
            raise RuntimeError("conformance failure")
        record_output({"name": name, "saw": sorted(dep_outputs(job))})

    if h.is_async:

        @workers.register("conf_wf_step")
        async def work(job: Job[Any]) -> None:
            step(job)

    else:
        workers.register("conf_wf_step")(step)
    return workers


def _graph(name: str) -> Workflow:
    """a -> {b, fails}; joins waits on b and fails under ``run``; cut waits on fails
    under the default ``cancel``."""
    wf = Workflow(name)
    a = wf.add("a", {"name": "a"}, kind="conf_wf_step")
    b = wf.add("b", {"name": "b"}, kind="conf_wf_step", deps=[a])
    fails = wf.add(
        "fails", {"name": "fails"}, InsertOpts(max_attempts=1), kind="conf_wf_step", deps=[a]
    )
    wf.add("joins", {"name": "joins"}, kind="conf_wf_step", deps=[b, fails], on_dep_failure="run")
    wf.add("cut", {"name": "cut"}, kind="conf_wf_step", deps=[fails])
    return wf


async def test_a_workflow_runs_and_is_administered_through_the_driver(h: Harness) -> None:
    ran: list[str] = []
    client = h.client(
        queues={"default": QueueConfig(max_workers=4)},
        workers=_workers(h, ran),
        fetch_cooldown=0.01,
        fetch_poll_interval=0.1,
    )
    own = await h.call(client.workflow_insert, _graph("own"))
    kind = h.native_kinds[0]
    async with h.native(kind, commit=True) as conn:
        in_tx = await h.call(client.workflow_insert_tx, conn, _graph("in-tx"))
    async with h.native(kind, commit=False) as conn:
        undone = await h.call(client.workflow_insert_tx, conn, _graph("undone"))
    assert [t.state for t in own.tasks] == [JobState.AVAILABLE, *[JobState.PENDING] * 4]

    await h.call(client.run_until_idle)
    assert sorted(ran) == sorted(["a", "b", "fails", "joins"] * 2)
    reader = h.client()
    for info in (own, in_tx):
        done = await h.call(reader.workflow_wait, info.id, timeout=30)
        states = {t.name: t.state for t in done.tasks}
        assert states == {
            "a": JobState.COMPLETED,
            "b": JobState.COMPLETED,
            "fails": JobState.DISCARDED,
            "joins": JobState.COMPLETED,
            "cut": JobState.CANCELLED,
        }
        assert done.state == "failed" and done.task("cut").cancelled_by == "fails"
        joins = await h.call(reader.job_wait, done.task("joins").job.id, timeout=30)
        output = {"name": "joins", "saw": ["b"]}  # the failed dependency recorded none
        assert done.task("joins").output == joins.metadata["output"] == output
    with pytest.raises(NotFoundError):  # rolled back with the caller's transaction
        await h.call(reader.workflow_get, undone.id)
    listed = {w.id: w for w in await h.call(reader.workflow_list, limit=10)}
    assert set(listed) >= {own.id, in_tx.id} and undone.id not in listed
    assert (listed[own.id].tasks, listed[own.id].failed) == (5, 2)

    retried = await h.call(reader.workflow_retry, own.id)
    states = {t.name: t.state for t in retried.tasks}
    assert (states["fails"], states["cut"]) == (JobState.AVAILABLE, JobState.PENDING)
    cancelled = await h.call(reader.workflow_cancel, own.id)
    assert {t.name for t in cancelled.tasks if t.state is JobState.CANCELLED} == {"fails", "cut"}
