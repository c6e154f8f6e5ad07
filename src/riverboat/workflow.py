"""Workflows: jobs that wait for other jobs (a DAG of tasks), declared without I/O.

A :class:`Workflow` names its tasks; each task is one ordinary River job whose args,
queue and options are its own. A task with dependencies is inserted ``pending`` (a state
River's producers never claim, so Go River workers on the same queues leave it alone) and
becomes ``available`` when every dependency completed. Everything riverboat needs to
know about the graph lives in the job's metadata under one key,
:data:`WORKFLOW_METADATA_KEY`, so River's UI lists the tasks as ordinary jobs::

    {"riverboat_workflow": {
        "id": "wf_...",
        "node": "101,102;104;load",            # dependencies' job ids; dependents'; name
        "on_dep_failure": "run",               # only when not the default, "cancel"
        "dep_outputs": {"extract": {...}},     # at promotion, when any were recorded
        "cancelled_by": "extract"              # set when a failed dependency cancelled it
    }}

A task without dependencies, and one no other task depends on (it finishes last, so the
cleaner deletes it last), also carries the workflow's ``"name"``. Nothing else is
stored: every key and value is an entry in River's GIN index on ``metadata`` at each of
the row's writes (insert, promotion, claim, completion), so a dependency's name is read
from its own row's task name and defaults are left out. For the same reason a task's
dependencies, dependents and name are one string on Postgres, its ``"node"``: the
dependencies' job ids (comma-separated), ``;``, the dependents' job ids, ``;``, the task's
name (which may hold ``;`` itself: it is the rest). As separate keys (``"task"``,
``"dep_ids"``, ``"dependent_ids"``) they were four more index entries per write, about
a tenth of a 1,000-task fan-out/fan-in's time (docs/workflows.md). An id list as a JSON
array would be an index entry per id, and a fan-in's join or a fan-out's root lists
hundreds. SQLite, which has no such index, writes the separate keys, id lists as
arrays. Tasks stored by earlier builds of riverboat have the separate keys on Postgres
too (id lists as arrays, or as one string of comma-separated ids), and some also
``"deps"`` (names), ``"name"`` and ``"on_dep_failure"`` on every task; every form is
read (:func:`workflow_meta` gives each as the separate keys).

Promotion happens in the database, by primary key: the completer of the client that
finalized a task runs one statement that looks at that task's dependents, and every
client's runtime sweeps pending tasks now and then (bounded batches, in id order), which
covers a client that died between writing an outcome and promoting, tasks finished by Go
River workers, and tasks added to a running workflow.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from riverboat._job import FINALIZED_STATES, InsertManyParams, InsertOpts, JobRow, JobState
from riverboat._json import check_text_param, go_json_string
from riverboat.errors import InvalidInputError, NotSupportedError

if TYPE_CHECKING:
    from riverboat._insert import InsertParams

# The public part, which the package exports (riverboat/__init__.py); the metadata key and
# the helpers below are riverboat's own.
__all__ = [
    "OnDepFailure",
    "Workflow",
    "WorkflowInfo",
    "WorkflowSummary",
    "WorkflowTask",
    "WorkflowTaskInfo",
    "dep_outputs",
]

WORKFLOW_METADATA_KEY = "riverboat_workflow"
OnDepFailure = Literal["cancel", "run"]
_POLICIES = ("cancel", "run")
TASK_NAME_MAX = 200
WORKFLOW_TASKS_MAX = 10_000
WORKFLOW_LIST_MAX = 100
# The version of riverboat's migration line from which a workflow's id lists are written
# as text where the dialect does (Postgres): every process that shares the schema reads
# them by then (docs/workflows.md, "Upgrading").
WORKFLOW_IDS_TEXT_LINE_VERSION = 7
# The version from which a task's dependencies, dependents and name are written as its
# one "node" string where the dialect does (Postgres), for the same reason.
WORKFLOW_NODE_LINE_VERSION = 8
# How a dialect writes a task's links at a given line version: "arrays" (SQLite, and
# Postgres before version 7), "text" (id lists as strings, version 7), "node" (version 8).
LinkForm = Literal["arrays", "text", "node"]
NODE_KEY = "node"
_FINALIZED = (JobState.CANCELLED, JobState.COMPLETED, JobState.DISCARDED)


def link_form_at(line_version: int) -> LinkForm:
    """The newest :data:`LinkForm` that every process sharing a schema reads once
    riverboat's migration line is at ``line_version`` (for a dialect that writes the
    compact forms at all)."""
    if line_version >= WORKFLOW_NODE_LINE_VERSION:
        return "node"
    return "text" if line_version >= WORKFLOW_IDS_TEXT_LINE_VERSION else "arrays"


# Workflow.links: the jobs to patch, the dependency ids of each (None: keep) and the
# dependents to append to each.
Links = tuple[list[int], list[list[int] | None], list[list[int]]]


def _new_workflow_id() -> str:
    return "wf_" + secrets.token_hex(12)


def _check_policy(value: object, field_name: str) -> OnDepFailure:
    if value not in _POLICIES:
        raise InvalidInputError(field_name, f"must be 'cancel' or 'run', not {value!r}")
    return value  # type: ignore[return-value]


def _json_ints(ids: Sequence[int], as_text: bool) -> str:
    """Job ids as the JSON a task's metadata lists them in: one string of
    comma-separated ids (``as_text``), or an array (see the module's docstring)."""
    joined = ",".join(map(str, ids))
    return f'"{joined}"' if as_text else f"[{joined}]"


# A stored id and a stored list of ids, as ids_in and the promotion statement
# (postgres_workflow._ids) both read them: up to 18 digits each, so that every one fits
# a bigint. One rule for both, or the sweep would name a task the statement never
# decides, or bind an id past bigint and fail its batch.
ID_TEXT = "[0-9]{1,18}"
ID_LIST_TEXT = f"{ID_TEXT}(?:,{ID_TEXT})*"
# What a non-empty string holds when it is not such a list: a character other than a
# digit or a comma, an empty id (two commas, a comma first or last) or an id of 19
# digits. Postgres tests a fan-out's list of 998 ids against this ten times faster than
# against ID_LIST_TEXT (0.04 ms against 0.42; the promotion statement reads such a list
# at each step).
NOT_ID_LIST_TEXT = "[^0-9,]|,,|^,|,$|[0-9]{19}"
_ID_LIST = re.compile(ID_LIST_TEXT)
_ID_MAX = 10**18 - 1


def check_workflow_job_ids(ids: Sequence[int]) -> None:
    """Refuse job ids a workflow's links can't hold (ID_TEXT: 18 digits at most): a task
    whose dependency had a larger id was inserted and then never decided, its workflow
    stuck for ever (a job id sequence set past 10**18)."""
    if ids and max(ids) > _ID_MAX:
        raise NotSupportedError(
            f"job id {max(ids)} is past {_ID_MAX}, the largest a workflow's task can have "
            "(its links hold 18 digits); the workflow was not inserted"
        )


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _ID_MAX


def ids_in(value: object) -> list[int] | None:
    """The job ids a task's ``dep_ids`` or ``dependent_ids`` lists, in either stored
    form (``"1,2"`` or ``[1, 2]``); None when it is neither (another client wrote it)."""
    if isinstance(value, str):
        if not value:
            return []
        if not _ID_LIST.fullmatch(value):
            return None
        return [int(i) for i in value.split(",")]
    if isinstance(value, list) and all(_is_id(i) for i in value):
        return value
    return None


@dataclass(slots=True, frozen=True)
class WorkflowTask:
    """A task of a :class:`Workflow`: what :meth:`Workflow.add` returns, to name it as
    another task's dependency."""

    name: str
    args: object
    opts: InsertOpts | None
    kind: str | None
    deps: tuple[str, ...]
    on_dep_failure: OnDepFailure | None


class Workflow:
    """A graph of tasks inserted together (``client.workflow_insert(wf)``).

    ``on_dep_failure`` decides what happens to a task whose dependency ends ``discarded``
    or ``cancelled``: ``"cancel"`` (the default) cancels it, and so on down the graph;
    ``"run"`` runs it once every dependency is finalized, whatever its outcome. A task
    can override it. A dependency that is only retrying holds its dependents back.

    To add tasks to a workflow already inserted, build ``Workflow(id=<its id>)`` with the
    new tasks and insert it: ``deps`` may then also name tasks inserted before.
    """

    def __init__(
        self,
        name: str = "workflow",
        *,
        id: str | None = None,
        on_dep_failure: OnDepFailure = "cancel",
    ) -> None:
        if not isinstance(name, str) or not 0 < len(name) <= TASK_NAME_MAX:
            raise InvalidInputError("name", f"must be a str of 1 to {TASK_NAME_MAX} characters")
        if id is not None and (not isinstance(id, str) or not 0 < len(id) <= 100):
            raise InvalidInputError("id", "must be a str of 1 to 100 characters")
        self.name = check_text_param(name, "name")
        self.id = check_text_param(id, "id") if id is not None else _new_workflow_id()
        self.adding = id is not None
        self.on_dep_failure = _check_policy(on_dep_failure, "on_dep_failure")
        self._tasks: dict[str, WorkflowTask] = {}
        if not self.adding:
            self._fresh = os.getpid()

    # Not fresh: a Workflow copied, unpickled, or handed to an insert before (0); else
    # the id of the process whose constructor made it (a fork's child shares the object).
    _fresh = 0

    def __getstate__(self) -> dict[str, Any]:
        # A copy (copy.copy, deepcopy, pickle) may be inserted beside the original, so
        # neither may skip the database's check that its id is new: the original loses
        # its freshness here too.
        self.__dict__.pop("_fresh", None)
        return dict(self.__dict__)

    def take_fresh(self) -> bool:
        """True once, on the first insert of a Workflow the constructor made with a new
        random id (not a copy): no row can hold that id yet, and the insert skips the
        database's check that it is new (a GIN index search that read every entry
        added since the index was last cleaned up, 8 to 15 ms for a 1,000-task
        fan-out). Any later insert of the same object (a retry after an error that did
        not say whether the first committed) checks. One atomic dict operation, so
        two threads or tasks inserting one object at once can't both skip it; nor can
        a child process that got it by fork(), its process id not the maker's."""
        return bool(self.__dict__.pop("_fresh", 0) == os.getpid())

    @property
    def tasks(self) -> list[WorkflowTask]:
        return list(self._tasks.values())

    def add(
        self,
        name: str,
        args: object,
        opts: InsertOpts | None = None,
        *,
        kind: str | None = None,
        deps: Sequence[str | WorkflowTask] = (),
        on_dep_failure: OnDepFailure | None = None,
    ) -> WorkflowTask:
        """Add task ``name`` that runs ``args`` (like ``client.insert(args, opts)``)
        after every task in ``deps`` completed."""
        if not isinstance(name, str) or not 0 < len(name) <= TASK_NAME_MAX:
            raise InvalidInputError("name", f"must be a str of 1 to {TASK_NAME_MAX} characters")
        if name in self._tasks:
            raise InvalidInputError("name", f"task {name!r} is already in the workflow")
        check_text_param(name, "name")
        if isinstance(deps, (str, WorkflowTask)):
            deps = [deps]
        elif not isinstance(deps, Iterable):
            raise InvalidInputError(
                "deps", f"must be a list of tasks (str or WorkflowTask), not {deps!r}"
            )
        dep_names: dict[str, None] = {}  # in order, once each (a fan-in names hundreds)
        for dep in deps:
            dep_name = dep.name if isinstance(dep, WorkflowTask) else dep
            if not isinstance(dep_name, str):
                raise InvalidInputError("deps", "must name tasks (str or WorkflowTask)")
            if dep_name == name:
                raise InvalidInputError("deps", f"task {name!r} cannot depend on itself")
            if dep_name not in self._tasks:
                if not self.adding:
                    raise InvalidInputError(
                        "deps", f"task {name!r} depends on {dep_name!r}, which is not added yet"
                    )
                check_text_param(dep_name, "deps")
            dep_names[dep_name] = None
        if opts is not None and opts.unique_opts is not None and not opts.unique_opts.is_empty():
            raise InvalidInputError("opts", "workflow tasks cannot be unique jobs")
        if opts is not None and opts.pending:
            raise InvalidInputError("opts", "a workflow decides when its tasks are pending")
        if len(self._tasks) >= WORKFLOW_TASKS_MAX:
            raise InvalidInputError("tasks", f"a workflow takes at most {WORKFLOW_TASKS_MAX}")
        policy = None if on_dep_failure is None else _check_policy(on_dep_failure, "on_dep_failure")
        task = WorkflowTask(name, args, opts, kind, tuple(dep_names), policy)
        self._tasks[name] = task
        return task

    def task_params(self) -> list[InsertManyParams]:
        """Each task as an insert of its own args and options, in the order added: what
        the client resolves and validates as ``insert_many`` does, before
        :func:`add_workflow_metadata` gives the resolved jobs their workflow part."""
        if not self._tasks:
            raise InvalidInputError("workflow", "has no tasks")
        out = []
        for task in self._tasks.values():
            opts = task.opts
            if opts is not None and opts.metadata and WORKFLOW_METADATA_KEY in opts.metadata:
                raise InvalidInputError(
                    "opts", f"metadata key {WORKFLOW_METADATA_KEY!r} is riverboat's own"
                )
            out.append(InsertManyParams(task.args, opts, kind=task.kind))
        return out

    def blame_task(self, exc: InvalidInputError) -> InvalidInputError:
        """``exc``, raised while resolving :meth:`task_params` as ``insert_many`` params
        (``params[3].kind: ...``), naming the task instead (``tasks['load'].kind: ...``):
        the caller added tasks, not params. Anything else is returned as it is."""
        head, _, rest = exc.field.partition("].")
        if not (head.startswith("params[") and head[7:].isdigit() and rest):
            return exc
        index = int(head[7:])
        if index >= len(self._tasks):
            return exc
        name = list(self._tasks)[index]
        return type(exc)(f"tasks[{name!r}].{rest}", str(exc).split(": ", 1)[-1])

    def check_deps(self, existing: Iterable[str]) -> None:
        """Refuse a task that depends on a name neither in this Workflow nor among
        ``existing`` (the stored tasks' names, when adding), before anything is written:
        on SQLite the ids are known only after the insert, and a refusal from
        :meth:`links` then came after the rows were in the caller's transaction
        (``workflow_insert_tx``), pending for good if it committed."""
        known = set(existing) | self._tasks.keys()
        for task in self._tasks.values():
            for dep in task.deps:
                if dep not in known:
                    raise InvalidInputError(
                        "deps", f"task {task.name!r} depends on {dep!r}, which is not in workflow"
                    )

    def links(self, new_ids: Sequence[int], existing: Mapping[str, int]) -> Links:
        """After insert: for every job to patch, ``(ids, dep_ids, dependent_ids to
        append)``. ``new_ids`` are the inserted tasks' ids in order; ``existing`` maps the
        names of tasks inserted earlier (when adding) to their ids."""
        by_name = dict(existing)
        for task, job_id in zip(self._tasks.values(), new_ids, strict=True):
            by_name[task.name] = job_id
        dep_ids: dict[int, list[int]] = {}
        dependents: dict[int, list[int]] = {}
        for task, job_id in zip(self._tasks.values(), new_ids, strict=True):
            ids = []
            for dep in task.deps:
                if dep not in by_name:
                    raise InvalidInputError(
                        "deps", f"task {task.name!r} depends on {dep!r}, which is not in workflow"
                    )
                ids.append(by_name[dep])
                dependents.setdefault(by_name[dep], []).append(job_id)
            if ids:
                dep_ids[job_id] = ids
        targets = sorted(dep_ids.keys() | dependents.keys())
        return (
            targets,
            [dep_ids.get(t) for t in targets],
            [dependents.get(t, []) for t in targets],
        )

    def check_acyclic(self) -> None:
        """Refuse a cycle (only possible when adding tasks that name each other)."""
        if not self.adding:
            return  # each task's dependencies were added before it
        # Depth-first with a stack of its own: a chain of 10,000 tasks (the limit) was a
        # RecursionError with a recursive visit.
        done: set[str] = set()
        for root in self._tasks:
            if root in done:
                continue
            path: list[str] = [root]
            on_path = {root}
            pending: list[Iterator[str]] = [iter(self._tasks[root].deps)]
            while pending:
                dep = next(pending[-1], None)
                if dep is None:
                    done.add(path[-1])
                    on_path.discard(path.pop())
                    pending.pop()
                elif dep in on_path:
                    raise InvalidInputError("deps", "cycle: " + " -> ".join((*path, dep)))
                elif dep in self._tasks and dep not in done:
                    path.append(dep)
                    on_path.add(dep)
                    pending.append(iter(self._tasks[dep].deps))


def add_workflow_metadata(
    workflow: Workflow,
    jobs: Sequence[InsertParams],
    ids: Sequence[int] | None = None,
    links: Links | None = None,
    name: str | None = None,
    form: LinkForm = "arrays",
) -> None:
    """Give the resolved ``jobs`` of ``workflow`` (one per task, in order:
    :meth:`Workflow.task_params`) their workflow metadata under
    :data:`WORKFLOW_METADATA_KEY`, after the task's own, and make a task with
    dependencies ``pending``. With ``ids`` (the tasks' job ids, given before the insert)
    and their ``links`` (:meth:`Workflow.links` of those ids) the metadata names every
    dependency and new dependent by id already; without, the ids are written once the
    rows exist. ``name``: the stored workflow's name, for tasks added to it (a
    ``Workflow(id=...)`` carries a name of its own, not the stored one).
    ``form``: how the links are written (:data:`LinkForm`, the dialect's
    ``workflow_link_form`` at the schema's version; see the module's docstring). The
    ``"node"`` form needs ``ids``: without, the separate keys with id lists as text.

    The JSON is written here from pieces encoded once per workflow (the names were
    checked when added, the ids are the database's), not encoded and checked as a
    document per task: a fan-in's metadata lists hundreds of ids and names."""
    ids_as_text = form != "arrays"
    node = form == "node" and ids is not None
    dep_ids: dict[int, str] = {}
    dependents: dict[int, str] = {}
    if ids is not None:
        if links is None:
            raise ValueError("add_workflow_metadata: ids given without their links")
        targets, deps, more = links
        for target, target_deps, target_more in zip(targets, deps, more, strict=True):
            if target_deps is not None:
                dep_ids[target] = _json_ints(target_deps, ids_as_text)
            dependents[target] = _json_ints(target_more, ids_as_text)
    none = _json_ints((), ids_as_text)
    # Only what promotion and listing need, and nothing a default says: each key and
    # value is an entry in River's GIN index on metadata at every write of the row
    # (insert, promotion, claim, completion). A dependency's name is its row's "task";
    # the workflow's name is kept on the tasks without dependencies (a workflow's entry
    # points) and on those nothing depends on (they finish last, so the cleaner deletes
    # them last); the policy only when it is "run"; the id lists only when not empty.
    head = f'{{"id":{go_json_string(workflow.id)},' + ('"node":' if node else '"task":')
    named = f',"name":{go_json_string(workflow.name if name is None else name)}'
    # What add() checks in the options given to it, here again as resolved: the args'
    # own insert_opts() and insert hooks can make a job unique or pending too. A task
    # deduplicated into another job would leave its dependents waiting on an id no row
    # has (a dependency whose row is gone counts as completed); a pending one without
    # dependencies would never start.
    for task, job in zip(workflow.tasks, jobs, strict=True):
        if job.unique_key is not None:
            raise InvalidInputError(
                "tasks", f"task {task.name!r}: workflow tasks cannot be unique jobs"
            )
        if job.state is JobState.PENDING:
            raise InvalidInputError(
                "tasks", f"task {task.name!r}: a workflow decides when its tasks are pending"
            )
    depended_on = {dep for task in workflow.tasks for dep in task.deps}
    for position, (task, job) in enumerate(zip(workflow.tasks, jobs, strict=True)):
        job_id = ids[position] if ids is not None else None
        waiting = dependents.get(job_id, none) if job_id is not None else none
        if node and job_id is not None:
            # The id lists as encoded above are JSON strings of digits and commas: their
            # quotes are dropped, and the three parts encoded as one string.
            deps_text = dep_ids.get(job_id, none) if task.deps else none
            pieces = [head, go_json_string(f"{deps_text[1:-1]};{waiting[1:-1]};{task.name}")]
        else:
            pieces = [head, go_json_string(task.name)]
        if not task.deps or task.name not in depended_on:
            pieces.append(named)
        if not node:
            if task.deps and job_id is not None:
                pieces += (',"dep_ids":', dep_ids.get(job_id, none))
            if waiting != none:
                pieces += (',"dependent_ids":', waiting)
        if (task.on_dep_failure or workflow.on_dep_failure) == "run":
            pieces.append(',"on_dep_failure":"run"')
        pieces.append("}")
        part = "".join(pieces)
        own = job.encoded_metadata
        sep = "" if own == "{}" else ","
        job.encoded_metadata = f'{own[:-1]}{sep}"{WORKFLOW_METADATA_KEY}":{part}}}'
        if task.deps:
            job.state = JobState.PENDING


def workflow_meta(job: JobRow) -> dict[str, Any] | None:
    """The workflow part of a job's metadata, or None for a job outside any workflow.
    A ``"node"`` is given as the separate keys (``task``, ``dep_ids``, ``dependent_ids``)
    in a new dict; a malformed one (not ``ids;ids;name``, another client wrote it) as
    none of them."""
    meta = job.metadata.get(WORKFLOW_METADATA_KEY) if isinstance(job.metadata, dict) else None
    if not isinstance(meta, dict):
        return None
    if NODE_KEY not in meta:
        return meta
    expanded = {key: value for key, value in meta.items() if key != NODE_KEY}
    if (parts := node_parts(meta[NODE_KEY])) is not None:
        expanded["dep_ids"], expanded["dependent_ids"], expanded["task"] = parts
    return expanded


def node_parts(node: object) -> tuple[str, str, str] | None:
    """A task's ``"node"`` as its dependencies' ids, its dependents' ids (each a string
    as :func:`ids_in` reads it) and its name; None when it is not such a string."""
    if not isinstance(node, str):
        return None
    parts = node.split(";", 2)
    if len(parts) != 3:
        return None
    return parts[0], parts[1], parts[2]


def cancelled_by_dependency(job: JobRow) -> object | None:
    """The dependency that cancelled workflow task ``job`` by failing (its stored
    ``cancelled_by``), or None when ``job`` is not a task so cancelled: a task a retry
    cancelled again at once, its dependency still failed."""
    meta = workflow_meta(job)
    if job.state is not JobState.CANCELLED or not meta:
        return None
    return meta.get("cancelled_by") or None


def orphaned_dependents(deleted: Iterable[JobRow]) -> list[tuple[int, str]]:
    """``(dependent's job id, the deleted task's name)`` for every dependent of the
    workflow tasks in ``deleted`` (rows just deleted) that had not finished. A
    dependency whose row is gone counts as completed (the cleaner deletes finished ones),
    so these are decided when their dependency is deleted, as for a cancelled one:
    dialect ``workflow_cancel_orphans``."""
    orphans: list[tuple[int, str]] = []
    for job in deleted:
        meta = workflow_meta(job)
        if meta is None or job.state in FINALIZED_STATES:
            continue
        name = meta.get("task")
        orphans += [
            (dependent, name if isinstance(name, str) else "") for dependent in dependent_ids(meta)
        ]
    return orphans


def dependent_ids(meta: object) -> Sequence[int]:
    """The job ids of the tasks waiting on a task, from the workflow part of its
    metadata (:func:`workflow_meta`); none from a malformed one (another client wrote
    the row)."""
    if not isinstance(meta, dict):
        return ()
    value = meta.get("dependent_ids")
    if value is None and isinstance(node := meta.get(NODE_KEY), str):
        if len(node) <= _CACHED_NODE_MAX:
            return _dependents_in_node(node)
        parts = node_parts(node)
        value = parts[1] if parts is not None else None
    if isinstance(value, list):
        # The ids among what another client wrote: orphans and running counts use them.
        return [i for i in value if _is_id(i)]
    if isinstance(value, str) and len(value) <= _CACHED_IDS_TEXT_MAX:
        return _ids_in_text(value)
    return ids_in(value) or ()


# The longest stored list of ids parsed once and kept (a few dozen ids; 256 are kept).
_CACHED_IDS_TEXT_MAX = 400


# The longest node whose dependents are parsed once and kept: a fan-out's leaves (a few
# ids and a name) each have one of their own, and the completer asks for a task's
# dependents when it starts, is buffered and is written.
_CACHED_NODE_MAX = 400


@functools.lru_cache(maxsize=4096)
def _dependents_in_node(node: str) -> tuple[int, ...]:
    # The dependents' list through the cache of lists: a fan-out's leaves all name the
    # same join.
    parts = node_parts(node)
    return _ids_in_text(parts[1]) if parts is not None else ()


@functools.lru_cache(maxsize=256)
def _ids_in_text(value: str) -> tuple[int, ...]:
    """:func:`ids_in` of one stored string, parsed once: the completer reads a task's
    dependents when it starts, ends and is written, and a fan-in's leaves all name the
    same join."""
    return tuple(ids_in(value) or ())


@dataclass(slots=True, frozen=True)
class WorkflowTaskInfo:
    """One task of a stored workflow, as :meth:`Client.workflow_get` reads it."""

    name: str
    job: JobRow
    deps: list[str]
    on_dep_failure: str
    cancelled_by: str | None

    @property
    def state(self) -> JobState:
        return self.job.state

    @property
    def output(self) -> Any:
        return self.job.metadata.get("output")


@dataclass(slots=True, frozen=True)
class WorkflowInfo:
    """A stored workflow: its tasks in insertion order, and a summary state."""

    id: str
    name: str
    tasks: list[WorkflowTaskInfo] = field(default_factory=list)

    @property
    def finalized(self) -> bool:
        return all(t.state in _FINALIZED for t in self.tasks)

    @property
    def state(self) -> str:
        """``completed`` when every task completed; ``failed`` when all are finalized and
        one is not completed; ``running`` otherwise."""
        if not self.finalized:
            return "running"
        if all(t.state is JobState.COMPLETED for t in self.tasks):
            return "completed"
        return "failed"

    def task(self, name: str) -> WorkflowTaskInfo:
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(name)

    @classmethod
    def linked(
        cls,
        workflow: Workflow,
        jobs: Sequence[JobRow],
        ids: Sequence[int],
        dep_ids: Sequence[Sequence[int] | None],
        dependents: Sequence[Sequence[int]],
    ) -> WorkflowInfo:
        """The new ``workflow`` whose tasks are the freshly inserted ``jobs`` (in task
        order) once ``workflow_link(ids, dep_ids, dependents)`` ran: the links written
        into their metadata here as the statement wrote them in the table, so the
        insert needs no read-back. Names, dependencies and policies come from
        ``workflow`` itself, not parsed back out of the metadata just written (a
        fan-in's join lists its hundreds of dependencies there by id)."""
        by_id = {job.id: job for job in jobs}
        for job_id, deps, more in zip(ids, dep_ids, dependents, strict=True):
            job = by_id.get(job_id)
            meta = workflow_meta(job) if job is not None else None
            if meta is None:
                continue
            if deps is not None:
                meta["dep_ids"] = list(deps)
            meta["dependent_ids"] = [*(ids_in(meta.get("dependent_ids")) or []), *more]
        default = workflow.on_dep_failure
        tasks = [
            WorkflowTaskInfo(task.name, job, list(task.deps), task.on_dep_failure or default, None)
            for task, job in zip(workflow.tasks, jobs, strict=True)
        ]
        return cls(workflow.id, workflow.name, tasks)

    @classmethod
    def from_jobs(cls, workflow_id: str, jobs: Sequence[JobRow]) -> WorkflowInfo:
        """Reads both stored forms: a dependency's name from its own row's ``task``
        (this release) or from ``deps`` (the previous one's); a dependency whose row is
        gone (the cleaner) is named by its job id."""
        metas: list[tuple[JobRow, dict[str, Any]]] = []
        for job in sorted(jobs, key=lambda j: j.id):
            meta = workflow_meta(job)
            if meta is not None and meta.get("id") == workflow_id:
                metas.append((job, meta))
        task_names = {job.id: str(meta.get("task", "")) for job, meta in metas}
        name = next((str(m["name"]) for _, m in metas if m.get("name")), "")
        tasks = []
        for job, meta in metas:
            deps = meta.get("deps")
            if not isinstance(deps, list):
                deps = [task_names.get(d, str(d)) for d in ids_in(meta.get("dep_ids")) or []]
            tasks.append(
                WorkflowTaskInfo(
                    task_names[job.id],
                    job,
                    [str(d) for d in deps],
                    str(meta.get("on_dep_failure", "cancel")),
                    meta.get("cancelled_by"),
                )
            )
        return cls(workflow_id, name, tasks)


@dataclass(slots=True, frozen=True)
class WorkflowSummary:
    """One workflow as :meth:`~riverboat.AsyncClient.workflow_list` lists it: counts
    over all its tasks, without their rows."""

    id: str
    name: str
    tasks: int
    completed: int
    failed: int  # cancelled or discarded
    unfinished: int
    created_at: datetime | None  # its first task's

    @property
    def state(self) -> str:
        """As :attr:`WorkflowInfo.state`: ``running`` while a task is unfinished, then
        ``completed`` when every task completed, else ``failed``."""
        if self.unfinished:
            return "running"
        return "completed" if self.completed == self.tasks else "failed"


def check_workflow_id(workflow_id: object) -> str:
    if not isinstance(workflow_id, str) or not 0 < len(workflow_id) <= 100:
        raise InvalidInputError("workflow_id", "must be a str of 1 to 100 characters")
    return check_text_param(workflow_id, "workflow_id")


def is_finalized(job: JobRow) -> bool:
    return job.state in _FINALIZED or job.finalized_at is not None


def dep_outputs(job: Any) -> dict[str, Any]:
    """The outputs (``record_output``) of a task's dependencies, by task name: what a
    work function reads as ``dep_outputs(job)``. Dependencies that recorded nothing are
    absent; a job outside any workflow has none."""
    metadata = getattr(job, "metadata", None)
    meta = metadata.get(WORKFLOW_METADATA_KEY) if isinstance(metadata, dict) else None
    outputs = meta.get("dep_outputs") if isinstance(meta, dict) else None
    return dict(outputs) if isinstance(outputs, dict) else {}
