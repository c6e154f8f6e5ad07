"""The workflow operations every dialect provides (see :mod:`riverboat.workflow`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from riverboat._sql import Statement

__all__ = ["WorkflowStatements"]


class WorkflowStatements(ABC):
    """Statements for workflows; :class:`~riverboat.dialect.base.Dialect` inherits them."""

    #: Whether waiters in other processes hear of finalized jobs by notification
    #: (:mod:`riverboat.wait`); without it they poll.
    waits_notified: bool = False

    @abstractmethod
    def workflow_link(
        self,
        ids: Sequence[int],
        dep_ids: Sequence[Sequence[int] | None],
        dependents: Sequence[Sequence[int]],
    ) -> Statement:
        """Write each task's dependency ids (None: keep) and append dependents."""

    def workflow_reserve_ids(self, count: int) -> Statement | None:
        """``count`` new job ids, taken before a workflow's insert so that each task's
        metadata names its dependencies and dependents as it is written (no second
        write to link them). None where the insert assigns ids and the links are
        written after it (:meth:`workflow_link`)."""
        return None

    @abstractmethod
    def workflow_promote(
        self,
        finalized_ids: Sequence[int],
        candidate_ids: Sequence[int] = (),
        *,
        lazy_commit: bool = False,
    ) -> Statement:
        """Promote (or cancel, by policy) the pending dependents of ``finalized_ids``
        and the pending ``candidate_ids``; rows are ``(id, state, queue)``.
        ``lazy_commit``: the statement is its own transaction and may commit without
        waiting for the disk (it can be recomputed: the runtime's promotions)."""

    @abstractmethod
    def workflow_pending_ids(self, after_id: int, max: int) -> Statement:
        """Ids of up to ``max`` pending workflow tasks after ``after_id``, in order."""

    @abstractmethod
    def workflow_get(self, workflow_id: str, max: int) -> Statement:
        """A workflow's task rows (full job rows), by id."""

    @abstractmethod
    def workflow_retry(self, workflow_id: str) -> Statement:
        """Retry discarded and cancelled tasks: available without dependencies,
        pending with (to be promoted)."""

    @abstractmethod
    def workflow_cancel(self, workflow_id: str, cancel_attempted_at: str) -> Statement:
        """Cancel every unfinished task (running ones as ``job_cancel`` does)."""

    @abstractmethod
    def decode_promoted(self, rows: Sequence[Sequence[Any]]) -> list[tuple[int, str, str]]:
        """Rows of the promote statements as ``(id, state, queue)``."""

    def job_wait_announce(self, payload: str) -> Statement:
        """Tell every runtime what a waiter waits for (``riverboat_wait``)."""
        raise NotImplementedError(f"{type(self).__name__} does not notify waiters")

    def job_finalized_notify(self, payload: str) -> Statement | None:
        """Tell waiters which announced jobs and workflows were just finalized
        (``riverboat_finalized``); None where waiters poll instead."""
        return None
