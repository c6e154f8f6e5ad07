"""The workflow operations every dialect provides (see :mod:`riverboat.workflow`)."""

from __future__ import annotations

import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from riverboat._sql import Statement
from riverboat.dialect._part import DialectPart
from riverboat.workflow import ids_in

# workflow_list finds workflows among this many newest workflow tasks. Written into the
# statement's text, not bound: a bound LIMIT left Postgres planning for an unknown one,
# and it read every workflow task through the GIN index (230 ms for 200,000 of them,
# against 50 ms along the primary key).
WORKFLOW_LIST_WINDOW = 10_000

__all__ = [
    "Patch",
    "PendingTask",
    "PromoteClaim",
    "PromoteStep",
    "WorkflowStatements",
    "workflow_retry_sql",
]

# One task's links for workflow_link: its id, its dependency ids (None: keep them) and
# the dependents to append.
Patch = tuple[int, Sequence[int] | None, Sequence[int]]


class PendingTask(NamedTuple):
    """A pending workflow task as the sweep reads it."""

    id: int
    dep_ids: tuple[int, ...]
    runs_after_failure: bool  # its policy is "run": a failed dependency does not cancel it


class PromoteClaim(NamedTuple):
    """What a promotion step that claims is given (a producer's offer, see
    runtime/workflow_promoter.py): the tasks it makes ready in ``queue`` go straight to
    running for ``client_id``, at most ``max_to_lock``, as the producer's own claim would
    take them (due by ``now``, the database's clock when None; of ``kinds`` only when
    given)."""

    queue: str
    max_to_lock: int
    client_id: str
    now: datetime | None = None
    kinds: Sequence[str] | None = None


class PromoteStep(NamedTuple):
    """Where one step of the runtime's promotion starts, how many candidates it decides,
    the dependents it may leave out (see WorkflowStatements.workflow_promote_step), and
    the claim it may make (dialects with ``promotion_claims``)."""

    after_id: int
    limit: int
    skip_ids: list[int]
    claim: PromoteClaim | None = None


def workflow_retry_sql(
    *,
    retried_state: str,
    retried_metadata: str,
    now: str,
    in_workflow: str,
    columns: str,
) -> str:
    """Retry a workflow's discarded and cancelled tasks: those without dependencies
    become available, the others pending (the client then promotes those whose
    dependencies are all completed), so the tasks a failure cancelled wait for it again.
    An exhausted task gets one more attempt; one at River's last (32767, a smallint)
    stays as it is. Each dialect brings its own spelling of the state, the metadata
    clean-up, now, the workflow filter and the columns."""
    return f"""
UPDATE <schema>river_job
SET state = {retried_state},
    max_attempts = CASE WHEN river_job.attempt >= river_job.max_attempts
                        THEN river_job.attempt + 1 ELSE river_job.max_attempts END,
    finalized_at = NULL,
    scheduled_at = {now},
    metadata = {retried_metadata}
WHERE {in_workflow}
  AND state IN ('cancelled', 'discarded')
  -- As job_retry: a task at River's last attempt (smallint) stays as it is.
  AND attempt < 32767
RETURNING {columns}
"""


def _ids_from_json_text(text: str | None) -> tuple[int, ...] | None:
    """``"1,2"`` or ``[1, 2]`` (see :func:`riverboat.workflow.ids_in`, whose rule this
    keeps) as ``(1, 2)``, read without a JSON parser on the way riverboat writes them
    (the sweep reads thousands per batch); anything else through one."""
    if not text:
        return ()
    value: object = None
    if text[0] == '"' and "\\" not in text:
        value = text[1:-1]  # a string's content, without escapes to undo
    elif text[0] == "[":
        with contextlib.suppress(ValueError):
            value = [int(i) for i in text[1:-1].split(",")]
    if value is None:
        try:
            value = json.loads(text)
        except ValueError:
            return None
    ids = ids_in(value)
    return None if ids is None else tuple(ids)


class WorkflowStatements(DialectPart, ABC):
    """Statements for workflows; :class:`~riverboat.dialect.base.Dialect` inherits them."""

    #: Whether waiters in other processes hear of finalized jobs by notification
    #: (:mod:`riverboat.wait`); without it they poll.
    waits_notified: bool = False
    #: Whether job_delete and job_delete_many cancel the dependents of the workflow
    #: tasks they delete unfinished themselves (Postgres, in the same statement); else
    #: :meth:`workflow_cancel_orphans` follows them in their transaction (SQLite).
    delete_cancels_orphans: bool = False
    #: Whether a task's id lists may be written as one string of comma-separated ids
    #: (Postgres: River's GIN index on metadata holds an entry per array element), once
    #: riverboat's migration line is at WORKFLOW_IDS_TEXT_LINE_VERSION; otherwise, and
    #: before, JSON arrays. Both are read (riverboat.workflow).
    workflow_ids_as_text: bool = False
    #: Whether a step of the runtime's promotion can also claim the tasks it makes
    #: ready, for a producer of the client that promotes (see
    #: :meth:`workflow_promote_step`'s ``claim``).
    promotion_claims: bool = False

    def workflow_link(
        self,
        ids: Sequence[int],
        dep_ids: Sequence[Sequence[int] | None],
        dependents: Sequence[Sequence[int]],
        *,
        as_text: bool = False,
    ) -> Statement:
        """Write each task's dependency ids (None: keep) and append dependents, the
        lists as text when ``as_text`` (where the dialect writes text at all)."""
        return self.workflow_link_patches(
            list(zip(ids, dep_ids, dependents, strict=True)), as_text=as_text
        )

    @abstractmethod
    def workflow_link_patches(self, patches: list[Patch], *, as_text: bool = False) -> Statement:
        """:meth:`workflow_link`'s statement from ``(id, dep_ids, dependents)`` each."""

    def workflow_reserve_ids(self, count: int) -> Statement | None:
        """``count`` new job ids, taken before a workflow's insert so that each task's
        metadata names its dependencies and dependents as it is written (no second
        write to link them). None where the insert assigns ids and the links are
        written after it (:meth:`workflow_link`)."""
        return None

    def workflow_lock(self, workflow_id: str) -> Statement | None:
        """Serialize the transactions that add tasks to ``workflow_id``, to the end of
        this transaction: each then reads the tasks the one before it added, and two
        can't both add a task of the same name. Run it as a statement of its own before
        the read (a statement's snapshot is taken before it waits for the lock). None
        where transactions that write run one at a time anyway (SQLite)."""
        return None

    def workflow_promote(
        self, finalized_ids: Sequence[int], candidate_ids: Sequence[int] = ()
    ) -> Statement:
        """Promote (or cancel, by policy) the pending dependents of ``finalized_ids``
        and the pending ``candidate_ids``; rows are ``(id, state, queue)``."""
        return self.workflow_promote_ids(list(finalized_ids), list(candidate_ids))

    def workflow_promote_step(
        self,
        finalized_ids: Sequence[int],
        candidate_ids: Sequence[int],
        after_id: int,
        limit: int,
        skip_ids: Sequence[int] = (),
        claim: PromoteClaim | None = None,
    ) -> Statement:
        """The runtime's promotion, one step of it: as :meth:`workflow_promote`, over
        at most ``limit`` of the candidates (dependents and named ones) whose ids are
        above ``after_id``, in id order, where the dialect can bound it; and a statement
        of its own that may commit without waiting for the disk (a promotion can be
        recomputed from outcomes already durable). :meth:`decode_promoted_step` reads
        its rows and says where the next step starts. ``skip_ids``: dependents the
        caller knows can't be decided yet (another of their dependencies still runs),
        which the dialect may leave out rather than look at. ``claim``: where the
        dialect has ``promotion_claims``, the tasks it makes ready that the claim can
        take go straight to running (:meth:`decode_promotion_claims` reads their rows).
        Default: every candidate at once, none skipped, nothing claimed."""
        step = PromoteStep(after_id, limit, list(skip_ids), claim)
        return self.workflow_promote_ids(list(finalized_ids), list(candidate_ids), step)

    def decode_promoted_step(
        self, rows: Sequence[Sequence[Any]], limit: int
    ) -> tuple[list[tuple[int, str, str]], int | None]:
        """Rows of :meth:`workflow_promote_step` with that ``limit``: what it changed,
        as ``(id, state, queue)``, and the ``after_id`` of the next step (None: this
        one looked at the last candidates)."""
        return self.decode_promoted(rows), None

    def decode_promotion_locked_elsewhere(self, rows: Sequence[Sequence[Any]]) -> list[int]:
        """The tasks a :meth:`workflow_promote_step` decided but could not change because
        another session held their rows locked (none where writers take turns)."""
        return []

    def decode_promotion_claims(self, rows: Sequence[Sequence[Any]]) -> list[Sequence[Any]]:
        """The rows of the tasks a :meth:`workflow_promote_step` with a claim took, as
        the producer's claim returns them (undecoded: the producer decodes them)."""
        return []

    def workflow_step_candidates(
        self, finalized_ids: Sequence[int], candidate_ids: Sequence[int], step: PromoteStep
    ) -> Statement:
        """The ids, one per row, of the candidates the :meth:`workflow_promote_step` of
        ``step`` looks at (pending or not: it decides only pending ones)."""
        params = self.promote_params(finalized_ids, candidate_ids, step.skip_ids)
        return self.stmt(
            "workflow_step_candidates", **params, after_id=step.after_id, limit=step.limit
        )

    def promote_params(
        self,
        finalized_ids: Sequence[int],
        candidate_ids: Sequence[int],
        skip_ids: Sequence[int] = (),
    ) -> dict[str, Any]:
        """The finalized, candidate and skipped ids as the promote statements bind them."""
        ids = self.id_list_param
        return {
            "finalized_ids": ids(finalized_ids),
            "candidate_ids": ids(candidate_ids),
            "skip_ids": ids(skip_ids),
        }

    @abstractmethod
    def id_list_param(self, ids: Sequence[int]) -> Any:
        """Job ids as the dialect's statements bind a list of them."""

    def workflow_task_refused(self, job_id: int, error: str) -> Statement:
        """Discard pending task ``job_id``, ``error`` (an error entry's JSON) appended to
        its errors with its attempt: the database refused the statements that would
        decide it (see WorkflowPromoter); rows as :meth:`workflow_promote`'s."""
        return self.stmt("workflow_task_refused", id=job_id, error=error)

    @abstractmethod
    def workflow_promote_ids(
        self, finalized_ids: list[int], candidate_ids: list[int], step: PromoteStep | None = None
    ) -> Statement:
        """:meth:`workflow_promote`'s statement, or with ``step``
        :meth:`workflow_promote_step`'s (a dialect that can't bound it ignores it)."""

    def workflow_cancel_orphans(self, orphans: Sequence[tuple[int, str]]) -> Statement:
        """Cancel, as a failed dependency would, the pending ``(task id, the deleted
        dependency's name)`` of ``orphans`` whose policy is ``cancel``; see
        :func:`riverboat.workflow.orphaned_dependents`."""
        raise NotImplementedError(f"{type(self).__name__} cancels them in its deletes")

    def workflow_pending_tasks(self, after_id: int, max: int) -> Statement:
        """Up to ``max`` pending workflow tasks after ``after_id``, in id order, as
        :meth:`decode_pending_tasks` reads them."""
        return self.stmt("workflow_pending_tasks", after_id=after_id, max=max)

    def decode_pending_tasks(self, rows: Sequence[Sequence[Any]]) -> list[PendingTask]:
        """Rows of :meth:`workflow_pending_tasks`: ``(id, dep_ids as JSON text, policy)``.
        A task whose ``dep_ids`` is not a list of ids is left out (nothing can decide it)."""
        out = []
        for task_id, text, policy in rows:
            ids = _ids_from_json_text(text)
            if ids is not None:
                out.append(PendingTask(int(task_id), ids, policy == "run"))
        return out

    @abstractmethod
    def workflow_dep_states(self, ids: Sequence[int]) -> Statement:
        """``(id, state)`` of each of the jobs ``ids`` that exists."""

    def workflow_get(self, workflow_id: str, max: int, min_id: int = 0) -> Statement:
        """A workflow's task rows (full job rows), by id. ``min_id``: no task of the
        workflow has a smaller job id, as on a later read of a workflow read before (a
        task added to it takes a new id, larger than those of the tasks it joins); a
        dialect without an index for the lookup then reads only the rows from there."""
        return self.stmt("workflow_get", workflow_id=workflow_id, max=max, min_id=min_id)

    def workflow_list(self, max: int) -> Statement:
        """The ``max`` workflows with the newest tasks, newest first, among the newest
        WORKFLOW_LIST_WINDOW workflow tasks: per workflow its id, name, task count,
        completed, failed (cancelled or discarded) and unfinished counts over all its
        tasks, and its first task's ``created_at``."""
        return self.stmt("workflow_list", max=max)

    def workflow_unfinished(self, workflow_id: str, min_id: int = 0) -> Statement:
        """One row (an id) when a task of the workflow is not finalized, none when every
        task is: what a waiter checks at each wake-up instead of reading every task.
        ``min_id`` as for :meth:`workflow_get`."""
        return self.stmt("workflow_unfinished", workflow_id=workflow_id, min_id=min_id)

    def workflow_retry(self, workflow_id: str) -> Statement:
        """Retry discarded and cancelled tasks: available without dependencies,
        pending with (to be promoted)."""
        return self.stmt("workflow_retry", workflow_id=workflow_id)

    @abstractmethod
    def workflow_cancel(self, workflow_id: str, cancel_attempted_at: str) -> Statement:
        """Cancel every unfinished task (running ones as ``job_cancel`` does)."""

    def decode_promoted(self, rows: Sequence[Sequence[Any]]) -> list[tuple[int, str, str]]:
        """Rows of the promote statements as ``(id, state, queue)``."""
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def workflow_cascade(self, promoted: Sequence[Sequence[Any]]) -> Statement | None:
        """The next step of a cancellation cascade after a promote statement whose rows
        are ``promoted``: the dependents of the tasks it cancelled (None: none)."""
        cancelled = [
            job_id for job_id, state, _ in self.decode_promoted(promoted) if state == "cancelled"
        ]
        return self.workflow_promote(cancelled) if cancelled else None

    def job_wait_announce(self, payload: str) -> Statement:
        """Tell every runtime what a waiter waits for (``riverboat_wait``)."""
        raise NotImplementedError(f"{type(self).__name__} does not notify waiters")

    def job_finalized_notify(self, payload: str) -> Statement | None:
        """Tell waiters which announced jobs and workflows were just finalized
        (``riverboat_finalized``); None where waiters poll instead."""
        return None
