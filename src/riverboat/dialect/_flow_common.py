"""The flow-controlled claim every dialect provides (see :mod:`riverboat.flow`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from riverboat._sql import Statement
from riverboat.dialect._part import DialectPart
from riverboat.flow import FlowControl

__all__ = ["FlowClaim", "FlowStatements"]


@dataclass(slots=True, frozen=True)
class FlowClaim:
    """What a dialect's flow-controlled claim is built from: the limits, the parameters
    every dialect's claim takes (``flow.params()`` among them), and the client's
    finished and in-flight jobs (see :meth:`FlowStatements.job_get_available_flow`)."""

    flow: FlowControl
    params: dict[str, Any]
    finished: Sequence[tuple[int, int]]
    in_flight: int | None


class FlowStatements(DialectPart, ABC):
    """Statements for flow control; :class:`~riverboat.dialect.base.Dialect` inherits
    them."""

    # Whether the claim leaves this client's finished jobs (outcomes still buffered) out
    # of its running counts: a job counts as running until its outcome is written, and a
    # limit as large as the fleet's slots would otherwise hold back every job whose
    # predecessor's outcome is still in the completer. Such outcomes must then be written
    # with :meth:`flow_complete_many`, finalized_at no later than the job's end.
    flow_claim_excludes_finished: ClassVar[bool] = False
    # Whether a whole-queue concurrency limit's claim takes ``in_flight`` and counts each
    # live client by its record of it instead of by its rows.
    flow_claim_counts_in_flight: ClassVar[bool] = False
    # Whether partition values that are JSON numbers compare by value (Postgres's jsonb:
    # 1 and 1.0 are one partition for the claim) while the use statements group them by
    # their text: riverboat.flow.merge_number_forms then joins those rows.
    flow_numbers_by_value: ClassVar[bool] = False

    def flow_forget_record(self, queue: str, client_id: str) -> Statement | None:
        """Delete the record of in-flight jobs ``client_id`` keeps for ``queue`` (where the
        dialect's claim counts by records), so that every claim counts its rows: what a
        producer that stops claiming leaves (its record would only change at its next
        claim). None where there are no records."""
        return None

    def job_get_available_flow(
        self,
        *,
        queue: str,
        max_to_lock: int,
        client_id: str,
        flow: FlowControl,
        max_attempted_by: int,
        now: datetime | None = None,
        finished: Sequence[tuple[int, int]] = (),
        in_flight: int | None = None,
    ) -> Statement:
        """River's claim, taking only the jobs ``flow`` lets start now. When the
        dialect's ``flow_claim_excludes_finished``, ``finished`` (``(id, attempt)`` of
        jobs this client claimed and finished, outcomes not yet written) are not counted
        as running, and ``in_flight`` (this client's jobs of the queue claimed and not
        finished; None when it cannot be sure) lets a plain concurrency limit count the
        client by its record rather than by rows (dialect/postgres_flow.py); others
        ignore both."""
        params: dict[str, Any] = {
            "queue": queue,
            "max_to_lock": max_to_lock,
            "attempted_by": client_id,
            "max_attempted_by": max_attempted_by,
            "now": self.time_param(now),
            **flow.params(),
        }
        return self._flow_claim(FlowClaim(flow, params, finished, in_flight))

    @abstractmethod
    def _flow_claim(self, claim: FlowClaim) -> Statement:
        """The dialect's claim statement for :meth:`job_get_available_flow`."""

    def flow_complete_many(
        self,
        ids: Sequence[int],
        attempts: Sequence[int],
        ended: Sequence[float | None],
        *,
        returning: bool,
    ) -> Statement:
        """:meth:`~riverboat.dialect.base.Dialect.job_complete_many`, with each job's
        finalized_at no later than its ``ended`` (seconds since the epoch; None: now),
        for jobs a claim left out of its count (``flow_claim_excludes_finished``)."""
        if not self.flow_claim_excludes_finished:
            raise NotImplementedError(f"{type(self).__name__} does not exclude finished jobs")
        name = "flow_complete_many" if returning else "flow_complete_many_no_return"
        # Seconds since the epoch: a float array costs the client far less to send than
        # one of datetimes.
        return self.stmt(name, ids=list(ids), attempts=list(attempts), ended=list(ended))

    def flow_ended_prune(self) -> Statement:
        """Delete records of finished jobs (``flow_claim_excludes_finished``) whose job no
        longer runs at the recorded attempt: its outcome came another way (rescued,
        cancelled, finished by another client), so no completion write removes it. Such
        a record never counts; this only keeps the table small. Skips locked rows."""
        raise NotImplementedError(f"{type(self).__name__} does not exclude finished jobs")

    def flow_use(
        self, *, queue: str, by_kind: bool, by_args: Sequence[str], rate_period: float | None
    ) -> Statement:
        """Per partition (``by_kind``, ``by_args``) of ``queue``'s jobs: the kind (or
        NULL), the by_args values as a JSON array, how many run, how many started in the
        last ``rate_period`` seconds (0 without one) and how many available are due."""
        return self.stmt(
            "flow_use",
            queue=queue,
            by_kind=by_kind,
            by_args=self.text_list_param(list(by_args)),
            rate_period=rate_period,
        )

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
