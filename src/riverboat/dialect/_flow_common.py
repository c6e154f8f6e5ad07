"""The flow-controlled claim every dialect provides (see :mod:`riverboat.flow`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar

from riverboat._sql import Statement
from riverboat.dialect._part import DialectPart
from riverboat.flow import FlowControl

__all__ = ["FlowStatements"]


class FlowStatements(DialectPart, ABC):
    """Statements for flow control; :class:`~riverboat.dialect.base.Dialect` inherits
    them."""

    # Whether the claim also writes plain completions of this client's jobs (``completed``):
    # a job counts as running until its outcome is written, and writing it in the claim
    # saves waiting for the completer before every claim.
    flow_claim_completes: ClassVar[bool] = False

    @abstractmethod
    def job_get_available_flow(
        self,
        *,
        queue: str,
        max_to_lock: int,
        client_id: str,
        flow: FlowControl,
        max_attempted_by: int,
        now: datetime | None = None,
        completed: Sequence[tuple[int, int]] = (),
    ) -> Statement:
        """River's claim, taking only the jobs ``flow`` lets start now. When the
        dialect's ``flow_claim_completes``, it first marks ``completed`` (``(id,
        attempt)`` of jobs this client claimed and finished successfully, outcomes not
        yet written) completed, so they no longer count as running, and returns their
        rows too, in state ``completed`` (claimed rows are ``running``); others ignore
        it."""

    @abstractmethod
    def flow_use(
        self, *, queue: str, by_kind: bool, by_args: Sequence[str], rate_period: float | None
    ) -> Statement:
        """Per partition (``by_kind``, ``by_args``) of ``queue``'s jobs: the kind (or
        NULL), the by_args values as a JSON array, how many run, how many started in the
        last ``rate_period`` seconds (0 without one) and how many available are due."""

    def flow_local_use(self, *, queue: str, by_kind: bool, by_args: Sequence[str]) -> Statement:
        """Per worker (the last client id in ``attempted_by``) and partition of
        ``queue``'s running jobs: the worker, the kind (or NULL), the by_args values as a
        JSON array and how many it runs."""
        return self.stmt(
            "flow_local_use",
            queue=queue,
            by_kind=by_kind,
            by_args=self.text_list_param(list(by_args)),
        )

    def flow_sequence_use(self, *, queue: str, sequence_continue: bool) -> Statement:
        """Per sequence key of ``queue`` with jobs running or due (at most
        ``riverboat.flow.SEQUENCE_USE_ROWS``, most due first): the key, how many run, how
        many available are due, the head (the lowest id that still blocks the ones
        after it; a discarded job blocks unless ``sequence_continue``) and the lowest id
        of the due ones."""
        return self.stmt("flow_sequence_use", queue=queue, sequence_continue=sequence_continue)
