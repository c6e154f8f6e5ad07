"""Job and queue administration for :class:`~riverboat.AsyncClient`: the mixin that runs
the statements :mod:`riverboat._admin` plans.

This is the hand-written side: ``_admin_sync.py`` (``SyncAdmin``, for
:class:`~riverboat.Client`) is generated from it by ``scripts/async_to_sync.py``, and CI
fails when the two disagree. Each operation is one statement from the dialect that
returns full rows, run without a wrapping transaction; the ``*_tx`` forms run on the
caller's connection.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Unpack

from riverboat._admin import (
    _UNSET,
    JOB_COUNT_CAP_DEFAULT,
    JobBulkOptions,
    JobBulkResult,
    JobCountRow,
    JobDeleteManyOptions,
    JobFilters,
    JobListOptions,
    JobListResult,
    Leader,
    QueueActivity,
    T,
    ThroughputMinute,
    _ops,
    _Plan,
)
from riverboat._fleet import WorkerInfo
from riverboat._insert import validate_queue
from riverboat._job import JobRow, JobState
from riverboat._json import check_text_param
from riverboat._periodic import PeriodicJobRecord
from riverboat._queue import QueueRow
from riverboat.errors import DriverError, InvalidInputError, NotFoundError
from riverboat.flow import (
    LimitUse,
    limit_uses,
    local_limit_uses,
    merge_number_forms,
    sequence_uses,
)
from riverboat.workflow import WORKFLOW_TASKS_MAX

if TYPE_CHECKING:
    from riverboat._client_core import _ClientCore
    from riverboat._sql import Statement
    from riverboat.drivers.base import AsyncDriver
    from riverboat.runtime.runner import Runtime

__all__ = ["AsyncAdmin"]

_log = logging.getLogger("riverboat.admin")


class AsyncAdmin:
    """Job and queue administration for :class:`~riverboat.AsyncClient`.

    Every method is one statement returning full rows; ``*_tx`` forms run on the caller's
    connection inside their transaction (and, like River's, never touch this client's
    producers directly: the NOTIFY is delivered only if that transaction commits).
    """

    driver: AsyncDriver
    _core: _ClientCore

    async def _run(self, plan: _Plan[T]) -> T:
        if plan.then is None:
            result = plan.finish(await self.driver.fetch(plan.stmt))
        else:
            async with self.driver.transaction() as tx:
                result = await self._run_on(tx, plan)
        if plan.after is not None and (after := plan.after(result)) is not None:
            try:
                result = await self._follow(self.driver, plan, after, result)
            except DriverError as exc:
                # The operation itself is written; what follows it is done again later
                # (the sweep decides a retried task), so it is not this call's failure.
                _log.warning(
                    "%s: its follow-up %s failed: %s", plan.stmt.query.name, after.query.name, exc
                )
        if plan.local is not None:
            self._apply_local(plan.local, result)
        return result

    @staticmethod
    async def _run_on(executor: Any, plan: _Plan[T]) -> T:
        """``plan`` on ``executor`` (a transaction's): its statement, then its ``then``."""
        result = plan.finish(await executor.fetch(plan.stmt))
        if plan.then is not None and (after := plan.then(result)) is not None:
            await executor.execute(after)
        return result

    def _apply_local(self, effect: Callable[[T, Runtime], None], result: T) -> None:
        """Apply a plan's local effect (a cancel, a pause) to this client's own runtime,
        when it runs and won't hear the notification. The clients define it: the async
        one calls it directly, the sync one hands it to its embedded runtime's loop."""
        raise NotImplementedError

    async def _run_tx(self, conn: Any, plan: _Plan[T]) -> T:
        executor = self.driver.wrap(conn)
        result = await self._run_on(executor, plan)
        if plan.after is not None and (after := plan.after(result)) is not None:
            result = await self._follow(executor, plan, after, result)
        return result

    @staticmethod
    async def _follow(executor: Any, plan: _Plan[T], first: Statement, result: T) -> T:
        """A plan's ``after`` statement and the steps of its ``cascade``; returns
        ``result`` with the rows ``after`` and the cascade changed read again (the plan's
        ``reread``): a retried task the cascade cancelled (its retried dependency
        cancelled again) was returned as the ``pending`` the retry wrote."""
        rows = await executor.fetch(first)
        changed = list(rows)
        stmt = plan.cascade(rows) if plan.cascade is not None else None
        for _ in range(WORKFLOW_TASKS_MAX - 1):
            if stmt is None:
                break
            more = await executor.fetch(stmt)
            changed += more
            stmt = plan.cascade(more) if plan.cascade is not None else None
        reread = plan.reread(result, changed) if plan.reread is not None else None
        if reread is not None and plan.refresh is not None:
            result = plan.refresh(result, await executor.fetch(reread))
        return result

    async def job_cancel(self, job_id: int) -> JobRow:
        """Cancel a job (River's JobCancel). A job that is not running is cancelled now;
        a running one is signalled to its producer and ends ``cancelled`` if its work
        then fails or is interrupted (``completed`` if it still succeeds). A finalized job
        is returned unchanged. Raises NotFoundError."""
        return await self._run(_ops(self._core).job_cancel(job_id))

    async def job_cancel_tx(self, conn: Any, job_id: int) -> JobRow:
        return await self._run_tx(conn, _ops(self._core).job_cancel(job_id))

    async def job_retry(self, job_id: int) -> JobRow:
        """Make a job available now (River's JobRetry): not for running jobs, nor for an
        available one that is already due (both are returned unchanged). A job that used
        its last attempt gets one more. Raises NotFoundError."""
        return await self._run(_ops(self._core).job_retry(job_id))

    async def job_retry_tx(self, conn: Any, job_id: int) -> JobRow:
        return await self._run_tx(conn, _ops(self._core).job_retry(job_id))

    async def job_delete(self, job_id: int) -> JobRow:
        """Delete a job and return it. Raises JobRunningError for a running job,
        NotFoundError for a missing one."""
        return await self._run(_ops(self._core).job_delete(job_id))

    async def job_delete_tx(self, conn: Any, job_id: int) -> JobRow:
        return await self._run_tx(conn, _ops(self._core).job_delete(job_id))

    async def job_delete_many(self, **options: Unpack[JobDeleteManyOptions]) -> list[JobRow]:
        """Delete up to ``limit`` (default 100) jobs matching the :class:`JobFilters`,
        oldest id first, skipping running jobs and rows locked by others; returns them.
        With no filter it refuses unless ``all=True``.

        River's ``JobDeleteManyParams`` has no ``Where``; riverboat takes the same
        ``where=`` as ``job_list``, so a page listed with a condition can be deleted with
        it."""
        return await self._run(_ops(self._core).job_delete_many(options))

    async def job_delete_many_tx(
        self, conn: Any, **options: Unpack[JobDeleteManyOptions]
    ) -> list[JobRow]:
        """:meth:`job_delete_many` inside the caller's open transaction on ``conn``."""
        return await self._run_tx(conn, _ops(self._core).job_delete_many(options))

    async def job_retry_many(self, **options: Unpack[JobBulkOptions]) -> JobBulkResult:
        """Retry, as :meth:`job_retry` does, one batch of up to ``limit`` (default 100)
        jobs matching the :class:`JobFilters`, lowest id first after ``after_id``; jobs
        that are running, or available and already due, are left alone (and so are rows
        another transaction holds on Postgres). Call again with the result's
        ``next_after_id`` until it is ``None``: each batch is one bounded statement. With no
        filter it refuses unless ``all=True``."""
        return await self._run(_ops(self._core).job_bulk("retry", options))

    async def job_cancel_many(self, **options: Unpack[JobBulkOptions]) -> JobBulkResult:
        """Cancel, as :meth:`job_cancel` does, one batch of jobs matching the filters (see
        :meth:`job_retry_many`): finalized jobs are left alone; running ones are signalled
        to their producers."""
        return await self._run(_ops(self._core).job_bulk("cancel", options))

    async def job_count_matching(self, *, action: str = "", **filters: Unpack[JobFilters]) -> int:
        """How many jobs match the :class:`JobFilters`, or, with ``action`` ``retry``,
        ``cancel`` or ``delete``, how many of them that bulk action would change (a dry
        run). Reads every matching row."""
        return await self._run(_ops(self._core).job_count_matching(action, filters))

    async def job_count_grouped(self, **filters: Unpack[JobFilters]) -> list[JobCountRow]:
        """Jobs matching the :class:`JobFilters` counted per (state, queue, kind), in
        state order. Reads every matching row."""
        return await self._run(_ops(self._core).job_count_grouped(filters))

    async def job_list(self, **options: Unpack[JobListOptions]) -> JobListResult:
        """List jobs (River's JobList) matching the :class:`JobFilters`. Ordered by
        ``order_by`` (``time`` = scheduled_at, attempted_at or finalized_at depending on
        the first listed state) then id; ``limit`` defaults to 100. Pass ``next_cursor``
        back as ``cursor`` for the next page."""
        return await self._run(_ops(self._core).job_list(options))

    async def job_list_tx(self, conn: Any, **options: Unpack[JobListOptions]) -> JobListResult:
        """:meth:`job_list` inside the caller's open transaction on ``conn``."""
        return await self._run_tx(conn, _ops(self._core).job_list(options))

    async def job_update(
        self, job_id: int, *, output: Any = _UNSET, metadata: Mapping[str, Any] | None = None
    ) -> JobRow:
        """Merge ``metadata`` (shallow) and/or ``output`` (stored as ``metadata.output``, as
        River's recorded output) into a job, whatever its state. Raises NotFoundError;
        InvalidInputError, before any SQL, for what ``record_output`` refuses too (NaN,
        a NUL, integers outside int64, nesting past 128 levels, output over 32 MB)."""
        return await self._run(
            _ops(self._core).job_update(job_id, output=output, metadata=metadata, unset=_UNSET)
        )

    async def job_update_tx(
        self,
        conn: Any,
        job_id: int,
        *,
        output: Any = _UNSET,
        metadata: Mapping[str, Any] | None = None,
    ) -> JobRow:
        plan = _ops(self._core).job_update(job_id, output=output, metadata=metadata, unset=_UNSET)
        return await self._run_tx(conn, plan)

    async def job_count_by_state(self, *, cap: int = JOB_COUNT_CAP_DEFAULT) -> dict[JobState, int]:
        """Jobs in each state, every count stopping at ``cap`` + 1 (a count above ``cap``
        means "more than cap"): each state reads at most that many index entries, so a
        dashboard can refresh it on a table of millions of finalized jobs."""
        return await self._run(_ops(self._core).job_count_by_state(cap))

    async def job_count_by_queue(
        self, *, states: Iterable[JobState | str] | None = None
    ) -> dict[str, dict[JobState, int]]:
        """Exact job counts per queue and state, for ``states`` (default: the states that
        are not finalized, whose rows a healthy queue keeps few of). Queues with no such
        job are absent."""
        return await self._run(_ops(self._core).job_count_by_queue(states))

    async def job_throughput(self, *, minutes: int = 60) -> list[ThroughputMinute]:
        """Jobs completed and discarded per minute over the last ``minutes`` minutes,
        oldest first; minutes with none are absent."""
        return await self._run(_ops(self._core).job_throughput(minutes))

    async def queue_activity(self) -> list[QueueActivity]:
        """Per queue: latency (when its oldest available job was due) and jobs completed
        and discarded over the last hour, day and week. Reads every job finalized in the
        last week: a dashboard should cache it."""
        return await self._run(_ops(self._core).queue_activity())

    async def leader_get(self) -> Leader | None:
        """The current ``river_leader`` row (the client running maintenance), if any."""
        return await self._run(_ops(self._core).leader_get())

    async def queue_get(self, name: str) -> QueueRow:
        """One ``river_queue`` row; raises NotFoundError."""
        return await self._run(_ops(self._core).queue_get(name))

    async def queue_get_tx(self, conn: Any, name: str) -> QueueRow:
        """:meth:`queue_get` on the caller's connection, inside their transaction."""
        return await self._run_tx(conn, _ops(self._core).queue_get(name))

    async def queue_list(self, *, limit: int | None = None) -> list[QueueRow]:
        """Queues by name, at most ``limit`` (default 100)."""
        return await self._run(_ops(self._core).queue_list(limit))

    async def queue_list_tx(self, conn: Any, *, limit: int | None = None) -> list[QueueRow]:
        """:meth:`queue_list` on the caller's connection, inside their transaction."""
        return await self._run_tx(conn, _ops(self._core).queue_list(limit))

    async def queue_pause(self, name: str) -> list[QueueRow]:
        """Pause one queue, or every queue with ``"*"``: producers stop fetching (running
        jobs go on) until resumed, across restarts. Returns the affected rows; raises
        NotFoundError for a named queue that does not exist."""
        return await self._run(_ops(self._core).queue_pause(name))

    async def queue_pause_tx(self, conn: Any, name: str) -> list[QueueRow]:
        return await self._run_tx(conn, _ops(self._core).queue_pause(name))

    async def queue_resume(self, name: str) -> list[QueueRow]:
        """Resume one queue, or every queue with ``"*"``; see :meth:`queue_pause`."""
        return await self._run(_ops(self._core).queue_resume(name))

    async def queue_resume_tx(self, conn: Any, name: str) -> list[QueueRow]:
        return await self._run_tx(conn, _ops(self._core).queue_resume(name))

    async def queue_update(
        self, name: str, *, metadata: Mapping[str, Any] | None = None
    ) -> QueueRow:
        """Replace a queue's metadata (River's QueueUpdate) and tell producers
        (``metadata_changed``). Raises NotFoundError."""
        return await self._run(_ops(self._core).queue_update(name, metadata))

    async def queue_update_tx(
        self, conn: Any, name: str, *, metadata: Mapping[str, Any] | None = None
    ) -> QueueRow:
        return await self._run_tx(conn, _ops(self._core).queue_update(name, metadata))

    # -- the fleet: riverboat's registry of live workers (docs/fleet.md) -------------------
    async def workers_list(self) -> list[WorkerInfo]:
        """Every client in riverboat's registry of live workers, by host and pid: the
        live ones and the dead ones whose jobs the leader has not yet made available
        again (``alive`` False). Needs riverboat's migration line."""
        rows = await self.driver.fetch(self._core.dialect.client_list())
        return [self._core.dialect.decode_client(row) for row in rows]

    async def queue_limits(self, queue: str | None = None) -> list[LimitUse]:
        """Each flow-control limit of the queues live workers work (of ``queue`` only
        when given), as they report it, per partition: its use and the due jobs it
        holds back now (riverboat.flow.LimitUse: global, local and rate limits, and
        sequences; docs/flow-control.md). Needs riverboat's migration line."""
        limits: dict[tuple[str, str], tuple[dict[str, Any], list[str]]] = {}
        for worker in await self.workers_list():
            for q in worker.queues:
                if worker.alive and q.flow and (queue is None or q.name == queue):
                    key = (q.name, json.dumps(q.flow, sort_keys=True))
                    limits.setdefault(key, (q.flow, []))[1].append(worker.id)
        dialect = self._core.dialect
        out: list[LimitUse] = []
        for (name, _), (described, worker_ids) in sorted(limits.items()):
            for rate in (False, True):
                spec = described.get("rate" if rate else "concurrency") or {}
                local = not rate and bool(spec.get("local_limit"))
                if not spec.get("limit" if rate else "global_limit") and not local:
                    continue
                by_kind = bool(spec.get("by_kind"))
                by_args = [str(k) for k in spec.get("by_args") or ()]
                rows = await self.driver.fetch(
                    dialect.flow_use(
                        queue=name,
                        by_kind=by_kind,
                        by_args=by_args,
                        rate_period=spec.get("period") if rate else None,
                    )
                )
                if dialect.flow_numbers_by_value:
                    rows = merge_number_forms(rows, args_at=1, counts_from=2)
                out += limit_uses(name, described, rows, rate=rate)
                if local:
                    local_rows = await self.driver.fetch(
                        dialect.flow_local_use(queue=name, by_kind=by_kind, by_args=by_args)
                    )
                    if dialect.flow_numbers_by_value:
                        local_rows = merge_number_forms(local_rows, args_at=2, counts_from=3)
                    out += local_limit_uses(name, described, rows, local_rows, worker_ids)
            if described.get("sequences"):
                rows = await self.driver.fetch(
                    dialect.flow_sequence_use(
                        queue=name, sequence_continue=described["sequences"] == "continue"
                    )
                )
                out += sequence_uses(name, rows)
        return out

    async def workers_scale(
        self, queue: str, max_workers: int, *, worker_id: str | None = None
    ) -> list[str]:
        """Set ``queue``'s ``max_workers`` on every live worker that works it, or on
        ``worker_id`` only. Each applies it at its next heartbeat. Returns the ids asked;
        raises NotFoundError when no live worker works that queue."""
        return await self._fleet_send(queue, _fleet_scale(max_workers), worker_id)

    async def workers_stop(self, queue: str, *, worker_id: str | None = None) -> list[str]:
        """Stop claiming from ``queue`` on every live worker, or on ``worker_id`` only
        (running jobs finish), until :meth:`workers_start`. Unlike :meth:`queue_pause`
        it can name one worker, and it ends with the worker process (a restarted worker
        works its queues again)."""
        return await self._fleet_send(queue, {"stopped": True}, worker_id)

    async def workers_start(self, queue: str, *, worker_id: str | None = None) -> list[str]:
        """Undo :meth:`workers_stop`."""
        return await self._fleet_send(queue, {"stopped": False}, worker_id)

    async def _fleet_send(
        self, queue: str, patch: Mapping[str, Any], worker_id: str | None
    ) -> list[str]:
        queue = validate_queue(queue)
        if worker_id is not None:
            if not isinstance(worker_id, str):
                raise InvalidInputError("worker_id", "must be a str")
            check_text_param(worker_id, "worker_id")
        stmt = self._core.dialect.client_set_queue_settings(
            queue=queue, patch=patch, client_id=worker_id
        )
        ids = sorted(str(row[0]) for row in await self.driver.fetch(stmt))
        if not ids:
            who = f"worker {worker_id!r}" if worker_id else "live worker"
            raise NotFoundError(f"no {who} works queue {queue!r}")
        return ids

    # -- durable periodic jobs (docs/periodic-jobs.md) --------------------------------------
    async def periodic_job_list(self) -> list[PeriodicJobRecord]:
        """Every durable periodic job the leaders stored (those with an id), by id: its
        schedule, catch-up policy, last run and next run. Needs riverboat's migration
        line at version 2."""
        dialect = self._core.dialect
        rows = await self.driver.fetch(dialect.periodic_job_list())
        return [dialect.decode_periodic_job(row) for row in rows]

    async def periodic_job_forget(self, ids: Iterable[str]) -> list[str]:
        """Delete the stored times of these periodic jobs (a job no client defines any
        more, say); returns the ids that were stored. A job still defined starts again
        from the leader's clock, without catching up."""
        wanted = list(ids)
        if isinstance(ids, str) or not all(isinstance(i, str) for i in wanted):
            raise InvalidInputError("ids", "must be a list of periodic job ids")
        for periodic_id in wanted:
            check_text_param(periodic_id, "ids")
        rows = await self.driver.fetch(self._core.dialect.periodic_job_delete(wanted))
        return sorted(str(row[0]) for row in rows)

    async def leader_request_resign(self) -> None:
        """Ask the current leader, whichever client it is, to resign and run for
        election again (River's ``request_resign`` leadership notification): to move
        maintenance off a client about to be drained, say. Another client (or the same)
        is elected at once. Delivered as a notification, and applied directly when this
        client leads and hears none (``poll_only``)."""
        await self.driver.execute(self._core.dialect.leader_request_resign())
        self._apply_local(_request_resign, None)

    async def leader_request_resign_tx(self, conn: Any) -> None:
        """:meth:`leader_request_resign` inside the caller's open transaction on ``conn``
        (River's ``Notify().RequestResignTx``): the request goes out when it commits, and
        not at all if it rolls back. Nothing is applied locally; the leader hears it."""
        await self.driver.wrap(conn).execute(self._core.dialect.leader_request_resign())


def _request_resign(_: None, runtime: Runtime) -> None:
    elector = getattr(runtime, "elector", None)
    if elector is not None:
        elector.request_resign()


def _fleet_scale(max_workers: int) -> dict[str, Any]:
    from riverboat.runtime.producer import MAX_WORKERS_LIMIT

    if (
        isinstance(max_workers, bool)
        or not isinstance(max_workers, int)
        or not 1 <= max_workers <= MAX_WORKERS_LIMIT
    ):
        raise InvalidInputError("max_workers", f"must be an int in 1..{MAX_WORKERS_LIMIT}")
    return {"max_workers": max_workers}
