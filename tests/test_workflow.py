"""Workflows (riverboat.workflow) and waiting for jobs, on Postgres and SQLite: the
shapes (diamond, fan-out/fan-in, chain), every failure policy, retry and cancel, tasks
added to a running workflow, promotion by the sweep when no completer did it, and
``job_wait`` from another process."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import psycopg
import pytest

import riverboat
from riverboat import (
    InsertOpts,
    InvalidInputError,
    Job,
    JobState,
    NotFoundError,
    QueueConfig,
    WaitTimeoutError,
    Workers,
    Workflow,
    WorkflowInfo,
    dep_outputs,
    record_output,
)
from riverboat.drivers.base import call_timeout
from riverboat.workflow import WORKFLOW_TASKS_MAX, LinkForm, ids_in, workflow_meta
from tests.reliability._support import OutputReader, spawn_worker
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.waiting import wait_until, wait_until_async

if TYPE_CHECKING:
    from riverboat.runtime.workflow_promoter import WorkflowPromoter


class Recorder:
    """A worker for kind ``step`` that records the order tasks ran in, outputs its
    task name and the outputs it was handed, and fails when its args say so."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.lock = threading.Lock()
        self.fail: set[str] = set()
        self.workers = Workers()

        @self.workers.register("step")
        def step(job: Job[Any]) -> None:
            name = job.args["name"]
            with self.lock:
                self.ran.append(name)
            if name in self.fail:
                raise RuntimeError(f"{name} fails")
            handed = dep_outputs(job)
            record_output({"name": name, "saw": sorted(handed)})


def _client(db: Db, rec: Recorder | Workers, **kw: Any) -> riverboat.Client:
    return riverboat.Client(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=4)},
        workers=rec.workers if isinstance(rec, Recorder) else rec,
        fetch_poll_interval=0.1,
        **kw,
    )


def _async_client(
    db: Db, workers: Workers, max_workers: int = 20, **kw: Any
) -> riverboat.AsyncClient:
    """A running-capable async client: ``max_workers`` slots on the default queue, a
    short poll."""
    return riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=max_workers)},
        workers=workers,
        **{"fetch_poll_interval": 0.1, **kw},
    )


@contextlib.asynccontextmanager
async def _running(
    client: riverboat.AsyncClient, gates: Iterable[asyncio.Event] = ()
) -> AsyncIterator[riverboat.AsyncClient]:
    """``client`` started; on the way out, its gated jobs released, then it is stopped
    and closed."""
    await client.start()
    try:
        yield client
    finally:
        for gate in gates:
            gate.set()
        await client.stop()
        await client.close()


def _step(wf: Workflow, name: str, deps: list[str] = [], **kw: Any) -> None:  # noqa: B006
    wf.add(name, {"name": name}, kind="step", deps=deps, **kw)


def _inserted(client: riverboat.Client, wf: Workflow) -> dict[str, int]:
    """Insert ``wf``; its tasks' job ids by name."""
    return {t.name: t.job.id for t in client.workflow_insert(wf).tasks}


def test_diamond_runs_in_dependency_order_and_hands_outputs_on(any_db: Db) -> None:  # noqa: F811
    rec = Recorder()
    wf = Workflow("diamond")
    _step(wf, "a")
    _step(wf, "b", ["a"])
    _step(wf, "c", ["a"])
    _step(wf, "d", ["b", "c"])
    with _client(any_db, rec) as client:
        info = client.workflow_insert(wf)
        assert [t.state for t in info.tasks] == [
            JobState.AVAILABLE,
            JobState.PENDING,
            JobState.PENDING,
            JobState.PENDING,
        ]
        client.start()
        done = client.workflow_wait(wf.id, timeout=30)
        client.stop()
    assert done.state == "completed"
    assert rec.ran[0] == "a" and rec.ran[-1] == "d" and sorted(rec.ran[1:3]) == ["b", "c"]
    assert done.task("d").output == {"name": "d", "saw": ["b", "c"]}
    assert done.task("b").output == {"name": "b", "saw": ["a"]}
    # Go River and River's UI see ordinary jobs: the graph is in one metadata key.
    # A dependency is named by its own row's task name, not again in its dependents'.
    meta = workflow_meta(done.task("d").job)
    assert meta is not None
    assert "deps" not in meta and len(ids_in(meta["dep_ids"]) or []) == 2
    assert meta["name"] == "diamond"
    assert "name" not in done.task("b").job.metadata["riverboat_workflow"]
    # On Postgres a task's links and name are one string (River's GIN index on metadata
    # holds an entry per key and value); SQLite writes the keys.
    stored = done.task("d").job.metadata["riverboat_workflow"]
    postgres = any_db.dialect == "postgres"
    assert ("node" in stored) is postgres and ("task" in stored) is not postgres
    assert done.task("d").deps == ["b", "c"] and done.name == "diamond"


def test_fan_out_fan_in_and_chain(any_db: Db) -> None:  # noqa: F811
    rec = Recorder()
    wf = Workflow("fan")
    _step(wf, "start")
    leaves = [f"leaf{i}" for i in range(40)]
    for leaf in leaves:
        _step(wf, leaf, ["start"])
    _step(wf, "join", leaves)
    previous = "join"
    for i in range(10):
        _step(wf, f"chain{i}", [previous])
        previous = f"chain{i}"
    with _client(any_db, rec) as client:
        client.workflow_insert(wf)
        client.start()
        done = client.workflow_wait(wf.id, timeout=60)
        promoter = client.async_client.runtime.workflow_promoter  # type: ignore[union-attr]
        statements = promoter.statements if promoter is not None else -1
        client.stop()
    assert done.state == "completed"
    assert rec.ran.index("join") > max(rec.ran.index(leaf) for leaf in leaves)
    assert rec.ran[-10:] == [f"chain{i}" for i in range(10)]
    assert done.task("join").output["saw"] == sorted(leaves)
    # Promotion is by batch, not by row: at most one statement per finalized task, plus
    # the sweeps (each at least one statement) that ran meanwhile.
    assert 0 < statements <= len(done.tasks) + 2 * 30


def test_promotion_keeps_metadata_when_no_dependency_recorded_output(any_db: Db) -> None:  # noqa: F811
    # A promotion with nothing to hand on leaves the row's metadata as inserted: no
    # rewrite, and no empty ``dep_outputs`` key for River's metadata GIN index to carry
    # through the task's later writes.
    workers = Workers()

    @workers.register("quiet")
    def quiet(job: Job[Any]) -> None:
        pass

    wf = Workflow("quiet")
    wf.add("a", {}, kind="quiet")
    wf.add("b", {}, kind="quiet", deps=["a"])
    with _client(any_db, workers) as client:
        inserted = client.workflow_insert(wf).task("b").job.metadata
        client.start()
        done = client.workflow_wait(wf.id, timeout=30)
        client.stop()
    assert done.state == "completed"
    assert done.task("b").job.metadata == inserted
    assert "dep_outputs" not in inserted["riverboat_workflow"]
    assert dep_outputs(done.task("b").job) == {}


def test_the_insert_links_tasks_by_id_as_it_writes_them(any_db: Db) -> None:  # noqa: F811
    """On Postgres the tasks get their ids from River's sequence before the insert, so
    every row is written once, already naming its dependencies and dependents (no link
    statement after it); SQLite links after its insert. Either way the stored metadata,
    and the WorkflowInfo returned without a read-back, say the same."""
    wf = Workflow("links", on_dep_failure="run")
    _step(wf, "a")
    _step(wf, "b", ["a"])
    _step(wf, "c", ["a"], on_dep_failure="cancel")
    _step(wf, "d", ["b", "c"])
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        stats = client.driver.stats
        before = dict(stats.by_query)
        info = client.workflow_insert(wf)
        ran = {k: v - before.get(k, 0) for k, v in stats.by_query.items() if v != before.get(k)}
        stored = client.workflow_get(wf.id)
        # Added later: only the earlier task learns its new dependent.
        more = Workflow(id=wf.id)
        _step(more, "e", ["d", "a"])
        added = client.workflow_insert(more)
    ids = {t.name: t.job.id for t in info.tasks}
    assert ids["a"] < ids["b"] < ids["c"] < ids["d"]  # in the order added
    # The returned workflow is built from the Workflow, the stored one read back.
    assert (info.id, info.name) == (stored.id, stored.name) == (wf.id, "links")

    def described(got: WorkflowInfo) -> list[tuple[Any, ...]]:
        return [
            (t.name, t.job.id, t.job.state, t.deps, t.on_dep_failure, t.cancelled_by)
            for t in got.tasks
        ]

    assert described(info) == described(stored)
    assert [t.on_dep_failure for t in info.tasks] == ["run", "run", "cancel", "run"]
    postgres = any_db.url.startswith("postgres")
    assert ("workflow_link" in ran) is not postgres
    assert ("workflow_reserve_ids" in ran) is postgres

    def metas(got: WorkflowInfo) -> dict[str, dict[str, Any]]:
        return {t.name: workflow_meta(t.job) or {} for t in got.tasks}

    for got in (info, stored):
        meta = metas(got)
        assert ids_in(meta["a"].get("dep_ids", [])) == []
        assert ids_in(meta["d"].get("dependent_ids", [])) == []
        assert ids_in(meta["a"]["dependent_ids"]) == [ids["b"], ids["c"]]
        assert ids_in(meta["d"]["dep_ids"]) == [ids["b"], ids["c"]]
        # One string on Postgres (one entry in River's GIN index, not one per id).
        assert isinstance(meta["d"]["dep_ids"], str) is postgres
        assert [t.deps for t in got.tasks] == [[], ["a"], ["a"], ["b", "c"]]
    meta = metas(added)
    assert ids_in(meta["e"]["dep_ids"]) == [ids["d"], ids["a"]]
    assert ids_in(meta["a"]["dependent_ids"]) == [ids["b"], ids["c"], added.task("e").job.id]
    assert ids_in(meta["d"]["dependent_ids"]) == [added.task("e").job.id]
    assert isinstance(meta["a"]["dependent_ids"], str) is postgres
    # A task inserted earlier keeps its one string (and its name) as it learns more.
    a_stored = added.task("a").job.metadata["riverboat_workflow"]
    if postgres:
        assert a_stored["node"] == f";{ids['b']},{ids['c']},{added.task('e').job.id};a"


def test_failed_dependency_cancels_dependents_then_retry_continues(any_db: Db) -> None:  # noqa: F811
    rec = Recorder()
    rec.fail.add("b")
    wf = Workflow("fails")
    _step(wf, "a")
    _step(wf, "b", ["a"], opts=InsertOpts(max_attempts=1))
    _step(wf, "c", ["b"])
    _step(wf, "d", ["c"])
    _step(wf, "e", ["a"])
    with _client(any_db, rec) as client:
        client.workflow_insert(wf)
        client.start()
        first = client.workflow_wait(wf.id, timeout=30)
        assert first.state == "failed"
        assert first.task("b").state is JobState.DISCARDED
        assert first.task("c").state is JobState.CANCELLED
        assert first.task("c").cancelled_by == "b"
        assert first.task("d").state is JobState.CANCELLED  # the cascade
        assert first.task("e").state is JobState.COMPLETED  # not downstream of b
        rec.fail.clear()
        retried = client.workflow_retry(wf.id)
        # The running client may have picked b up (and promoted c) already.
        assert retried.task("b").state is not JobState.DISCARDED
        assert retried.task("c").state is not JobState.CANCELLED
        assert retried.task("c").cancelled_by is None
        second = client.workflow_wait(wf.id, timeout=30)
        client.stop()
    assert second.state == "completed"
    assert rec.ran.count("b") == 2 and rec.ran.count("d") == 1


def test_run_policy_runs_dependents_after_a_failure(any_db: Db) -> None:  # noqa: F811
    rec = Recorder()
    rec.fail.add("a")
    wf = Workflow("lenient", on_dep_failure="run")
    _step(wf, "a", opts=InsertOpts(max_attempts=1))
    _step(wf, "b")
    _step(wf, "cleanup", ["a", "b"])
    _step(wf, "strict", ["a"], on_dep_failure="cancel")
    with _client(any_db, rec) as client:
        client.workflow_insert(wf)
        client.start()
        done = client.workflow_wait(wf.id, timeout=30)
        client.stop()
    assert done.task("a").state is JobState.DISCARDED
    assert done.task("cleanup").state is JobState.COMPLETED
    assert done.task("cleanup").output == {"name": "cleanup", "saw": ["b"]}
    assert done.task("strict").state is JobState.CANCELLED


def test_tasks_stored_in_the_earlier_form_still_run(any_db: Db) -> None:  # noqa: F811
    """Tasks written by earlier builds name their dependencies, the workflow and the
    policy on every task, and list ids as arrays (on Postgres too); promotion, both
    policies, listing, a retry and a task added to the workflow still read them."""
    rec = Recorder()
    rec.fail.add("a")
    wf = Workflow("legacy")
    _step(wf, "a", opts=InsertOpts(max_attempts=1))
    _step(wf, "b")
    _step(wf, "cleanup", ["a", "b"], on_dep_failure="run")
    _step(wf, "strict", ["a"])
    with _client(any_db, rec) as client:
        info = client.workflow_insert(wf)
        ids = {t.name: t.job.id for t in info.tasks}
        dependents = {"a": ["cleanup", "strict"], "b": ["cleanup"]}
        for task in info.tasks:
            earlier = {
                "id": wf.id,
                "name": "legacy",
                "task": task.name,
                "deps": task.deps,
                "dep_ids": [ids[d] for d in task.deps],
                "dependent_ids": [ids[d] for d in dependents.get(task.name, [])],
                "on_dep_failure": "run" if task.name == "cleanup" else "cancel",
            }
            cast = "%s::jsonb" if any_db.dialect == "postgres" else "jsonb(%s)"
            any_db.execute(
                f"UPDATE river_job SET metadata = {cast} WHERE id = %s",
                json.dumps({"riverboat_workflow": earlier}),
                task.job.id,
            )
        client.start()
        done = client.workflow_wait(wf.id, timeout=30)
        client.stop()
    assert done.name == "legacy"
    assert [t.deps for t in done.tasks] == [[], [], ["a", "b"], ["a"]]
    assert done.task("cleanup").state is JobState.COMPLETED
    assert done.task("cleanup").on_dep_failure == "run"
    assert done.task("strict").state is JobState.CANCELLED
    assert done.task("strict").cancelled_by == "a"
    with _client(any_db, rec) as client:
        retried = client.workflow_retry(wf.id)
        assert retried.task("strict").state is JobState.PENDING  # "a" is to run again
        more = Workflow(id=wf.id)
        _step(more, "late", ["b"])
        late = client.workflow_insert(more).task("late")
        stored_b = client.job_get(ids["b"]).metadata["riverboat_workflow"]
    assert late.state is JobState.AVAILABLE  # "b" completed already
    assert ids_in(stored_b["dependent_ids"]) == [ids["cleanup"], late.job.id]
    # Written anew, in this release's form.
    assert isinstance(stored_b["dependent_ids"], str) is (any_db.dialect == "postgres")


def test_each_link_form_is_written_only_once_the_schema_says_every_process_reads_it(
    pg_url: str, pg_schema: str
) -> None:
    """Releases before riverboat's line version 7 read a task's id lists only as JSON
    arrays, and those before version 8 only as separate keys: below 7 (such a release
    may share the schema, in a rolling upgrade) this one writes arrays, also when it
    adds tasks to a workflow; at 7, one string of ids each; from 8, each task's links
    and name as one node. Migrating down to 7 turns every node back into the keys, and
    down to 6 every string back into the array of the same ids, so each earlier release
    reads them all."""
    from riverboat.drivers.psycopg import PsycopgDriver
    from riverboat.migrations import Migrator
    from riverboat.workflow import WORKFLOW_IDS_TEXT_LINE_VERSION, WORKFLOW_NODE_LINE_VERSION

    def stored(client: riverboat.Client, workflow_id: str) -> dict[str, dict[str, Any]]:
        tasks = client.workflow_get(workflow_id).tasks
        return {t.name: t.job.metadata["riverboat_workflow"] for t in tasks}

    def fan(name: str) -> Workflow:
        wf = Workflow(name)
        _step(wf, "a")
        _step(wf, "b", ["a"])
        _step(wf, "c;x", ["a", "b"])
        return wf

    def keys_hold(workflow_id: str, kind: type) -> None:
        for m in stored(client, workflow_id).values():
            assert "node" not in m and "task" in m, m
            for key in ("dep_ids", "dependent_ids"):
                assert isinstance(m.get(key, kind()), kind), (workflow_id, m)

    driver = PsycopgDriver(pg_url, schema=pg_schema)
    line = Migrator(driver, "riverboat")
    try:
        line.down(WORKFLOW_IDS_TEXT_LINE_VERSION - 1)
        db = Db("postgres", pg_url, pg_schema)
        with _client(db, Recorder()) as client:
            arrays = client.workflow_insert(fan("arrays")).id
            more = Workflow(id=arrays)
            _step(more, "d", ["c;x"])
            client.workflow_insert(more)
            keys_hold(arrays, list)
            meta = stored(client, arrays)
            assert meta["c;x"]["dependent_ids"] == [client.workflow_get(arrays).task("d").job.id]
        line.up(WORKFLOW_IDS_TEXT_LINE_VERSION)
        with _client(db, Recorder()) as client:
            text = client.workflow_insert(fan("text")).id
            keys_hold(text, str)
            more = Workflow(id=arrays)
            _step(more, "e", ["a"])
            client.workflow_insert(more)
            # The array it had is read, and written anew as a string.
            a = stored(client, arrays)["a"]
            assert (
                isinstance(a["dependent_ids"], str) and len(ids_in(a["dependent_ids"]) or []) == 3
            )
        line.up(WORKFLOW_NODE_LINE_VERSION)
        with _client(db, Recorder()) as client:
            node = client.workflow_insert(fan("node")).id
            nodes = stored(client, node)
            assert all(set(m) <= {"id", "node", "name"} for m in nodes.values()), nodes
            assert nodes["c;x"]["node"].endswith(";;c;x")
            more = Workflow(id=text)
            _step(more, "f", ["b"])
            client.workflow_insert(more)
            # A task written with the keys keeps them as it learns its new dependent.
            b = stored(client, text)["b"]
            assert "node" not in b and len(ids_in(b["dependent_ids"]) or []) == 2
            client.start()
            done = [client.workflow_wait(w, timeout=30) for w in (arrays, text, node)]
            client.stop()
        assert [w.state for w in done] == ["completed"] * 3
        assert done[2].task("c;x").deps == ["a", "b"]
        line.down(WORKFLOW_IDS_TEXT_LINE_VERSION)
        with _client(db, Recorder()) as client:
            for workflow_id in (text, node):
                keys_hold(workflow_id, str)
            assert stored(client, node)["c;x"]["task"] == "c;x"
        line.down(WORKFLOW_IDS_TEXT_LINE_VERSION - 1)
        with _client(db, Recorder()) as client:
            for workflow_id in (arrays, text, node):
                keys_hold(workflow_id, list)
            # What the earlier releases read, after the round trip: the same graph.
            assert client.workflow_get(node).task("c;x").deps == ["a", "b"]
    finally:
        line.up()
        driver.close()


@pytest.mark.parametrize(
    "text",
    [
        "1",
        "1,2",
        "123456789012345678",
        "1234567890123456789",
        "1,1234567890123456789,2",
        ",1",
        "1,",
        "1,,2",
        ",",
        "x",
        "1 ,2",
        "-1",
        "1\n",
        "\n1",
        "1\n,2",
        "\u0661",  # an Arabic-Indic digit: not an id
    ],
)
def test_the_statements_read_a_stored_id_list_as_ids_in_does(pg_url: str, text: str) -> None:
    """The promotion statement tells a stored list of ids from anything else with
    NOT_ID_LIST_TEXT (faster in Postgres than matching ID_LIST_TEXT whole); both rules
    and ids_in must agree, or the sweep would name a task the statement never decides
    (an empty list is told apart before either rule is used)."""
    from riverboat.workflow import ID_LIST_TEXT, NOT_ID_LIST_TEXT

    with psycopg.connect(pg_url) as conn:
        whole, not_list = conn.execute(
            "SELECT %s::text ~ %s, %s::text !~ %s",
            [text, f"^{ID_LIST_TEXT}$", text, NOT_ID_LIST_TEXT],
        ).fetchone() or (None, None)
    assert whole == not_list == (ids_in(text) is not None)


def test_an_id_list_written_by_hand_does_not_stop_the_others(any_db: Db) -> None:  # noqa: F811
    """On Postgres, a task whose stored dependency ids are not a list of ids (metadata
    written by hand, a number past bigint) is never decided, and the statements that
    look at it still decide the tasks beside it: the completer's (a failed cast failed
    it whole, at every completion) and the sweep's (which bound the number past bigint
    and failed its batch, every task after it never swept)."""
    if any_db.dialect != "postgres":
        pytest.skip("SQLite compares ids without a cast: an id no row has is a missing row")
    rec = Recorder()
    wf = Workflow("hand-written")
    _step(wf, "root")
    for leaf in ("good", "letters", "huge", "spaced", "nulled", "node_letters", "node_huge"):
        _step(wf, leaf, ["root"])
    _step(wf, "node_number", ["root"])
    later = Workflow("swept")
    _step(later, "first")
    _step(later, "after", ["first"])
    with _client(any_db, rec) as client:
        ids = _inserted(client, wf)
        swept = _inserted(client, later)
        # In the keys of earlier releases, and in this one's node.
        bad: dict[str, object] = {
            "letters": "x1",
            "huge": "9" * 25,
            "spaced": f" {ids['root']}",
            "nulled": [None],  # the earlier array form: a null is not a finished dependency
            "node_letters": "x1;;node_letters",
            "node_huge": "9" * 25 + ";;node_huge",
            "node_number": ids["root"],  # a node that is not a string
        }
        for name, value in bad.items():
            part = (
                {"id": wf.id, "node": value}
                if name.startswith("node_")
                else {"id": wf.id, "task": name, "dep_ids": value}
            )
            any_db.execute(
                "UPDATE river_job SET metadata = jsonb_set(metadata,"
                " '{riverboat_workflow}', %s::jsonb) WHERE id = %s",
                json.dumps(part),
                ids[name],
            )
        # Finished behind the promoter's back: only the sweep can promote "after".
        _finish(any_db, [swept["first"]])
        client.start()
        good = client.job_wait(ids["good"], timeout=30)
        after = client.job_wait(swept["after"], timeout=30)
        client.stop()
        left = {name: client.job_get(ids[name]).state for name in bad}
    assert good.state is JobState.COMPLETED and after.state is JobState.COMPLETED
    assert left == dict.fromkeys(bad, JobState.PENDING)


def _refuse_changes_to(db: Db, job_id: int) -> None:
    """From now on the database refuses every change of row ``job_id`` but its discard,
    for its data, as Postgres refuses a fan-in whose dependencies' outputs together pass
    the 256 MB one jsonb value holds (``program_limit_exceeded``)."""
    if db.dialect == "postgres":
        db.execute(
            "CREATE FUNCTION refuse_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " RAISE EXCEPTION 'total size of jsonb object elements exceeds the maximum'"
            " USING ERRCODE = '54000'; END $$"
        )
        db.execute(
            "CREATE TRIGGER refuse_row BEFORE UPDATE ON river_job FOR EACH ROW"
            f" WHEN (NEW.id = {job_id} AND NEW.state <> 'discarded')"
            " EXECUTE FUNCTION refuse_row()"
        )
    else:
        db.execute(
            "CREATE TRIGGER refuse_row BEFORE UPDATE ON river_job FOR EACH ROW"
            f" WHEN NEW.id = {job_id} AND NEW.state <> 'discarded'"
            " BEGIN SELECT RAISE(ABORT, 'string or blob too big'); END"
        )


def test_a_task_whose_promotion_is_refused_is_discarded_alone(any_db: Db) -> None:  # noqa: F811
    """A task whose promotion the database refuses for its data failed every statement
    that named it: the completer's promotions and every sweep, whose batches name the
    decidable tasks of every workflow, so no task anywhere was promoted by a sweep again
    (here both workflows can only be moved by the sweep: their first tasks were finished
    behind the promoter's back). Now its statement's tasks are decided apart and it is
    discarded with the error: the tasks beside it run, its dependent is cancelled (the
    default policy), and the other workflow goes on."""
    rec = Recorder()
    wf = Workflow("refused")
    _step(wf, "root")
    _step(wf, "poison", ["root"])
    _step(wf, "beside", ["root"])
    _step(wf, "after", ["poison"])
    other = Workflow("other")
    _step(other, "first")
    _step(other, "then", ["first"])
    with _client(any_db, rec) as client:
        ids = _inserted(client, wf)
        others = _inserted(client, other)
        _refuse_changes_to(any_db, ids["poison"])
        _finish(any_db, [ids["root"], others["first"]])
        client.start()
        done = client.workflow_wait(wf.id, timeout=30)
        then = client.job_wait(others["then"], timeout=30)
        client.stop()
    states = {task.name: task.job.state for task in done.tasks}
    assert states == {
        "root": JobState.COMPLETED,
        "poison": JobState.DISCARDED,
        "beside": JobState.COMPLETED,
        "after": JobState.CANCELLED,
    }
    (error,) = done.task("poison").job.errors
    said = "exceeds the maximum" if any_db.dialect == "postgres" else "too big"
    assert "refused its promotion" in error.error and said in error.error
    assert error.attempt == 0
    assert then.state is JobState.COMPLETED and sorted(rec.ran) == ["beside", "then"]


def test_a_dependency_whose_row_is_gone_is_named_by_its_job_id(any_db: Db) -> None:  # noqa: F811
    """Dependencies are named from their own rows; once the cleaner deleted one (only a
    finished task can be), the listing names it by job id. The workflow's name is also on
    the task nothing depends on, the last to finish, so it outlives the root."""
    wf = Workflow("pruned")
    _step(wf, "a")
    _step(wf, "b", ["a"])
    with _client(any_db, Recorder()) as client:
        info = client.workflow_insert(wf)
        a_id = info.task("a").job.id
        any_db.execute("DELETE FROM river_job WHERE id = %s", a_id)
        stored = client.workflow_get(wf.id)
    assert [(t.name, t.deps) for t in stored.tasks] == [("b", [str(a_id)])]
    assert stored.name == "pruned"


def test_deleting_an_unfinished_task_cancels_what_waits_on_it(any_db: Db) -> None:  # noqa: F811
    """A dependency whose row is gone counts as completed (the cleaner deletes finished
    ones), so deleting a task that never ran made its dependents run as if it had. Now
    job_delete and job_delete_many cancel its pending dependents under the ``cancel``
    policy, in their own transaction (``cancelled_by`` it), and those under ``run`` run;
    the cancellation cascades as for any failed dependency."""
    rec = Recorder()

    def shape(name: str) -> Workflow:
        wf = Workflow(name)
        _step(wf, "a")
        _step(wf, "b", ["a"])  # cancel (the default)
        _step(wf, "c", ["a"], on_dep_failure="run")
        _step(wf, "d", ["b"])  # cancelled in turn
        return wf

    with _client(any_db, rec) as client:
        by_one, by_many, undone = (client.workflow_insert(shape(n)) for n in ("one", "many", "tx"))
        client.job_delete(by_one.task("a").job.id)
        deleted = client.job_delete_many(ids=[by_many.task("a").job.id, by_many.task("b").job.id])
        assert [job.id for job in deleted] == [by_many.task(t).job.id for t in ("a", "b")]
        # Inside the caller's transaction, undone with it.
        with any_db.connect() as conn:
            client.job_delete_tx(conn, undone.task("a").job.id)
            conn.rollback()
        for info in (by_one, by_many):
            now = {t.name: t for t in client.workflow_get(info.id).tasks}
            # "run": decided at once (its deleted dependency counts as completed).
            assert now["c"].state == JobState.AVAILABLE
            if "b" in now:  # deleted along with a by job_delete_many
                assert now["b"].state == JobState.CANCELLED and now["b"].cancelled_by == "a"
            # Down the cascade in the same call (d waited for the sweep: for ever, with
            # no client working the queues).
            assert now["d"].state == JobState.CANCELLED and now["d"].cancelled_by == "b"
        assert [t.state for t in client.workflow_get(undone.id).tasks] == [
            JobState.AVAILABLE,
            *[JobState.PENDING] * 3,
        ]
        client.start()
        for info in (by_one, by_many):
            done = client.workflow_wait(info.id, timeout=30)
            states = {t.name: t.state for t in done.tasks}
            assert states["c"] == JobState.COMPLETED and states["d"] == JobState.CANCELLED
        assert client.workflow_wait(undone.id, timeout=30).state == "completed"
        client.stop()
    assert sorted(rec.ran) == ["a", "b", "c", "c", "c", "d"]  # all of "tx", "c" of the others


def test_retrying_one_task_waits_for_its_dependencies(any_db: Db) -> None:  # noqa: F811
    """job_retry (and job_retry_many) of a workflow task with dependencies puts it back
    to pending and has it decided at once: it runs only if they completed, and one
    cancelled because a dependency failed is cancelled again. It was made available and
    ran, its failed dependency's output missing (workflow_retry is what retries both).
    The call returns the task as decided: it returned the ``pending`` it wrote first,
    and ``riverboat jobs retry`` printed that while the table said cancelled."""
    rec = Recorder()
    rec.fail.add("a")
    wf = Workflow("one")
    _step(wf, "a", opts=InsertOpts(max_attempts=1))
    _step(wf, "b", ["a"])
    _step(wf, "c")
    _step(wf, "d", ["c"])
    with _client(any_db, rec) as client:
        ids = _inserted(client, wf)
        client.start()
        client.workflow_wait(wf.id, timeout=30)
        client.stop()
        again = client.job_retry(ids["b"])
        assert (again.state, again.metadata["riverboat_workflow"]["cancelled_by"]) == (
            JobState.CANCELLED,
            "a",
        )
        assert again.finalized_at is not None
        many = client.job_retry_many(ids=[ids["b"]])
        assert [j.state for j in many.jobs] == [JobState.CANCELLED]
        with any_db.connect() as conn:  # in the caller's transaction, undone with it
            assert client.job_retry_tx(conn, ids["d"]).state == JobState.AVAILABLE
            conn.rollback()
        assert client.workflow_get(wf.id).task("d").state == JobState.COMPLETED  # rolled back
        b = client.workflow_get(wf.id).task("b")
        assert (b.state, b.cancelled_by) == (JobState.CANCELLED, "a")  # decided again
        assert client.job_retry(ids["d"]).state == JobState.AVAILABLE  # c completed
        assert client.workflow_get(wf.id).task("d").state == JobState.AVAILABLE
        client.start()
        done = client.workflow_wait(wf.id, timeout=30)
        client.stop()
    assert done.task("d").state == JobState.COMPLETED
    assert sorted(rec.ran) == ["a", "c", "d", "d"]  # b never ran; d ran again


def test_job_ids_past_18_digits_are_refused_before_a_workflow_is_written(
    any_db: Db,  # noqa: F811
) -> None:
    """A job id sequence set near 10**18 (still far inside bigint): the workflow was
    inserted, and every task after the first id of 19 digits stayed pending for ever,
    as its links hold 18 digits. The insert is refused, nothing written."""
    if any_db.dialect == "postgres":
        any_db.execute("SELECT setval('river_job_id_seq', 999999999999999998)")
    else:
        any_db.execute(
            "INSERT INTO river_job (id, kind, args, queue, state, priority, max_attempts)"
            " VALUES (999999999999999998, 'seed', '{}', 'default', 'available', 1, 1)"
        )
    wf = Workflow("big")
    for i in range(3):
        _step(wf, f"s{i}", [f"s{i - 1}"] if i else [])
    with _client(any_db, Recorder()) as client:
        with pytest.raises(riverboat.NotSupportedError, match="past 999999999999999999"):
            client.workflow_insert(wf)
        assert client.workflow_list() == []
        assert [j.kind for j in client.job_list(limit=10).jobs if j.kind != "seed"] == []


@pytest.mark.parametrize("order", ["dependent-first", "dependency-first"])
def test_retrying_ids_retries_a_recancelled_dependent_again(
    any_db: Db,  # noqa: F811
    order: str,
) -> None:
    """``riverboat jobs retry B A`` (the dashboard's "Retry selected" posts the list's
    order, newest first) with B cancelled because A failed: B was retried first and
    cancelled again by A, still discarded, and the workflow stayed failed. A task a
    retry cancels again is retried again once the others were (ids are not dependency
    order: tasks added to a running workflow may be depended on by older ones' new
    dependents), and B waits for A's new attempt."""
    rec = Recorder()
    rec.fail.add("a")
    wf = Workflow("order")
    _step(wf, "a", opts=InsertOpts(max_attempts=1))
    _step(wf, "b", ["a"])
    with _client(any_db, rec) as client:
        ids = _inserted(client, wf)
        client.start()
        client.workflow_wait(wf.id, timeout=30)
        client.stop()
    names = ["b", "a"] if order == "dependent-first" else ["a", "b"]
    out = any_db.cli("jobs", "retry", *(str(ids[name]) for name in names))
    assert out.returncode == 0, out.stderr
    with _client(any_db, rec) as client:
        got = client.workflow_get(wf.id)
    assert (got.task("a").state, got.task("b").state) == (JobState.AVAILABLE, JobState.PENDING)


def test_a_bulk_retry_returns_what_the_cascade_decided(any_db: Db) -> None:  # noqa: F811
    """Retrying b and c of a chain a -> b -> c whose a was cancelled: b is cancelled
    again (its dependency failed), and so, in the same call's cascade, is c. The call
    returned c as the ``pending`` the retry wrote: only the first decision's rows were
    read again."""
    wf = Workflow("chain")
    _step(wf, "a")
    _step(wf, "b", ["a"])
    _step(wf, "c", ["b"])
    with _client(any_db, Recorder()) as client:
        ids = _inserted(client, wf)
        client.job_cancel(ids["a"])
        retried = client.job_retry_many(ids=[ids["b"], ids["c"]])
        stored = {t.name: t.state for t in client.workflow_get(wf.id).tasks}
    assert {job.id: job.state for job in retried.jobs} == {
        ids["b"]: JobState.CANCELLED,
        ids["c"]: JobState.CANCELLED,
    }
    assert stored == dict.fromkeys("abc", JobState.CANCELLED)


def test_a_retry_whose_follow_up_fails_is_still_a_retry(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The retry is written before its task is decided: a failing decision (a lost
    connection) is logged for the sweep to make up, not raised from job_retry."""
    from riverboat._sql import Query, Statement

    wf = Workflow("follow")
    _step(wf, "a")
    _step(wf, "b", ["a"])
    with riverboat.Client(sqlite_url) as client:
        info = client.workflow_insert(wf)
        client.job_cancel(info.task("b").job.id)
        broken = Statement(Query("workflow_promote", "SELECT * FROM no_such_table"), {})
        monkeypatch.setattr(type(client.driver.dialect), "workflow_promote", lambda *a, **k: broken)
        assert client.job_retry(info.task("b").job.id).state == JobState.PENDING
    assert any("follow-up workflow_promote failed" in r.getMessage() for r in caplog.records)


def test_cancelling_a_task_decides_its_dependents_at_once(any_db: Db) -> None:  # noqa: F811
    """job_cancel (and job_cancel_many) of a task that is not running cancels its
    pending dependents and theirs in the same call, as a completer's cancellation does,
    with no runtime up: they waited for a sweep (every 2 s, and only where a client with
    queues runs)."""

    def chain(name: str) -> Workflow:
        wf = Workflow(name)
        _step(wf, "a")
        _step(wf, "b", ["a"])
        _step(wf, "c", ["b"])
        _step(wf, "d", ["b"], on_dep_failure="run")
        return wf

    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        one, many = client.workflow_insert(chain("one")), client.workflow_insert(chain("many"))
        client.job_cancel(one.task("a").job.id)
        client.job_cancel_many(ids=[many.task("b").job.id])
        after_one = {t.name: (t.state, t.cancelled_by) for t in client.workflow_get(one.id).tasks}
        assert after_one == {
            "a": (JobState.CANCELLED, None),
            "b": (JobState.CANCELLED, "a"),
            "c": (JobState.CANCELLED, "b"),
            "d": (JobState.AVAILABLE, None),  # "run": every dependency finalized
        }
        after_many = {t.name: t.state for t in client.workflow_get(many.id).tasks}
        assert after_many == {
            "a": JobState.AVAILABLE,
            "b": JobState.CANCELLED,
            "c": JobState.CANCELLED,
            "d": JobState.AVAILABLE,
        }


def test_cancel_a_workflow_and_add_tasks_to_a_running_one(any_db: Db) -> None:  # noqa: F811
    rec = Recorder()
    wf = Workflow("grow")
    _step(wf, "a")
    _step(wf, "b", ["a"])
    with _client(any_db, rec) as client:
        client.workflow_insert(wf)
        client.start()
        client.workflow_wait(wf.id, timeout=30)
        # Added later, depending on a task that completed already: promoted at insert.
        more = Workflow(id=wf.id)
        _step(more, "c", ["b"])
        _step(more, "d", ["c", "a"])
        added = client.workflow_insert(more)
        assert added.task("c").state in (JobState.AVAILABLE, JobState.RUNNING, JobState.COMPLETED)
        done = client.workflow_wait(wf.id, timeout=30)
        assert done.state == "completed" and rec.ran[-2:] == ["c", "d"]
        client.stop()

        other = Workflow("never")
        _step(other, "x")
        _step(other, "y", ["x"])
        client.workflow_insert(other)
        cancelled = client.workflow_cancel(other.id)
        assert {t.state for t in cancelled.tasks} == {JobState.CANCELLED}
        assert cancelled.state == "failed"
        # Retrying a cancelled workflow starts it again from its roots.
        again = client.workflow_retry(other.id)
        assert [t.state for t in again.tasks] == [JobState.AVAILABLE, JobState.PENDING]


def test_the_sweep_promotes_tasks_finished_outside_riverboat(any_db: Db) -> None:  # noqa: F811
    """A task finished by someone else (a Go River worker, a client that died before
    promoting): nobody's completer promotes its dependents; the sweep does."""
    rec = Recorder()
    wf = Workflow("outside")
    _step(wf, "a")
    _step(wf, "b", ["a"])
    with _client(any_db, rec) as client:
        info = client.workflow_insert(wf)
        a_id = info.task("a").job.id
        now = "now()" if any_db.dialect == "postgres" else "datetime('now', 'subsec')"
        any_db.execute(
            f"UPDATE river_job SET state = 'completed', finalized_at = {now} WHERE id = %s",
            a_id,
        )
        client.start()
        done = client.workflow_wait(wf.id, timeout=30)
        client.stop()
    assert done.state == "completed" and rec.ran == ["b"]


def _finish(db: Db, job_ids: list[int], state: str = "completed") -> None:
    """Finalize tasks the way a completer does, behind the promoter's back."""
    now = "now()" if db.dialect == "postgres" else "datetime('now', 'subsec')"
    for job_id in job_ids:
        db.execute(
            f"UPDATE river_job SET state = '{state}', finalized_at = {now} WHERE id = %s", job_id
        )


def test_promotion_costs_one_statement_per_completer_batch(any_db: Db) -> None:  # noqa: F811
    """Counting, not timing: the dependents of a batch of finalized tasks are decided in
    one statement, however wide the fan-in that waits on them; a join is neither
    promoted nor cancelled before it may be, and a failed dependency cancels it at once
    (a second statement: the cascade looking for the cancelled join's dependents), so
    promotion costs at most one statement per completed task, and far less in batches."""
    from riverboat.runtime.workflow_promoter import WorkflowPromoter

    leaves = [f"leaf{i}" for i in range(60)]
    wf = Workflow("count")
    _step(wf, "root")
    for leaf in leaves:
        _step(wf, leaf, ["root"])
    _step(wf, "join", leaves)
    _step(wf, "lenient", leaves, on_dep_failure="run")

    async def scenario() -> None:
        client = riverboat.AsyncClient(any_db.url, schema=any_db.schema)
        try:
            info = await client.workflow_insert(wf)
            ids = {task.name: task.job.id for task in info.tasks}
            promoter = WorkflowPromoter(client.driver, lambda queues: None)
            stats = client.driver.stats

            async def finalized(names: list[str], state: str = "completed") -> int:
                _finish(any_db, [ids[n] for n in names], state)
                before = stats.statements
                await promoter.after_finalized([ids[n] for n in names])
                return int(stats.statements - before)

            async def state_of(name: str) -> JobState:
                return (await client.job_get(ids[name])).state

            # On SQLite each promotion statement carries its outbox insert (River's insert
            # notification), run in the same transaction.
            per = 2 if any_db.dialect == "sqlite" else 1
            outbox = "SELECT count(*) FROM river_notification WHERE topic = 'river_insert'"
            before = any_db.execute(outbox)[0][0] if per == 2 else 0
            assert await finalized(["root"]) == per
            if per == 2:  # the leaves' queue was told, for workers in other processes
                assert any_db.execute(outbox)[0][0] == before + 1
            assert {await state_of(leaf) for leaf in leaves} == {JobState.AVAILABLE}
            for start in range(0, 40, 10):  # batches of 10, the joins still blocked
                assert await finalized(leaves[start : start + 10]) == per
                assert await state_of("join") is JobState.PENDING
            # A failed dependency: the join is cancelled now, the lenient one waits.
            assert await finalized(["leaf40"], "discarded") == 2 * per
            assert await state_of("join") is JobState.CANCELLED
            assert await state_of("lenient") is JobState.PENDING
            assert await finalized(leaves[41:59]) == per
            assert await state_of("lenient") is JobState.PENDING
            assert await finalized(leaves[59:]) == per
            assert await state_of("lenient") is JobState.AVAILABLE
            # 63 tasks finalized (62 by "workers", the join by the cascade): 9 statements.
            assert promoter.statements == 9
        finally:
            await client.close()

    asyncio.run(scenario())


def test_a_fan_ins_leaves_are_written_together_and_a_chain_at_once(any_db: Db) -> None:  # noqa: F811
    """A finalized task's outcome is written at once (and its dependents promoted) when
    a dependent may be waiting on it alone: a chain step beside a fan-in's running
    leaves is not held back. A fan-in's leaf whose join also waits on other leaves
    running in this client waits for the completer's batch instead, and the last one
    is written at once: one write for the leaves, not one each. The flush delay is
    made longer than the test may take, so an outcome held back wrongly never lands."""
    leaves = [f"leaf{i}" for i in range(12)]
    gates = {leaf: asyncio.Event() for leaf in leaves}
    finished = {leaf: asyncio.Event() for leaf in leaves}
    workers = Workers()

    @workers.register("gated")
    async def gated(job: Job[Any]) -> None:
        await gates[job.args["name"]].wait()
        finished[job.args["name"]].set()

    @workers.register("step")
    async def step(job: Job[Any]) -> None:
        return None

    wf = Workflow("batched")
    _step(wf, "root")
    for leaf in leaves:
        wf.add(leaf, {"name": leaf}, kind="gated", deps=["root"])
    _step(wf, "join", leaves)
    _step(wf, "chain1")
    _step(wf, "chain2", ["chain1"])

    async def scenario() -> None:
        client = _async_client(any_db, workers)
        client.runtime.config.completer_flush_delay = 120.0
        client.runtime.config.completer_batch_threshold = 1000
        async with _running(client, gates.values()):
            info = await client.workflow_insert(wf)
            ids = {task.name: task.job.id for task in info.tasks}
            # The chain moves while every leaf is running.
            assert (await client.job_wait(ids["chain2"], timeout=30)).state is JobState.COMPLETED

            async def running() -> bool:
                jobs = [await client.job_get(ids[leaf]) for leaf in leaves]
                return all(job.state is JobState.RUNNING for job in jobs)

            await wait_until_async(running, what="every leaf running")
            completer = client.runtime.completer
            assert completer is not None
            before = completer.flushes
            for leaf in leaves[:-1]:
                gates[leaf].set()
                await asyncio.wait_for(finished[leaf].wait(), 30)
            # Every leaf but the last finished: their outcomes wait in the completer.
            await wait_until_async(
                lambda: completer.backlog == len(leaves) - 1, what="the leaves' outcomes held"
            )
            assert completer.flushes == before
            gates[leaves[-1]].set()
            assert (await client.job_wait(ids["join"], timeout=30)).state is JobState.COMPLETED
            # The leaves' outcomes in one write, the join's in another.
            assert completer.flushes - before <= 2

    asyncio.run(scenario())


def test_a_promotion_claims_the_tasks_it_makes_ready_for_its_own_producer(
    any_db: Db,  # noqa: F811
) -> None:
    """On Postgres, the promotion after a task's completion moves the dependents it
    makes ready straight to running for this client's producer of that queue, as a
    claim writes them (attempt 1, attempted_by this client): no notification, no claim
    of their own. SQLite's promotion makes them available, and the producer claims
    them as any job."""
    workers = Workers()

    @workers.register("step")
    async def step(job: Job[Any]) -> None:
        return None

    wf = Workflow("claimed-chain")
    _step(wf, "s0")
    for i in range(1, 6):
        _step(wf, f"s{i}", [f"s{i - 1}"])
    wf.add("fan", {"name": "fan"}, kind="step", deps=["s5"])
    wf.add("fan2", {"name": "fan2"}, kind="step", deps=["s5"])

    async def scenario() -> None:
        # No polls: a claim of the producer's own in flight when a step finishes would
        # rightly keep the promotion from claiming (it waits for notifications only).
        # Poll-only, and no polls: nothing but this client's own wake-ups moves the
        # producer (with LISTEN, the echo of this client's own insert notification
        # starts a claim of its own, which may be in flight when s0 finishes; see the
        # next test).
        client = _async_client(any_db, workers, fetch_poll_interval=30.0, poll_only=True)
        async with _running(client):
            producer = client.runtime.producers["default"]
            await wait_until_async(lambda: producer.fetches > 0, what="the first claim")
            await client.workflow_insert(wf)
            done = await client.workflow_wait(wf.id, timeout=30)
            promoter = client.runtime.workflow_promoter
            assert promoter is not None
            claimed = promoter.claimed
            assert producer.promotion_claimed == claimed
        assert done.state == "completed"
        for task in done.tasks:
            assert task.job.attempt == 1 and task.job.attempted_by == [client.id]
        # s1..s5, fan and fan2: every task but the first was made ready by a promotion.
        assert claimed == (7 if any_db.dialect == "postgres" else 0)

    asyncio.run(scenario())


def test_a_fan_out_inserted_by_its_worker_is_claimed_by_its_promotion(
    pg_url: str, pg_schema: str
) -> None:
    """With LISTEN, the client that inserts a fan-out and works it hears the echo of its
    own insert notification, which it can't tell from another client's. The promotion
    after the root still claims the leaves for it: the statement itself checks that no
    job waits in the queue. It used to offer the producer's slots only while no
    notification had come since its last claim found the queue empty: the echo, heard
    during the claim that took the root, sent the leaves through the queue (written
    once more, claimed once more) in most runs of the workflow bench."""
    gate = asyncio.Event()
    workers = Workers()

    @workers.register("gated")
    async def gated(job: Job[Any]) -> None:
        await gate.wait()

    @workers.register("step")
    async def step(job: Job[Any]) -> None:
        return None

    wf = Workflow("echo")
    wf.add("root", {}, kind="gated")
    for i in range(5):
        wf.add(f"leaf{i}", {}, kind="step", deps=["root"])

    cooldown = 3.0

    async def scenario() -> None:
        # The echo's wake-up, within the cooldown of the claim that took the root,
        # makes the producer claim again only at the cooldown's end: none of its own
        # claims is in flight when the root ends a moment later.
        client = _async_client(
            Db("postgres", pg_url, pg_schema),
            workers,
            fetch_cooldown=cooldown,
            fetch_poll_interval=30.0,
        )
        async with _running(client, [gate]):
            producer = client.runtime.producers["default"]
            promoter = client.runtime.workflow_promoter
            assert promoter is not None
            await wait_until_async(lambda: producer.fetches > 0, what="the first claim")
            # A time window, not an event: the cooldown of the claim at start passes, so
            # that the insert's own wake-up claims the root at once (inside the cooldown
            # it would wait for its end, and the echo with it).
            await asyncio.sleep(cooldown + 0.1)
            await client.workflow_insert(wf)
            await wait_until_async(lambda: producer.active == 1, what="the root running")
            gate.set()
            done = await client.workflow_wait(wf.id, timeout=30)
            assert done.state == "completed"
            assert promoter.claimed == 5

    asyncio.run(scenario())


def test_a_promotion_claims_only_what_the_producer_would(any_db: Db) -> None:  # noqa: F811
    """A promotion's claim is the producer's offer: nothing for another queue, no kind
    the client does not work under fetch_only_known_kinds, nothing while the queue is
    paused. Those tasks become available, as without a claim."""
    gates = {"root": asyncio.Event(), "root2": asyncio.Event()}
    workers = Workers()

    @workers.register("gated")
    async def gated(job: Job[Any]) -> None:
        await gates[job.args["name"]].wait()

    @workers.register("step")
    async def step(job: Job[Any]) -> None:
        return None

    wf = Workflow("offers")
    wf.add("root", {"name": "root"}, kind="gated")
    wf.add("elsewhere", {}, kind="step", deps=["root"], opts=InsertOpts(queue="other"))
    wf.add("unknown", {}, kind="go_only", deps=["root"])
    wf.add("root2", {"name": "root2"}, kind="gated")
    wf.add("paused", {}, kind="step", deps=["root2"])

    async def scenario() -> None:
        client = _async_client(
            any_db,
            workers,
            fetch_only_known_kinds=True,
            skip_unknown_job_check=True,  # "go_only" is some other client's kind
        )
        async with _running(client, gates.values()):
            info = await client.workflow_insert(wf)
            ids = {task.name: task.job.id for task in info.tasks}
            producer = client.runtime.producers["default"]
            promoter = client.runtime.workflow_promoter
            assert promoter is not None

            async def available(*names: str) -> bool:
                jobs = [await client.job_get(ids[name]) for name in names]
                return all(job.state is JobState.AVAILABLE for job in jobs)

            await wait_until_async(lambda: producer.active == 2, what="both roots running")
            gates["root"].set()
            await wait_until_async(lambda: available("elsewhere", "unknown"), what="decided")
            assert promoter.claimed == 0
            await client.queue_pause("default")
            await wait_until_async(lambda: producer.paused, what="the queue paused")
            gates["root2"].set()
            await wait_until_async(lambda: available("paused"), what="decided while paused")
            assert promoter.claimed == 0
            await client.queue_resume("default")
            assert (await client.job_wait(ids["paused"], timeout=30)).state is JobState.COMPLETED
            assert await available("elsewhere", "unknown")

    asyncio.run(scenario())


def test_a_promoted_task_does_not_pass_a_job_waiting_in_its_queue(any_db: Db) -> None:  # noqa: F811
    """A job inserted into a full queue is claimed before a task made ready afterwards,
    by priority, as River would: the promotion does not claim the task past it. (Here
    the queue's slots were last filled by a promotion's claim, after a claim of the
    producer's own that found the queue empty.) Promoted tasks also run as claimed ones
    do, outside the completer's database call deadline."""
    gates = {"b1": asyncio.Event(), "b2": asyncio.Event()}
    order: list[str] = []
    deadlines: list[float | None] = []
    workers = Workers()

    @workers.register("step")
    async def step(job: Job[Any]) -> None:
        name = job.args["name"]
        order.append(name)
        deadlines.append(call_timeout())
        if name in gates:
            await gates[name].wait()

    wf = Workflow("priorities")
    low = InsertOpts(priority=4)
    wf.add("a", {"name": "a"}, kind="step", opts=low)
    wf.add("b1", {"name": "b1"}, kind="step", deps=["a"], opts=low)
    wf.add("b2", {"name": "b2"}, kind="step", deps=["a"], opts=low)
    wf.add("c1", {"name": "c1"}, kind="step", deps=["b1"], opts=low)

    async def scenario() -> None:
        client = _async_client(any_db, workers, max_workers=2)
        inserter = riverboat.AsyncClient(any_db.url, schema=any_db.schema)
        await client.start()
        try:
            info = await client.workflow_insert(wf)
            await wait_until_async(lambda: {"b1", "b2"} <= set(order), what="b1, b2 running")
            # Committed when insert returns: waiting in the queue whether or not the
            # producer has heard of it yet.
            urgent = await inserter.insert(
                {"name": "urgent"}, kind="step", opts=InsertOpts(priority=1)
            )
            gates["b1"].set()
            assert (await client.job_wait(urgent.job.id, timeout=30)).state is JobState.COMPLETED
            gates["b2"].set()
            done = await client.workflow_wait(info.id, timeout=30)
            assert done.state == "completed"
        finally:
            for gate in gates.values():
                gate.set()
            await client.stop()
            await client.close()
            await inserter.close()
        assert order.index("urgent") < order.index("c1")
        assert deadlines == [None] * 5

    asyncio.run(scenario())


def test_a_promotion_does_not_claim_past_a_job_its_producer_has_not_heard_of(
    pg_url: str, pg_schema: str
) -> None:
    """The producer offers its slots while it knows of no job waiting, but a poll-only
    one hears of no other process's insert until its next poll (here 30 s away). The
    claiming statement looks for itself: with a job available in the queue it claims
    nothing, the task is made available, and the producer, woken by the promotion,
    claims both in River's order. (Before, the task was claimed and the urgent job
    waited for the poll.)"""
    gate = asyncio.Event()
    order: list[str] = []
    workers = Workers()

    @workers.register("step")
    async def step(job: Job[Any]) -> None:
        order.append(job.args["name"])
        if job.args["name"] == "a":
            await gate.wait()

    wf = Workflow("unheard")
    wf.add("a", {"name": "a"}, kind="step", opts=InsertOpts(priority=4))
    wf.add("b", {"name": "b"}, kind="step", deps=["a"], opts=InsertOpts(priority=4))

    async def scenario() -> None:
        db = Db("postgres", pg_url, pg_schema)
        client = _async_client(db, workers, max_workers=2, fetch_poll_interval=30.0, poll_only=True)
        inserter = riverboat.AsyncClient(pg_url, schema=pg_schema)
        try:
            async with _running(client, [gate]):
                producer = client.runtime.producers["default"]
                await wait_until_async(lambda: producer.fetches > 0, what="the first claim")
                info = await client.workflow_insert(wf)
                await wait_until_async(lambda: order == ["a"], what="a running")
                urgent = await inserter.insert(
                    {"name": "urgent"}, kind="step", opts=InsertOpts(priority=1)
                )
                gate.set()
                job = await client.job_wait(urgent.job.id, timeout=10)
                assert job.state is JobState.COMPLETED
                assert (await client.workflow_wait(info.id, timeout=10)).state == "completed"
                promoter = client.runtime.workflow_promoter
                assert promoter is not None and promoter.claimed == 0
        finally:
            await inserter.close()
        assert order[0] == "a" and set(order[1:]) == {"urgent", "b"}

    asyncio.run(scenario())


def test_a_producer_does_not_claim_beside_a_promotion_claiming_for_it(
    pg_url: str, pg_schema: str
) -> None:
    """While a promotion's claim has the queue's free slots, the producer's own claim
    waits for it to end, so the two never take the same slots (the one beyond would be
    held unstarted); it claims as soon as the promotion hands its rows over."""
    workers = Workers()

    @workers.register("step")
    async def step(job: Job[Any]) -> None:
        return None

    async def scenario() -> None:
        db = Db("postgres", pg_url, pg_schema)
        client = _async_client(db, workers, max_workers=1)
        await client.start()
        producer = client.runtime.producers["default"]
        try:
            await wait_until_async(lambda: producer.fetches > 0, what="the first claim")
            claim = producer.promotion_claim()
            assert claim is not None and claim.max_to_lock == 1
            inserted = await client.insert({"name": "plain"}, kind="step")
            await wait_until_async(lambda: producer._fetch_passed_over, what="a claim passed over")
            assert (await client.job_get(inserted.job.id)).state is JobState.AVAILABLE
            assert producer.promotion_claim() is None  # one offer at a time
            producer.take_promoted(claim, [])
            job = await client.job_wait(inserted.job.id, timeout=30)
            assert job.state is JobState.COMPLETED
        finally:
            if producer._promotion_claim is not None:  # a stop waits for the offer's end
                producer.take_promoted(producer._promotion_claim, [])
            await client.stop()
            await client.close()

    asyncio.run(scenario())


def test_a_claiming_promotion_commits_as_a_claim_does() -> None:
    """A promotion step that does not claim may commit without waiting for the disk (it
    can be done again from durable outcomes); one that claims is the tasks' claim, and a
    job must not start on a claim a crash could undo."""
    from riverboat.dialect.postgres_workflow import QUERIES

    assert "synchronous_commit" in QUERIES["workflow_promote_step"]
    assert "synchronous_commit" not in QUERIES["workflow_promote_claim_step"]


def test_a_fan_ins_join_is_skipped_until_its_last_leaf_or_a_failed_one(
    any_db: Db,  # noqa: F811
) -> None:
    """A leaf's outcome written while another leaf of the same join still runs in this
    client runs no promotion: the join can't be decided before that leaf's outcome is
    written, and that write decides it. The last leaf's write does decide it. A leaf
    that failed never has its join skipped: under the ``cancel`` policy the join is
    cancelled while the other leaves still run. And a task added to the running workflow
    after its dependency was claimed (the copy claimed doesn't name it, the row as
    written does) starts once that dependency completes, not after the sweep (stopped
    here) nor the join's other leaf: that write promotes, naming only the join to skip.
    Every outcome is written as soon as it arrives (batch threshold 1)."""
    leaves = [f"leaf{i}" for i in range(5)]
    gates = {leaf: asyncio.Event() for leaf in [*leaves, "bad", "late", "first", "slow"]}
    workers = Workers()

    @workers.register("gated")
    async def gated(job: Job[Any]) -> None:
        await gates[job.args["name"]].wait()
        if job.args["name"] == "bad":
            raise RuntimeError("this leaf fails")

    @workers.register("step")
    async def step(job: Job[Any]) -> None:
        return None

    def fan(name: str, leaf_names: list[str]) -> Workflow:
        wf = Workflow(name)
        _step(wf, "root")
        for leaf in leaf_names:
            wf.add(leaf, {"name": leaf}, InsertOpts(max_attempts=1), kind="gated", deps=["root"])
        _step(wf, "join", leaf_names)
        return wf

    async def scenario() -> None:
        client = _async_client(any_db, workers)
        client.runtime.config.completer_batch_threshold = 1
        await client.start()
        completer, promoter = client.runtime.completer, client.runtime.workflow_promoter
        assert completer is not None and promoter is not None
        await promoter.stop()  # the sweep loop only
        asked: list[tuple[list[int], list[int]]] = []
        promote = promoter.after_finalized

        async def recorded(
            job_ids: Sequence[int], skip_ids: Sequence[int] = (), queue: str | None = None
        ) -> None:
            asked.append((list(job_ids), list(skip_ids)))
            await promote(job_ids, skip_ids, queue)

        completer._on_workflow_finalized = recorded
        try:

            async def all_running(ids: list[int]) -> bool:
                jobs = [await client.job_get(i) for i in ids]
                return all(job.state is JobState.RUNNING for job in jobs)

            async def release(leaf: str) -> tuple[list[int], list[int]] | None:
                """What this leaf's write asked the promoter (the join's may follow), or
                None when it ran no promotion."""
                flushes, before = completer.flushes, len(asked)
                gates[leaf].set()
                await wait_until_async(
                    lambda: completer.flushes > flushes and completer.idle,
                    what=f"{leaf}'s outcome written",
                )
                return asked[before] if len(asked) > before else None

            info = await client.workflow_insert(fan("skipped", leaves))
            ids = {task.name: task.job.id for task in info.tasks}
            await wait_until_async(
                lambda: all_running([ids[leaf] for leaf in leaves]), what="every leaf running"
            )
            for leaf in leaves[:-1]:
                not_run = completer.promotions_skipped
                assert await release(leaf) is None
                assert completer.promotions_skipped == not_run + 1
                assert (await client.job_get(ids["join"])).state is JobState.PENDING
            assert await release(leaves[-1]) == ([ids[leaves[-1]]], [])
            assert (await client.job_wait(ids["join"], timeout=30)).state is JobState.COMPLETED

            info = await client.workflow_insert(fan("failed-leaf", ["bad", "late"]))
            ids = {task.name: task.job.id for task in info.tasks}
            await wait_until_async(
                lambda: all_running([ids["bad"], ids["late"]]), what="both leaves running"
            )
            assert await release("bad") == ([ids["bad"]], [])
            assert (await client.job_get(ids["join"])).state is JobState.CANCELLED
            assert (await client.job_get(ids["late"])).state is JobState.RUNNING

            wf = fan("added-to", ["first", "slow"])
            info = await client.workflow_insert(wf)
            ids = {task.name: task.job.id for task in info.tasks}
            await wait_until_async(
                lambda: all_running([ids["first"], ids["slow"]]), what="both leaves running"
            )
            more = Workflow(id=wf.id)
            _step(more, "added", ["first"])
            added = (await client.workflow_insert(more)).task("added").job.id
            assert await release("first") == ([ids["first"]], [ids["join"]])
            assert (await client.job_wait(added, timeout=30)).state is JobState.COMPLETED
            assert (await client.job_get(ids["slow"])).state is JobState.RUNNING
        finally:
            for gate in gates.values():
                gate.set()
            await client.stop()
            await client.close()

    asyncio.run(scenario())


def test_a_wide_fan_out_is_promoted_in_bounded_steps(any_db: Db) -> None:  # noqa: F811
    """On Postgres the runtime decides a fan-out's dependents PROMOTE_STEP at first, then
    twice as many each step, in id order, and hands each step's tasks to the producers
    before the next statement runs: the first of them start after one short statement.
    A failure cancels every step's tasks and cascades past them. SQLite decides them in
    one statement."""
    from riverboat.runtime.workflow_promoter import PROMOTE_STEP, WorkflowPromoter

    # Steps of PROMOTE_STEP, then 2 * PROMOTE_STEP, then the last 44.
    leaves = [f"leaf{i}" for i in range(3 * PROMOTE_STEP + 44)]

    def fan(name: str) -> Workflow:
        wf = Workflow(name)
        _step(wf, "root")
        for leaf in leaves:
            _step(wf, leaf, ["root"])
        _step(wf, "join", leaves)
        return wf

    async def scenario() -> None:
        client = riverboat.AsyncClient(any_db.url, schema=any_db.schema)
        try:
            woken: list[list[str]] = []
            promoter = WorkflowPromoter(client.driver, lambda queues: woken.append(list(queues)))
            steps = 3 if any_db.dialect == "postgres" else 1
            ok = await client.workflow_insert(fan("wide"))
            ids = {task.name: task.job.id for task in ok.tasks}
            _finish(any_db, [ids["root"]])
            await promoter.after_finalized([ids["root"]])
            assert promoter.statements == steps and woken == [["default"]] * steps
            states = {(await client.job_get(ids[leaf])).state for leaf in leaves}
            assert states == {JobState.AVAILABLE}
            assert (await client.job_get(ids["join"])).state is JobState.PENDING

            failed = await client.workflow_insert(fan("failed"))
            ids = {task.name: task.job.id for task in failed.tasks}
            _finish(any_db, [ids["root"]], "discarded")
            before = promoter.statements
            await promoter.after_finalized([ids["root"]])
            # The leaves' steps, the join (cancelled by the leaves), the join's none.
            assert promoter.statements - before == steps + 2
            info = await client.workflow_get(failed.id)
            assert {t.state for t in info.tasks if t.name != "root"} == {JobState.CANCELLED}
            assert info.task("join").cancelled_by is not None
        finally:
            await client.close()

    asyncio.run(scenario())


def test_promotion_reads_rows_by_primary_key_on_a_table_without_statistics(
    pg_url: str,
    pg_schema: str,
) -> None:
    """The plan of the promotion statement, on a river_job never analyzed (a fresh or
    truncated table): no sequential scan of river_job anywhere, whatever the planner
    guesses of its size (it planned one per dependency, 1.4 s for a 1,000-task fan-out)."""
    from riverboat._sql import bind
    from riverboat.runtime.workflow_promoter import PROMOTE_STEP

    wf = Workflow("plan")
    _step(wf, "root")
    leaves = [f"leaf{i}" for i in range(50)]
    for leaf in leaves:
        _step(wf, leaf, ["root"])
    _step(wf, "join", leaves)

    async def insert() -> tuple[dict[str, int], Any]:
        client = riverboat.AsyncClient(pg_url, schema=pg_schema)
        try:
            # Rows enough for a scan to cost more than lookups, were the size known.
            pad = [riverboat.InsertManyParams({"pad": i}, kind="pad") for i in range(3000)]
            await client.insert_many_fast(pad)
            info = await client.workflow_insert(wf)
            return {t.name: t.job.id for t in info.tasks}, client.driver.dialect
        finally:
            await client.close()

    ids, dialect = asyncio.run(insert())
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            f"UPDATE \"{pg_schema}\".river_job SET state = 'completed', finalized_at = now() "
            "WHERE id = ANY(%s)",
            ([i for name, i in ids.items() if name != "join"],),
        )
        (analyzed,) = conn.execute(
            "SELECT reltuples FROM pg_class WHERE oid = %s::regclass",
            (f'"{pg_schema}".river_job',),
        ).fetchone()  # type: ignore[misc]
        assert analyzed < 0  # never analyzed: the case the statement must survive
        for finalized, candidates in (
            ([ids["root"]], []),
            ([ids["leaf49"]], []),
            ([], [ids["join"]]),
        ):
            for lazy in (False, True):
                stmt = (
                    dialect.workflow_promote_step(finalized, candidates, 0, PROMOTE_STEP)
                    if lazy
                    else dialect.workflow_promote(finalized, candidates)
                )
                sql, names = stmt.query.compile("format")
                with conn.transaction(force_rollback=True):
                    (plan,) = conn.execute(
                        "EXPLAIN (FORMAT JSON) " + sql, bind(names, stmt.params)
                    ).fetchone()  # type: ignore[misc]
                nodes = list(_plan_nodes(plan[0]["Plan"]))
                scans = [(node["Node Type"], node.get("Relation Name")) for node in nodes]
                assert ("Seq Scan", "river_job") not in scans, (finalized, candidates, lazy)
                # Nor an index that holds every workflow task, or every job of a state
                # (the metadata GIN index, River's fetching index): by primary key only.
                indexes = {node["Index Name"] for node in nodes if "Index Name" in node}
                assert indexes <= {"river_job_pkey"}, (indexes, finalized, candidates, lazy)


def test_sqlite_finds_workflow_tasks_without_reading_every_job(sqlite_url: str) -> None:
    """River's SQLite schema has no index on metadata: riverboat's line (version 6) adds
    two partial ones, so a workflow's tasks and the newest workflows are found without
    reading every row of river_job (on 300,000 jobs workflow_get took 60 ms and
    workflow_cancel 126 ms, holding SQLite's one write lock; now 0.3 ms and 0.9 ms)."""
    from riverboat.drivers._sqlite_module import sqlite_module
    from riverboat.workflow import WORKFLOW_TASKS_MAX

    client = riverboat.Client(sqlite_url)
    try:
        client.insert_many([riverboat.InsertManyParams({"pad": i}, kind="pad") for i in range(300)])
        wf = Workflow("plan")
        _step(wf, "a")
        _step(wf, "b", ["a"])
        wid = client.workflow_insert(wf).id
        dialect = client.driver.dialect
    finally:
        client.close()
    statements = [
        dialect.workflow_get(wid, WORKFLOW_TASKS_MAX),
        dialect.workflow_unfinished(wid),
        dialect.workflow_retry(wid),
        dialect.workflow_cancel(wid, "2026-01-01T00:00:00Z"),
        dialect.workflow_list(20),
    ]
    path = sqlite_url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite_module().connect(path)) as conn:
        # Without statistics, then with ANALYZE's (how few rows are workflow tasks).
        for analyzed in (False, True):
            if analyzed:
                conn.execute("ANALYZE")
            for stmt in [s for top in statements for s in (top, *top.then)]:
                sql, _ = stmt.query.compile("named")
                plan = conn.execute("EXPLAIN QUERY PLAN " + sql, stmt.params)
                steps = [row[3] for row in plan]
                ours = [step for step in steps if "riverboat_job_workflow_" in step]
                scans = [step for step in steps if step.startswith("SCAN river_job")]
                assert ours and set(scans) <= set(ours), (stmt.query.name, analyzed, steps)


def test_sqlite_workflows_work_beside_a_job_whose_metadata_is_not_json(sqlite_url: str) -> None:
    """SQLite's ``->>`` raises on malformed JSON: one job whose metadata another tool
    wrote as '{oops' failed workflow_get, workflow_list and the promoter's sweep
    ('malformed JSON') for every workflow. The statements and riverboat's indexes test
    json_valid first: that job is outside every workflow, the index migration applies
    beside it, and it can still be written and deleted."""
    from tests.cli_in_process import cli_in_process
    from tests.sqlite.helpers import query

    rec = Recorder()
    with riverboat.Client(sqlite_url) as plain:
        bad = plain.insert({"name": "bad"}, kind="other").job.id
    query(sqlite_url, "UPDATE river_job SET metadata = '{oops' WHERE id = ?", bad)
    for action in ("down", "up"):  # riverboat's line from version 6 (its indexes) again
        migrated = cli_in_process(
            "migrate",
            action,
            "--line",
            "riverboat",
            "--max-steps",
            "2",
            "--database-url",
            sqlite_url,
        )
        assert migrated.returncode == 0, migrated.stderr
    wf = Workflow("beside")
    _step(wf, "a")
    _step(wf, "b", ["a"])
    with _client(Db("sqlite", sqlite_url, None), rec) as client:
        client.workflow_insert(wf)
        assert [t.name for t in client.workflow_get(wf.id).tasks] == ["a", "b"]
        assert [w.id for w in client.workflow_list()] == [wf.id]
        client.start()
        assert client.workflow_wait(wf.id, timeout=30).state == "completed"
        client.stop()
        query(sqlite_url, "UPDATE river_job SET metadata = '{oops again' WHERE id = ?", bad)
        assert client.job_delete(bad).id == bad
    assert rec.ran == ["a", "b"]


def test_a_sweep_locks_only_the_tasks_it_decides(pg_url: str, pg_schema: str) -> None:
    """A sweep looking at a task whose dependency is still running leaves the row
    unlocked, so the completer that then finishes the dependency promotes the task at
    once. (A sweep used to lock every task named to it: the completer's promotion
    skipped the locked task, and it waited for the next sweep, 2 s later.)"""
    from riverboat._sql import bind
    from riverboat.runtime.workflow_promoter import PROMOTE_STEP, WorkflowPromoter

    wf = Workflow("locks")
    _step(wf, "a")
    _step(wf, "b", ["a"])

    async def scenario() -> None:
        client = riverboat.AsyncClient(pg_url, schema=pg_schema)
        try:
            info = await client.workflow_insert(wf)
            a, b = info.task("a").job.id, info.task("b").job.id
            dialect = client.driver.dialect
            sweep = dialect.workflow_promote_step((), [b], 0, PROMOTE_STEP)
            sql, names = sweep.query.compile("format")
            with psycopg.connect(pg_url) as sweeping:  # its transaction stays open
                rows = sweeping.execute(sql, bind(names, sweep.params)).fetchall()
                assert dialect.decode_promoted_step(rows, PROMOTE_STEP) == ([], None)
                _finish(Db("postgres", pg_url, pg_schema), [a])
                promoter = WorkflowPromoter(client.driver, lambda queues: None)
                await promoter.after_finalized([a])
                assert (await client.job_get(b)).state is JobState.AVAILABLE
                sweeping.rollback()
        finally:
            await client.close()

    asyncio.run(scenario())


@contextlib.contextmanager
def _rows_held(pg_url: str, schema: str, *job_ids: int) -> Iterator[psycopg.Connection[Any]]:
    """A session holding the rows of ``job_ids`` locked, as a transaction adding tasks to
    their workflow does, until it rolls back or the block ends."""
    with psycopg.connect(pg_url) as conn:
        for job_id in job_ids:
            conn.execute(f'SELECT 1 FROM "{schema}".river_job WHERE id = %s FOR UPDATE', (job_id,))
        yield conn


@contextlib.asynccontextmanager
async def _b_found_locked(
    pg_url: str, schema: str, name: str
) -> AsyncIterator[tuple[riverboat.AsyncClient, WorkflowPromoter, int, psycopg.Connection[Any]]]:
    """A workflow ``name`` of a and b (after a) whose promotion, once a finished, found
    b's row locked by another session: (the client, the WorkflowPromoter that ran it,
    b's id, that session, holding the row until it rolls back or the block ends). The
    promoter is stopped and the client closed afterwards."""
    from riverboat.runtime.workflow_promoter import WorkflowPromoter

    wf = Workflow(name)
    _step(wf, "a")
    _step(wf, "b", ["a"])
    client = riverboat.AsyncClient(pg_url, schema=schema)
    promoter = WorkflowPromoter(client.driver, lambda queues: None)
    try:
        info = await client.workflow_insert(wf)
        a, b = info.task("a").job.id, info.task("b").job.id
        with _rows_held(pg_url, schema, b) as adding:
            _finish(Db("postgres", pg_url, schema), [a])
            await promoter.after_finalized([a])
            yield client, promoter, b, adding
    finally:
        await promoter.stop()
        await client.close()


def test_a_task_found_locked_is_looked_at_again_soon(pg_url: str, pg_schema: str) -> None:
    """A task whose dependency finished while another session held its row locked (a
    transaction adding tasks to the workflow rewrites their dependents until it
    commits) is skipped by that promotion, which looks at it again shortly after, not
    at the next sweep (2 s later). No sweep runs here: only the look again can promote."""

    async def scenario() -> None:
        async with _b_found_locked(pg_url, pg_schema, "locked") as (client, promoter, b, adding):
            assert (await client.job_get(b)).state is JobState.PENDING
            adding.rollback()

            async def promoted() -> bool:
                return (await client.job_get(b)).state is JobState.AVAILABLE

            await wait_until_async(promoted, what="b promoted once its row is free")
            assert promoter.locked_retries >= 1

    asyncio.run(scenario())


def test_a_task_found_locked_during_the_last_look_gets_a_look_of_its_own(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another promotion finding a task locked while the look again is on its last look
    starts a new one once it ends: the task is not dropped with those the last look
    still found locked (those are the sweep's)."""
    import riverboat.runtime.workflow_promoter as promoter_module
    from riverboat.runtime.workflow_promoter import WorkflowPromoter

    monkeypatch.setattr(promoter_module, "LOCKED_RETRY", (0.05,))  # one look: the last
    wf = Workflow("locked-twice")
    _step(wf, "a")
    _step(wf, "b", ["a"])
    _step(wf, "c")
    _step(wf, "d", ["c"])

    async def scenario() -> None:
        client = riverboat.AsyncClient(pg_url, schema=pg_schema)
        promoter = WorkflowPromoter(client.driver, lambda queues: None)
        try:
            info = await client.workflow_insert(wf)
            ids = {task.name: task.job.id for task in info.tasks}
            db = Db("postgres", pg_url, pg_schema)
            with _rows_held(pg_url, pg_schema, ids["b"], ids["d"]) as adding:
                _finish(db, [ids["a"], ids["c"]])
                look = promoter._promote

                async def look_while_another_finds_d_locked(*args: Any, **kw: Any) -> Any:
                    result = await look(*args, **kw)
                    if kw.get("locked_into") is not None and adding.info.transaction_status:
                        await look([ids["c"]], ())  # the completer of c, meanwhile
                        adding.rollback()  # both rows free from now on
                    return result

                monkeypatch.setattr(promoter, "_promote", look_while_another_finds_d_locked)
                await promoter.after_finalized([ids["a"]])

                async def d_promoted() -> bool:
                    return (await client.job_get(ids["d"])).state is JobState.AVAILABLE

                await wait_until_async(d_promoted, what="d promoted by a look of its own")
        finally:
            await promoter.stop()
            await client.close()

    asyncio.run(scenario())


def test_a_look_again_that_fails_says_so(
    pg_url: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing awaits the look again at tasks found locked: an error in it is logged
    there, not left in a task nobody reads."""

    async def scenario() -> None:
        async with _b_found_locked(pg_url, pg_schema, "locked-fails") as (_, promoter, _, _):
            retry = promoter._retrying
            assert retry is not None

            async def broken(*args: Any, **kw: Any) -> Any:
                raise RuntimeError("a bug in the look again")

            promoter._promote = broken  # type: ignore[method-assign]
            await asyncio.wait_for(retry, 10)

    with caplog.at_level("ERROR", logger="riverboat.workflow"):
        asyncio.run(scenario())
    assert any(
        r.exc_info is not None and "a bug in the look again" in str(r.exc_info[1])
        for r in caplog.records
    )


def test_a_sweep_names_only_the_tasks_it_can_decide(any_db: Db) -> None:  # noqa: F811
    """The sweep reads pending tasks with their dependency ids, looks each batch's
    dependencies up once, and names to the promotion statement only the tasks whose
    dependencies let it decide them: 1,500 tasks waiting on a running root cost two
    listings and two look-ups, no promotion; the tasks whose promotion was missed (their
    dependencies finalized behind the promoter's back) are promoted or cancelled by
    policy in one statement."""
    from riverboat.runtime.workflow_promoter import SWEEP_BATCH, WorkflowPromoter

    assert SWEEP_BATCH == 1000  # 1,500 leaves make two batches
    wf = Workflow("sweep")
    _step(wf, "root")
    _step(wf, "done")
    _step(wf, "failed")
    for i in range(1500):
        _step(wf, f"leaf{i}", ["root"])
    _step(wf, "missed", ["done"])
    _step(wf, "both", ["root", "done"])
    _step(wf, "cancelled_by_failure", ["failed"])
    _step(wf, "runs_anyway", ["failed"], on_dep_failure="run")
    _step(wf, "waits_for_root", ["failed", "root"], on_dep_failure="run")

    async def scenario() -> None:
        client = riverboat.AsyncClient(any_db.url, schema=any_db.schema)
        try:
            info = await client.workflow_insert(wf)
            ids = {task.name: task.job.id for task in info.tasks}
            _finish(any_db, [ids["done"]])
            _finish(any_db, [ids["failed"]], "discarded")
            names: list[str] = []
            fetch = client.driver.fetch

            async def counted(stmt: Any) -> Any:
                names.append(stmt.query.name)
                return await fetch(stmt)

            client.driver.fetch = counted  # type: ignore[method-assign]
            promoter = WorkflowPromoter(client.driver, lambda queues: None)
            assert await promoter.sweep() == 3
            assert names.count("workflow_pending_tasks") == 2
            assert names.count("workflow_dep_states") == 2
            # One promotion statement; then the cascade after the cancelled task.
            promotions = [name for name in names if name.startswith("workflow_promote")]
            assert len(promotions) == 2
            states = {
                name: (await client.job_get(job_id)).state
                for name, job_id in ids.items()
                if not name.startswith("leaf") or name == "leaf1499"
            }
            assert states == {
                "root": JobState.AVAILABLE,
                "done": JobState.COMPLETED,
                "failed": JobState.DISCARDED,
                "leaf1499": JobState.PENDING,
                "missed": JobState.AVAILABLE,
                "both": JobState.PENDING,
                "cancelled_by_failure": JobState.CANCELLED,
                "runs_anyway": JobState.AVAILABLE,
                "waits_for_root": JobState.PENDING,
            }
            names.clear()
            assert await promoter.sweep() == 0  # nothing left to decide: no promotion
            assert not [name for name in names if name.startswith("workflow_promote")]
        finally:
            await client.close()

    asyncio.run(scenario())


def test_one_client_of_a_fleet_sweeps(any_db: Db) -> None:  # noqa: F811
    """The live client with queues whose id is smallest in the registry sweeps every
    interval; another sweeps once at its start and then leaves it to that one, and takes
    over when it stops."""

    def client(client_id: str, **kw: Any) -> riverboat.AsyncClient:
        return riverboat.AsyncClient(
            any_db.url,
            schema=any_db.schema,
            id=client_id,
            workers=Recorder().workers,
            heartbeat_interval=0.1,
            dead_after=2.0,
            **kw,
        )

    async def scenario() -> None:
        queues = {"default": QueueConfig(max_workers=1)}
        first, second = client("b_sweeps", queues=queues), client("c_waits", queues=queues)
        try:
            for c in (first, second):
                await c.start()
            sweeps = {
                c.runtime.client_id: await c.runtime._sweeps_workflows_here()
                for c in (first, second)
            }
            assert sweeps == {"b_sweeps": True, "c_waits": False}
            follower = second.runtime.workflow_promoter
            assert follower is not None
            # Its first pass at its start, then one interval (2 s) left to b_sweeps.
            await wait_until_async(lambda: follower.passes_left_to_others >= 1, timeout=10)
            assert follower.passes == 1
            await first.stop()
            assert await second.runtime._sweeps_workflows_here()
        finally:
            for c in (first, second):
                await c.stop()
                await c.close()

    asyncio.run(scenario())


def test_a_runtimes_promotion_statements_never_overlap(any_db: Db) -> None:  # noqa: F811
    """The sweep and a completer's promotion in one runtime take turns. Beside each
    other, the sweep could keep a lock on a task the other had just made available (a
    row updated under a statement stays locked by it, even when it then passes the row
    over), and the producer woken for that task skipped it until its next poll (1 s)."""
    from riverboat.runtime.workflow_promoter import WorkflowPromoter

    wf = Workflow("turns")
    _step(wf, "a")
    _step(wf, "b", ["a"])

    async def scenario() -> None:
        client = riverboat.AsyncClient(any_db.url, schema=any_db.schema)
        try:
            info = await client.workflow_insert(wf)
            a = info.task("a").job.id
            _finish(any_db, [a])
            driver = client.driver
            fetch = driver.fetch
            running: list[str] = []
            overlapped: list[list[str]] = []
            second = asyncio.Event()

            async def watched(stmt: Any) -> Any:
                if not stmt.query.name.startswith("workflow_promote"):
                    return await fetch(stmt)
                running.append(stmt.query.name)
                if len(running) > 1:
                    overlapped.append(list(running))
                    second.set()
                else:
                    # Hold the first statement until the other one starts, or long
                    # enough that it would have: it is what the runtime must prevent.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(second.wait(), 0.3)
                try:
                    return await fetch(stmt)
                finally:
                    running.remove(stmt.query.name)

            driver.fetch = watched  # type: ignore[method-assign]
            promoter = WorkflowPromoter(driver, lambda queues: None)
            await asyncio.gather(promoter.after_finalized([a]), promoter.sweep())
            assert overlapped == []
            assert promoter.statements >= 2  # both ran: the sweep lists, then promotes
            assert (await client.job_get(info.task("b").job.id)).state is JobState.AVAILABLE
        finally:
            await client.close()

    asyncio.run(scenario())


def _plan_nodes(node: dict[str, Any]) -> Any:
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


def test_workflow_insert_tx_rolls_back_with_the_callers_transaction(any_db: Db) -> None:  # noqa: F811
    rec = Recorder()
    wf = Workflow("tx")
    _step(wf, "a")
    _step(wf, "b", ["a"])
    with _client(any_db, rec) as client, any_db.connect() as conn:
        info = client.workflow_insert_tx(conn, wf)
        assert [t.name for t in info.tasks] == ["a", "b"]
        conn.rollback()
        with pytest.raises(NotFoundError):
            client.workflow_get(wf.id)
        # Rolled back, it was never inserted: it may be inserted again.
        assert [t.name for t in client.workflow_insert(wf).tasks] == ["a", "b"]


def test_an_addition_refused_for_an_unknown_dependency_writes_nothing_in_the_callers_tx(
    any_db: Db,  # noqa: F811
) -> None:
    """On SQLite the ids are known only after the insert, and the unknown name was
    found then: the rows were already in the caller's transaction, and committed they
    stayed pending for good (no ids to wait on, nothing to decide them)."""
    wf = Workflow("txadd")
    _step(wf, "a")
    with _client(any_db, Recorder()) as client, any_db.connect() as conn:
        client.workflow_insert(wf)
        more = Workflow(id=wf.id)
        _step(more, "b", ["a"])
        _step(more, "z", ["nope"])
        with pytest.raises(InvalidInputError, match="'z' depends on 'nope'"):
            client.workflow_insert_tx(conn, more)
        conn.commit()  # the caller's transaction goes on, and ends well
        assert [t.name for t in client.workflow_get(wf.id).tasks] == ["a"]
        assert any_db.execute("SELECT count(*) FROM river_job") == [(1,)]


def test_a_second_insert_racing_an_uncommitted_first_waits_and_is_refused(
    any_db: Db,  # noqa: F811
) -> None:
    """The check that refuses a second insert of one Workflow read no rows while the
    first was still uncommitted (Postgres, READ COMMITTED): both inserted. The second
    now takes the workflow's lock first, waits for the first's commit, and sees it."""
    if any_db.dialect != "postgres":
        pytest.skip("SQLite's writers take turns: the second waits for the first anyway")
    wf = Workflow("race")
    _step(wf, "a")
    outcome: list[str] = []
    with _client(any_db, Recorder()) as client, any_db.connect() as first:
        client.workflow_insert_tx(first, wf)  # not committed yet

        def second() -> None:
            try:
                client.workflow_insert(wf)
                outcome.append("inserted")
            except InvalidInputError:
                outcome.append("refused")

        racer = threading.Thread(target=second)
        racer.start()
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        wait_until(lambda: any_db.execute(waiting)[0][0] == 1, what="the second to wait")
        first.commit()
        racer.join(30)
        assert outcome == ["refused"]
        assert [t.name for t in client.workflow_get(wf.id).tasks] == ["a"]


def test_two_clients_adding_the_same_task_name_at_once_add_it_once(any_db: Db) -> None:  # noqa: F811
    """An addition to a running workflow holds the workflow until it commits: a second
    one that started meanwhile reads the first's tasks after it, and is refused for the
    name they share (before, on Postgres, both passed the check and the workflow had two
    tasks of that name)."""
    wf = Workflow("shared")
    _step(wf, "root")
    outcome: list[BaseException | None] = []
    with _client(any_db, Workers()) as client, any_db.connect() as conn:
        client.workflow_insert(wf)
        first = Workflow(id=wf.id)
        _step(first, "late", ["root"])
        client.workflow_insert_tx(conn, first)  # its transaction stays open

        def add_the_same() -> None:
            second = Workflow(id=wf.id)
            _step(second, "late", ["root"])
            try:
                client.workflow_insert(second)
                outcome.append(None)
            except BaseException as exc:  # checked below, in the test thread
                outcome.append(exc)

        thread = threading.Thread(target=add_the_same)
        thread.start()
        if any_db.dialect == "postgres":
            # The second addition waits for the first's lock (SQLite's writers wait for
            # the first's write lock in any case).
            with psycopg.connect(any_db.url, autocommit=True) as watcher:
                wait_until(
                    lambda: (
                        watcher.execute(
                            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                            " AND NOT granted"
                        ).fetchone()[0]  # type: ignore[index]
                        == 1
                    ),
                    timeout=10,
                    what="the second addition waiting for the workflow's lock",
                )
        conn.commit()
        thread.join(timeout=30)
        assert not thread.is_alive()
        [error] = outcome
        assert isinstance(error, InvalidInputError) and "late" in str(error)
        assert [t.name for t in client.workflow_get(wf.id).tasks] == ["root", "late"]


def test_workflow_list_counts_every_task_newest_first(any_db: Db) -> None:  # noqa: F811
    rec = Recorder()
    rec.fail.add("b-fails")
    done, failed, waiting = Workflow("done"), Workflow("failed"), Workflow("waiting")
    _step(done, "a")
    _step(done, "b", ["a"])
    _step(failed, "b-fails", opts=InsertOpts(max_attempts=1))
    _step(failed, "c", ["b-fails"])
    with _client(any_db, rec) as worker:
        for wf in (done, failed):
            worker.workflow_insert(wf)
        worker.start()
        for wf in (done, failed):
            worker.workflow_wait(wf.id, timeout=30)
        worker.stop()
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        _step(waiting, "x")
        client.workflow_insert(waiting)
        # Tasks added later keep the stored workflow's name, and make it the newest.
        more = Workflow("another name", id=done.id)
        _step(more, "later", ["b"])
        client.workflow_insert(more)
        listed = client.workflow_list(limit=10)
        assert [(s.id, s.name, s.state) for s in listed] == [
            (done.id, "done", "running"),
            (waiting.id, "waiting", "running"),
            (failed.id, "failed", "failed"),
        ]
        by_id = {s.id: s for s in listed}
        counts = (s := by_id[done.id]).tasks, s.completed, s.failed, s.unfinished
        assert counts == (3, 2, 0, 1)
        counts = (s := by_id[failed.id]).tasks, s.completed, s.failed, s.unfinished
        assert counts == (2, 0, 2, 0)
        assert all(s.created_at is not None for s in listed)
        assert [s.id for s in client.workflow_list(limit=1)] == [done.id]
        for bad in (0, 101, True, "5"):
            with pytest.raises(InvalidInputError, match="limit"):
                client.workflow_list(limit=bad)  # type: ignore[arg-type]


def test_bad_workflows_are_refused_before_anything_is_written(any_db: Db) -> None:  # noqa: F811
    wf = Workflow("bad")
    _step(wf, "a")
    with pytest.raises(InvalidInputError, match="already in the workflow"):
        _step(wf, "a")
    with pytest.raises(InvalidInputError, match="not added yet"):
        _step(wf, "b", ["nope"])
    with pytest.raises(InvalidInputError, match="itself"):
        _step(wf, "c", ["c"])
    with pytest.raises(InvalidInputError, match="deps: must be a list of tasks"):
        wf.add("n", {}, kind="step", deps=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="unique"):
        wf.add("u", {}, InsertOpts(unique_opts=riverboat.UniqueOpts(by_args=True)), kind="step")
    with pytest.raises(InvalidInputError, match="on_dep_failure"):
        Workflow("p", on_dep_failure="ignore")  # type: ignore[arg-type]
    with _client(any_db, Recorder()) as client:
        with pytest.raises(InvalidInputError, match="no tasks"):
            client.workflow_insert(Workflow("empty"))
        cyclic = Workflow(id="wf_cycle")
        _step(cyclic, "x", ["y"])
        _step(cyclic, "y", ["x"])
        with pytest.raises(InvalidInputError, match="cycle: x -> y -> x"):
            client.workflow_insert(cyclic)
        # A chain of forward references as long as a workflow may be: no RecursionError,
        # and a cycle at its far end is still found.
        long_chain = Workflow(id="wf_cycle")
        for i in range(WORKFLOW_TASKS_MAX):
            _step(long_chain, f"t{i}", [f"t{(i + 1) % WORKFLOW_TASKS_MAX}"])
        with pytest.raises(InvalidInputError, match=r"cycle: t0 -> t1 -> t2 .* -> t0$"):
            long_chain.check_acyclic()
        missing = Workflow(id="wf_missing")
        _step(missing, "z")
        with pytest.raises(NotFoundError):
            client.workflow_insert(missing)
        # Unique or pending through the args' own insert_opts(), not the opts given.
        for own, words in (
            (InsertOpts(unique_opts=riverboat.UniqueOpts(by_args=True)), "unique"),
            (InsertOpts(pending=True), "pending"),
        ):
            opted = Workflow("opted")
            opted.add("own", _OwnOpts(own), kind="step")
            _step(opted, "after", ["own"])
            with pytest.raises(InvalidInputError, match=f"task 'own'.*{words}"):
                client.workflow_insert(opted)
        # A task's own args or options refused when resolved: the error names the task
        # (what the caller added), not its place in the insert_many params.
        named = Workflow("named")
        _step(named, "first")
        named.add("late", {}, kind="not a kind")
        with pytest.raises(InvalidInputError) as refused:
            client.workflow_insert(named)
        assert refused.value.field == "tasks['late'].kind", refused.value
        unencodable = Workflow("unencodable")
        unencodable.add("nan", {"x": float("nan")}, kind="step")
        with pytest.raises(riverboat.InvalidArgsError, match=r"^tasks\['nan'\]\.args: "):
            client.workflow_insert(unencodable)
        assert client.job_list(limit=10).jobs == []


def test_the_same_workflow_inserted_twice_is_refused(any_db: Db) -> None:  # noqa: F811
    """A second insert of one Workflow (a retry after an error that did not say whether
    the first committed) stored every task again under its id: each ran twice."""
    wf = Workflow("twice")
    _step(wf, "first")
    _step(wf, "second", ["first"])
    with _client(any_db, Recorder()) as client:
        inserted = client.workflow_insert(wf)
        with pytest.raises(InvalidInputError, match=f"{wf.id} is in the database already"):
            client.workflow_insert(wf)
        with any_db.connect() as conn, pytest.raises(InvalidInputError, match="inserted once"):
            client.workflow_insert_tx(conn, wf)
        tasks = [(t.name, t.job.id) for t in client.workflow_get(wf.id).tasks]
        assert tasks == [(t.name, t.job.id) for t in inserted.tasks]
        assert len(client.job_list(limit=10).jobs) == 2


def test_a_copy_of_a_workflow_is_refused_once_either_is_inserted(any_db: Db) -> None:  # noqa: F811
    """Only a Workflow's first insert skips the database's check that its id is new:
    a copy made before that insert (pickled to another process, deep-copied) shares the
    id, and would store every task a second time."""
    wf = Workflow("copied")
    _step(wf, "first")
    _step(wf, "second", ["first"])
    copies = [copy.copy(wf), copy.deepcopy(wf), pickle.loads(pickle.dumps(wf))]
    with _client(any_db, Recorder()) as client:
        client.workflow_insert(copies[1])
        for duplicate in (wf, copies[0], copies[2]):
            with pytest.raises(InvalidInputError, match=f"{wf.id} is in the database already"):
                client.workflow_insert(duplicate)
        assert len(client.job_list(limit=10).jobs) == 2


class _OwnOpts(dict[str, Any]):
    """Args whose insert_opts() returns the options they were made with."""

    def __init__(self, opts: InsertOpts) -> None:
        super().__init__(name="own")
        self._opts = opts

    def insert_opts(self) -> InsertOpts:
        return self._opts


@pytest.mark.parametrize("form", ["arrays", "text", "node"])
def test_task_metadata_is_written_as_the_json_encoder_writes_it(form: LinkForm) -> None:
    """The workflow's part of each task's metadata is put together from pieces encoded
    once per workflow; it must be the text go_json_dumps writes for the same document
    (after the task's own metadata), escapes and all: id lists as arrays, or (on
    Postgres) as one string of ids each, or each task's links and name as one node."""
    from riverboat._client_core import _ClientCore
    from riverboat._json import go_json_dumps
    from riverboat.workflow import add_workflow_metadata

    wf = Workflow("n<&>\u00e9\u2028", on_dep_failure="run")
    a = wf.add("a<b>;", {"x": 1}, kind="k1")
    b = wf.add("b", {}, InsertOpts(metadata={"m": [1, {"z": None}]}), kind="k2", deps=[a])
    wf.add("c\u00e9", {}, kind="k3", deps=[a, b, a], on_dep_failure="cancel")
    core = _ClientCore("sqlite:///:memory:", None, None, 25, None, None, None, want_async=False)
    ids = [101, 102, 103]
    links = wf.links(ids, {})
    plan = core.plan_many(
        wf.task_params(),
        prepare=lambda jobs: add_workflow_metadata(wf, jobs, ids, links, form=form),
    )
    # Only what is not a default: the workflow's name on the first and the last task, no
    # empty id list, the policy only when it is "run".
    expected = [
        ({}, {"task": "a<b>;", "name": wf.name, "dependent_ids": [102, 103]}, "run"),
        ({"m": [1, {"z": None}]}, {"task": "b", "dep_ids": [101], "dependent_ids": [103]}, "run"),
        ({}, {"task": "c\u00e9", "name": wf.name, "dep_ids": [101, 102]}, "cancel"),
    ]
    for job, (own, stored, policy) in zip(plan.jobs, expected, strict=True):
        part: dict[str, object] = {"id": wf.id, **stored}
        if form == "node":
            deps, more = (
                ",".join(map(str, stored.get(key, ()))) for key in ("dep_ids", "dependent_ids")
            )
            part = {"id": wf.id, "node": f"{deps};{more};{stored['task']}"}
            part.update({k: v for k, v in stored.items() if k == "name"})
        for key in ("dep_ids", "dependent_ids"):
            if key in part and form == "text":
                part[key] = ",".join(map(str, part[key]))  # type: ignore[call-overload]
        if policy == "run":
            part["on_dep_failure"] = "run"
        document = {**own, "riverboat_workflow": part}
        assert job.encoded_metadata == go_json_dumps(document)
        assert job.state == ("pending" if "dep_ids" in stored else "available")
        # Read back in any form as the separate keys.
        meta = workflow_meta(cast(Any, SimpleNamespace(metadata=json.loads(job.encoded_metadata))))
        assert meta is not None and meta["task"] == stored["task"]
        assert ids_in(meta.get("dep_ids", [])) == stored.get("dep_ids", [])
        assert ids_in(meta.get("dependent_ids", [])) == stored.get("dependent_ids", [])
    core.driver.close()


def test_names_metadata_cannot_carry_are_refused_when_added() -> None:
    wf = Workflow("names")
    for bad in ("nul\x00", "lone\ud800"):
        with pytest.raises(InvalidInputError, match="name"):
            wf.add(bad, {}, kind="step")
        with pytest.raises(InvalidInputError, match="name"):
            Workflow(bad)
    adding = Workflow(id="wf_some")
    with pytest.raises(InvalidInputError, match="deps"):
        adding.add("x", {}, kind="step", deps=["nul\x00"])


def test_a_workflow_cannot_grow_past_its_task_limit(sqlite_url: str) -> None:
    """Reads of a workflow stop at WORKFLOW_TASKS_MAX tasks. Adding one to a full
    workflow was accepted, and then workflow_get did not list the new task and
    workflow_wait could end while it was still pending. It is refused, nothing written."""
    from riverboat.workflow import WORKFLOW_TASKS_MAX

    wf = Workflow("full")
    root = wf.add("root", {}, kind="step")
    for i in range(WORKFLOW_TASKS_MAX - 1):
        wf.add(f"leaf{i}", {}, kind="step", deps=[root])
    with riverboat.Client(sqlite_url) as client:
        client.workflow_insert(wf)
        more = Workflow(id=wf.id)
        more.add("one-too-many", {}, kind="step", deps=["root"])
        with pytest.raises(InvalidInputError, match=f"has {WORKFLOW_TASKS_MAX} tasks; adding 1"):
            client.workflow_insert(more)
        assert client.job_count_matching() == WORKFLOW_TASKS_MAX


def test_job_wait_from_another_process(any_db: Db) -> None:  # noqa: F811
    rec = Recorder()
    with _client(any_db, rec) as client:
        job = client.insert({"name": "solo"}, kind="step").job
        with pytest.raises(NotFoundError):
            client.job_wait(job.id + 1000, timeout=1)
        with pytest.raises(WaitTimeoutError) as timed_out:
            client.job_wait(job.id, timeout=0.05)
        assert timed_out.value.last.state is JobState.AVAILABLE  # type: ignore[attr-defined]
        code = (
            "import json, sys, riverboat\n"
            "c = riverboat.Client(sys.argv[1], schema=sys.argv[2] or None)\n"
            "job = c.job_wait(int(sys.argv[3]), timeout=60)\n"
            "print(json.dumps([job.state, job.metadata.get('output')]))\n"
        )
        waiter = subprocess.Popen(
            [sys.executable, "-c", code, any_db.url, any_db.schema or "", str(job.id)],
            stdout=subprocess.PIPE,
            text=True,
        )
        client.start()
        out, _ = waiter.communicate(timeout=90)
        client.stop()
    assert waiter.returncode == 0
    assert json.loads(out) == ["completed", {"name": "solo", "saw": []}]


_ASYNC_WAITER = """
import asyncio, json, sys, riverboat

async def main():
    client = riverboat.AsyncClient(sys.argv[1], schema=sys.argv[2] or None)
    try:
        job, workflow = await asyncio.gather(
            client.job_wait(int(sys.argv[3]), timeout=60),
            client.workflow_wait(sys.argv[4], timeout=60),
        )
        print(json.dumps([job.state, job.metadata.get("output"), workflow.state]))
    finally:
        await client.close()

asyncio.run(main())
"""

_SYNC_WAITER = """
import json, sys, threading, riverboat

client = riverboat.Client(sys.argv[1], schema=sys.argv[2] or None)
found = {}
wf_waiter = threading.Thread(
    target=lambda: found.update(wf=client.workflow_wait(sys.argv[4], timeout=60))
)
wf_waiter.start()
job = client.job_wait(int(sys.argv[3]), timeout=60)
wf_waiter.join()
print(json.dumps([job.state, job.metadata.get("output"), found["wf"].state]))
client.close()
"""


@pytest.mark.parametrize("waiter_code", [_ASYNC_WAITER, _SYNC_WAITER], ids=["async", "sync"])
def test_waiters_in_another_process_are_woken_as_the_job_finalizes(
    any_db: Db,  # noqa: F811
    waiter_code: str,
) -> None:
    """A client (async, or sync with a thread per wait) in another process waits for a
    job and for a workflow. On Postgres it listens and announces both: the runtime that
    finishes them hears the announcements and sends the notification (counted); on
    SQLite it polls."""
    gate = threading.Event()
    workers = Workers()

    @workers.register("gate")
    def gated(job: Job[Any]) -> None:
        assert gate.wait(60)
        record_output({"gate": "open"})

    wf = Workflow("gated")
    wf.add("only", {}, kind="gate")
    with riverboat.Client(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(max_workers=4)},
        workers=workers,
        fetch_poll_interval=0.1,
    ) as client:
        client.start()
        job = client.insert({}, kind="gate").job
        client.workflow_insert(wf)
        args = [any_db.url, any_db.schema or "", str(job.id), wf.id]
        waiter = subprocess.Popen(
            [sys.executable, "-c", waiter_code, *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert client.async_client is not None
            runtime = client.async_client.runtime
            assert runtime is not None and runtime.finalized_signals is not None
            signals = runtime.finalized_signals
            if any_db.dialect == "postgres":
                wait_until(
                    lambda: signals.awaits(job_id=job.id) and signals.awaits(workflow_id=wf.id),
                    timeout=60,
                    what="the waiter's announcements heard by the runtime",
                )
            gate.set()
            out, _ = waiter.communicate(timeout=90)
        finally:
            gate.set()
            if waiter.poll() is None:
                waiter.kill()
        client.stop()
    assert waiter.returncode == 0
    assert json.loads(out) == ["completed", {"gate": "open"}, "completed"]
    if any_db.dialect == "postgres":
        assert signals.notified >= 1


def test_finalized_notifications_stay_under_postgres_payload_limit(any_db: Db) -> None:  # noqa: F811
    """Waiters of many jobs and workflows finalized in one batch are told in as many
    notifications as it takes: split by count (500 ids), 500 generated workflow ids
    took about 15,500 bytes, Postgres refused the payload ("payload string too long"),
    and every waiter of the batch fell back to polling."""
    if any_db.dialect != "postgres":
        pytest.skip("SQLite's waiters poll")
    from riverboat._channels import channel_name
    from riverboat.drivers.psycopg import AsyncPsycopgDriver
    from riverboat.wait import FINALIZED_TOPIC, FinalizedSignals

    job_ids = list(range(10**17, 10**17 + 600))
    workflow_ids = [Workflow("w").id for _ in range(400)]
    with psycopg.connect(any_db.url, autocommit=True) as listening:
        row = listening.execute("SELECT current_schema()").fetchone()
        schema = any_db.schema or (row[0] if row else "public")
        listening.execute(f'LISTEN "{channel_name(schema, FINALIZED_TOPIC)}"')

        async def finalize() -> int:
            driver = AsyncPsycopgDriver(any_db.url, schema=any_db.schema)
            try:
                signals = FinalizedSignals(driver)
                for job_id in job_ids:
                    signals.heard({"job_id": job_id, "timeout": 60})
                for workflow_id in workflow_ids:
                    signals.heard({"workflow_id": workflow_id, "timeout": 60})
                await signals.after_finalized(
                    [(i, None) for i in job_ids] + [(10**17 - 1, w) for w in workflow_ids]
                )
                return signals.notified
            finally:
                await driver.close()

        sent = asyncio.run(finalize())
        payloads = [json.loads(n.payload) for n in listening.notifies(timeout=10, stop_after=sent)]
    assert sent == len(payloads) > 1
    assert sorted(i for p in payloads for i in p["job_ids"]) == job_ids
    assert sorted(w for p in payloads for w in p["workflow_ids"]) == sorted(workflow_ids)


def test_a_workflow_id_too_long_for_any_notification_is_left_to_its_waiters_poll() -> None:
    from riverboat.wait import NOTIFY_PAYLOAD_MAX, finalized_payloads

    huge = "x" * NOTIFY_PAYLOAD_MAX
    assert finalized_payloads([1], [huge, "wf_a"]) == ['{"job_ids": [1], "workflow_ids": ["wf_a"]}']
    assert finalized_payloads([], [huge]) == []


def test_job_wait_in_the_workers_process_is_woken_by_its_completer(any_db: Db) -> None:  # noqa: F811
    """A waiter in the process whose runtime finishes the job is woken by the completer
    right after the write, whatever the poll's pause; jobs nobody waits for cost no
    notification."""
    from riverboat import wait

    rec = Recorder()
    with _client(any_db, rec) as client:
        client.start()
        assert client.async_client is not None
        stats = client.async_client.driver.stats
        # Nobody waits: these jobs cost no notification at all. (Counted in a client of
        # their own: a waiter's notification may follow its in-process wake-up.)
        for i in range(20):
            client.insert({"name": f"unwatched{i}"}, kind="step")
        wait_until(lambda: len(rec.ran) == 20, timeout=30, what="the unwatched jobs run")
        client.stop()  # writes every outcome
        sent = stats.by_query.get("job_finalized_notify", 0)
    with _client(any_db, rec) as client:
        job = client.insert({"name": "local"}, kind="step").job
        woken = threading.Event()
        wait.LOCAL.add(job.id, None, woken.set)
        try:
            client.start()
            done = client.job_wait(job.id, timeout=30)
            wait_until(woken.is_set, timeout=30, what="the completer's in-process wake-up")
        finally:
            wait.LOCAL.remove(job.id, None, woken.set)
    assert done.state is JobState.COMPLETED
    assert not wait.LOCAL  # every waiter unregistered
    assert sent == 0


def test_concurrent_waiters_share_one_listen_connection(pg_url: str, pg_schema: str) -> None:
    """Five requests waiting at once in one client hold one LISTEN connection between
    them (not five), and it is handed back once they are done."""
    from riverboat import wait

    async def scenario() -> None:
        client = riverboat.AsyncClient(pg_url, schema=pg_schema)
        opened: list[int] = []
        listener = client.driver.listener

        async def counted_listener() -> Any:
            opened.append(1)
            return await listener()

        client.driver.listener = counted_listener  # type: ignore[method-assign]
        try:
            jobs = [(await client.insert({"name": f"w{i}"}, kind="step")).job for i in range(5)]
            waits = [asyncio.create_task(client.job_wait(j.id, timeout=60)) for j in jobs]
            await wait_until_async(
                lambda: len(getattr(wait._LISTENERS.get(client.driver), "_waiters", ())) == 5,
                what="five waiters on the shared listener",
            )
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute(
                    f"UPDATE \"{pg_schema}\".river_job SET state = 'completed', "
                    "finalized_at = now() WHERE id = ANY(%s)",
                    ([j.id for j in jobs],),
                )
            done = await asyncio.gather(*waits)
            assert {job.state for job in done} == {JobState.COMPLETED}
            assert opened == [1]
            assert not wait._LISTENERS[client.driver]._waiters
        finally:
            await client.close()

    asyncio.run(scenario())


def test_workflow_wait_reads_the_whole_workflow_only_at_the_start_and_the_end(
    any_db: Db,  # noqa: F811
) -> None:
    """Between its first and last read, a waiter asks for one unfinished task per
    wake-up; a task added to the workflow while it waits is waited for too (its id is
    above those of the tasks the first read found, where later reads start)."""
    rec = Recorder()
    wf = Workflow("waited")
    _step(wf, "a")
    _step(wf, "b", ["a"])
    with (
        _client(any_db, rec) as worker,
        riverboat.Client(any_db.url, schema=any_db.schema) as waiting,
    ):
        worker.workflow_insert(wf)
        statements: list[str] = []
        read = waiting.driver.fetch

        def counted(stmt: Any) -> Any:
            statements.append(stmt.query.name)
            return read(stmt)

        waiting.driver.fetch = counted  # type: ignore[method-assign]
        found: dict[str, Any] = {}
        waiter = threading.Thread(
            target=lambda: found.update(done=waiting.workflow_wait(wf.id, timeout=60))
        )
        waiter.start()
        wait_until(lambda: "workflow_unfinished" in statements, what="the waiter's first check")
        more = Workflow(id=wf.id)
        _step(more, "c", ["b"])
        worker.workflow_insert(more)
        worker.start()
        waiter.join(timeout=60)
        worker.stop()
    assert not waiter.is_alive()
    done = found["done"]
    assert [(t.name, t.state) for t in done.tasks] == [
        ("a", JobState.COMPLETED),
        ("b", JobState.COMPLETED),
        ("c", JobState.COMPLETED),
    ]
    assert rec.ran == ["a", "b", "c"]
    assert statements.count("workflow_get") == 2
    assert statements.count("workflow_unfinished") >= 1
    assert set(statements) <= {"workflow_get", "workflow_unfinished", "job_wait_announce"}


def test_job_wait_refuses_bad_input_before_waiting(any_db: Db) -> None:  # noqa: F811
    with _client(any_db, Recorder()) as client:
        # NaN used to wait forever; an int too large for a float raised OverflowError.
        for timeout in (-1, float("nan"), float("inf"), 10**400):
            with pytest.raises(InvalidInputError, match="timeout"):
                client.job_wait(1, timeout=timeout)
        with pytest.raises(InvalidInputError, match="timeout"):
            client.workflow_wait("wf_unknown", timeout=float("nan"))
        with pytest.raises(InvalidInputError, match="job_id"):
            client.job_wait("1", timeout=1)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="workflow_id"):
            client.workflow_wait("", timeout=1)
        with pytest.raises(NotFoundError):
            client.workflow_wait("wf_unknown", timeout=1)


def test_a_workflow_survives_its_leader_worker_killed_mid_task(
    any_db: Db,  # noqa: F811
    tmp_path: Path,
) -> None:
    """SIGKILL the worker process (the leader) while a task runs: the next worker
    becomes leader, rescues the task, runs it again, and the rest of the workflow follows;
    each task's body finished exactly once (from the workers' execution records)."""
    wf = Workflow("killed")
    first = wf.add("first", {"sleep": 0.8}, kind="rel_work")
    second = wf.add("second", {}, kind="rel_work", deps=[first])
    wf.add("third", {}, kind="rel_work", deps=[second])
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        info = client.workflow_insert(wf)
        first_id = info.task("first").job.id

        one = spawn_worker(tmp_path, any_db.url, any_db.schema, RB_RESCUE_AFTER="3600")
        try:
            OutputReader(one).wait_for(lambda line: line.startswith("LEADER"), 30)
            wait_until(
                lambda: client.job_get(first_id).state is JobState.RUNNING,
                timeout=30,
                what="the first task started",
            )
            one.send_signal(signal.SIGKILL)
            one.wait(30)
        finally:
            one.kill()
        assert client.workflow_get(wf.id).task("first").state is JobState.RUNNING

        two = spawn_worker(tmp_path, any_db.url, any_db.schema, RB_RESCUE_AFTER="1.5")
        output = OutputReader(two)
        try:
            done = client.workflow_wait(wf.id, timeout=60)
        finally:
            two.send_signal(signal.SIGTERM)
            two.wait(30)
            output.wait_for(lambda line: "stopped" in line, 30)
    assert done.state == "completed"
    assert [t.job.attempt for t in done.tasks] == [2, 1, 1]
    runs = [
        line.split()[0]
        for path in tmp_path.glob("exec.*")
        for line in path.read_text().splitlines()
    ]
    assert sorted(runs) == sorted(str(t.job.id) for t in done.tasks)


def _child_takes_fresh(wf: Workflow, answer: Any) -> None:
    answer.send(wf.take_fresh())


def test_a_forked_copy_of_a_workflow_does_not_skip_the_check() -> None:
    """A child made by fork() shares the Workflow object, freshness included: only the
    process whose constructor made it may skip the check that its id is new."""
    import multiprocessing

    wf = Workflow("forked")
    _step(wf, "only")
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child_takes_fresh, args=(wf, send))
    child.start()
    assert receive.recv() is False
    child.join(30)
    assert child.exitcode == 0
    assert wf.take_fresh() is True
    assert wf.take_fresh() is False


@pytest.mark.parametrize("outcome", ["retry", "snooze"])
def test_a_cancel_asked_for_while_a_task_ran_cancels_its_dependents_at_once(
    any_db: Db,  # noqa: F811
    outcome: str,
) -> None:
    """A task whose cancel was asked for while it ran, its notification missed (only
    ``cancel_attempted_at`` set on its row), then fails or snoozes: River 0.51.2's
    completion writes it cancelled, not retryable or scheduled. Its dependents are
    cancelled by that completion's promotion, so they are when the client's stop
    returns; they waited pending for the next sweep of pending tasks (up to 2 s, or the
    next start of a client), since the outcome sent was not a final one."""
    started = threading.Event()
    gate = threading.Event()
    workers = Workers()

    @workers.register("ends_late")
    def ends_late(job: Job[Any]) -> None:
        started.set()
        gate.wait(30)
        if job.args["outcome"] == "retry":
            raise ValueError("failed once cancelled")
        raise riverboat.JobSnooze(3600)

    @workers.register("step")
    async def step(job: Job[Any]) -> None:
        return None

    wf = Workflow("cancel-asked")
    wf.add("a", {"outcome": outcome}, kind="ends_late")
    _step(wf, "b", ["a"])
    _step(wf, "c", ["b"])

    async def scenario() -> None:
        client = _async_client(any_db, workers)
        await client.start()
        try:
            info = await client.workflow_insert(wf)
            a = info.task("a").job.id
            assert await asyncio.to_thread(started.wait, 30)
            await client.job_update(a, metadata={"cancel_attempted_at": "2026-01-01T00:00:00Z"})
        finally:
            gate.set()
            await client.stop()  # a's outcome written, and its promotion with it
        try:
            done = await client.workflow_get(wf.id)
        finally:
            await client.close()
        states = {task.name: task.state for task in done.tasks}
        assert states == {"a": "cancelled", "b": "cancelled", "c": "cancelled"}

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        ({"node": "1,2;3,4;a;b"}, [3, 4]),  # the name is the rest: it may hold ";"
        ({"node": ";5;root"}, [5]),
        ({"node": "9;;leaf"}, []),
        ({"node": "1;x;y"}, []),  # not a list of ids (written by hand)
        ({"node": "1;2"}, []),  # no name part: not a node
        ({"node": 5}, []),
        ({"node": "1;" + "9" * 19 + ";a"}, []),  # past bigint
        ({"node": ",".join(map(str, range(1, 1001))) + ";7;join"}, [7]),  # past the cache
        ({"task": "a", "dependent_ids": "3,4"}, [3, 4]),  # release 7's keys
        ({"task": "a", "dependent_ids": [3, 4]}, [3, 4]),  # earlier releases' arrays
        ({"task": "a"}, []),
    ],
)
def test_a_tasks_dependents_are_read_from_every_stored_form(
    part: dict[str, object], expected: list[int]
) -> None:
    """The completer reads a task's dependents from its metadata at every start and
    outcome; each stored form gives the same ids, and anything else none."""
    from riverboat.workflow import dependent_ids

    assert list(dependent_ids(part)) == expected
    assert list(dependent_ids(part)) == expected  # cached the second time
    meta = workflow_meta(cast(Any, SimpleNamespace(metadata={"riverboat_workflow": part})))
    assert meta is not None and ids_in(meta.get("dependent_ids", [])) in (expected, None)


def test_a_running_client_follows_a_downgrade_of_the_link_form(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that wrote nodes reads the schema's version again (every
    LINK_FORM_RECHECK seconds, here at each insert): after ``migrate down`` to 7 it
    writes the keys the earlier release reads, not nodes for as long as it runs."""
    import riverboat._client_sync
    from riverboat.drivers.psycopg import PsycopgDriver
    from riverboat.migrations import Migrator
    from riverboat.workflow import WORKFLOW_IDS_TEXT_LINE_VERSION

    monkeypatch.setattr(riverboat._client_sync, "LINK_FORM_RECHECK", 0.0)
    driver = PsycopgDriver(pg_url, schema=pg_schema)
    line = Migrator(driver, "riverboat")
    db = Db("postgres", pg_url, pg_schema)

    def pair(name: str) -> Workflow:
        wf = Workflow(name)
        _step(wf, "a")
        _step(wf, "b", ["a"])
        return wf

    try:
        with _client(db, Recorder()) as client:
            first = client.workflow_insert(pair("at 8")).task("b").job.metadata
            line.down(WORKFLOW_IDS_TEXT_LINE_VERSION)
            second = client.workflow_insert(pair("at 7")).task("b").job.metadata
        assert "node" in first["riverboat_workflow"]
        assert second["riverboat_workflow"]["task"] == "b"
        assert "node" not in second["riverboat_workflow"]
    finally:
        line.up()
        driver.close()


def test_a_workflow_id_that_is_not_text_is_not_listed(any_db: Db) -> None:  # noqa: F811
    """Metadata written by hand may give a workflow id that is a number or an object:
    workflow_get (by text) can't open such a workflow, so the list (and the dashboard's,
    whose links were 404s) leaves it out."""
    wf = Workflow("listed")
    _step(wf, "a")
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        client.workflow_insert(wf)
        for odd in (42, {"k": 1}, ["x"]):
            client.insert(
                {},
                InsertOpts(metadata={"riverboat_workflow": {"id": odd, "task": "t"}}),
                kind="k_odd",
            )
        listed = [s.id for s in client.workflow_list()]
    assert wf.id in listed and not any(i in listed for i in ("42", '{"k": 1}', '["x"]', '{"k":1}'))
