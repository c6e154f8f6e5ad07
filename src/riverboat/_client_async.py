"""The I/O every client does, written once for asyncio: inserts and ``job_get``, on top
of the admin mixin. :class:`~riverboat.AsyncClient` builds on :class:`AsyncClientBase`;
``_client_sync.py`` (``ClientBase``, under :class:`~riverboat.Client`) is generated
from this module by ``scripts/async_to_sync.py``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from riverboat._admin import _job_id, check_limit
from riverboat._admin_async import AsyncAdmin
from riverboat._client_core import _ClientCore
from riverboat._insert import InsertParams
from riverboat._insert_async import run_insert, run_insert_count
from riverboat._job import (
    InsertManyParams,
    InsertOpts,
    InsertResult,
    JobRow,
    JobState,
    format_rfc3339_nano,
)
from riverboat.drivers.base import AsyncDriver
from riverboat.errors import DriverError, InvalidInputError, NotFoundError, WaitTimeoutError
from riverboat.migrations import applied_version_async
from riverboat.runtime import outcomes
from riverboat.runtime.worker import Job
from riverboat.wait import (
    FAILING_PAUSE,
    AsyncFinalizedWaiter,
    check_timeout,
    read_failed_while_waiting,
)
from riverboat.workflow import (
    WORKFLOW_LIST_MAX,
    WORKFLOW_TASKS_MAX,
    LinkForm,
    Workflow,
    WorkflowInfo,
    WorkflowSummary,
    add_workflow_metadata,
    check_workflow_id,
    check_workflow_job_ids,
    is_finalized,
    link_form_at,
)

__all__ = ["AsyncClientBase"]

# Seconds between reads of riverboat's migration line, which says how workflows' links
# are written.
LINK_FORM_RECHECK = 60.0


class AsyncClientBase(AsyncAdmin):
    """Inserts and reads over ``driver`` and ``_core``; the client adds the runtime."""

    driver: AsyncDriver
    _core: _ClientCore

    def _after_insert(self, jobs: Sequence[InsertParams]) -> None:
        """Wake this client's producers for the queues that got available jobs; the
        clients define it (directly, or through the embedded runtime's loop)."""
        raise NotImplementedError

    @property
    def id(self) -> str:
        return self._core.id

    async def insert(
        self, args: object, opts: InsertOpts | None = None, *, kind: str | None = None
    ) -> InsertResult:
        """Insert one job in one statement (no transaction is opened)."""
        plan = self._core.plan_one(args, opts, kind)
        results = await run_insert(plan, self.driver)
        self._after_insert(plan.jobs)
        return results[0]

    async def insert_tx(
        self, conn: Any, args: object, opts: InsertOpts | None = None, *, kind: str | None = None
    ) -> InsertResult:
        """Insert one job inside the caller's open transaction on ``conn``."""
        plan = self._core.plan_one(args, opts, kind)
        return (await run_insert(plan, self.driver.wrap(conn)))[0]

    async def insert_many(self, params: Sequence[InsertManyParams | object]) -> list[InsertResult]:
        """Insert many jobs: one statement per 5,000, in one transaction when there are
        several batches so the call is all-or-nothing."""
        plan = self._core.plan_many(params)
        results = await run_insert(plan, self.driver, self.driver.transaction)
        self._after_insert(plan.jobs)
        return results

    async def insert_many_tx(
        self, conn: Any, params: Sequence[InsertManyParams | object]
    ) -> list[InsertResult]:
        """Insert many jobs inside the caller's open transaction on ``conn``."""
        return await run_insert(self._core.plan_many(params), self.driver.wrap(conn))

    async def insert_many_fast(self, params: Sequence[InsertManyParams | object]) -> int:
        """Insert many jobs without returning them (River's ``InsertManyFast``), in one
        transaction; returns how many were inserted.

        On a driver that can COPY (psycopg, asyncpg) plain jobs go in by ``COPY``; unique
        jobs always go through the insert statement, whose ``ON CONFLICT`` skips a
        duplicate (not counted), as :meth:`insert_many` does. Other drivers use the
        insert statement for every job."""
        plan = self._core.plan_many(params, fast=True)
        count = await run_insert_count(plan, self.driver, self.driver.transaction)
        self._after_insert(plan.jobs)
        return count

    async def insert_many_fast_tx(
        self, conn: Any, params: Sequence[InsertManyParams | object]
    ) -> int:
        """:meth:`insert_many_fast` inside the caller's open transaction on ``conn``."""
        plan = self._core.plan_many(params, fast=True)
        return await run_insert_count(plan, self.driver.wrap(conn))

    async def job_get(self, job_id: int) -> JobRow:
        """Fetch one job by ID; raises NotFoundError."""
        rows = await self.driver.fetch(self._core.dialect.job_get_by_id(_job_id(job_id)))
        return self._core.one_job(rows, job_id)

    async def job_get_tx(self, conn: Any, job_id: int) -> JobRow:
        """:meth:`job_get` on the caller's connection: sees their transaction's own
        uncommitted inserts and changes. Raises NotFoundError."""
        stmt = self._core.dialect.job_get_by_id(_job_id(job_id))
        rows = await self.driver.wrap(conn).fetch(stmt)
        return self._core.one_job(rows, job_id)

    async def job_complete_tx(self, conn: Any, job: Job[Any] | JobRow) -> JobRow:
        """Mark the running ``job`` completed inside the caller's open transaction on
        ``conn`` (River's ``JobCompleteTx``), with what the attempt staged so far
        (:meth:`Job.set_metadata`, ``record_output``), so the job's side effects and its
        completion commit, or roll back, together. Returns the row as the statement left
        it. Once committed, the executor's own outcome for the job changes nothing (it
        only updates rows still running), even when the work function then raises; if
        the transaction rolls back, the executor records the outcome as usual."""
        row = job.row if isinstance(job, Job) else job
        if not isinstance(row, JobRow):
            raise InvalidInputError("job", "must be the Job (or JobRow) being worked")
        if row.state is not JobState.RUNNING:
            raise InvalidInputError("job", f"must be running, not {row.state}")
        staged = job.staged_metadata if isinstance(job, Job) else {}
        update = outcomes.completed(row.id, staged)
        dialect = self._core.dialect
        rows = await self.driver.wrap(conn).fetch(
            dialect.job_set_state_if_running_many([update], returning=True)
        )
        if not rows:
            raise NotFoundError(f"job {row.id} not found, or no longer running")
        if isinstance(job, Job) and job._ctx is not None:
            job._ctx.completed_in_tx = True
        return dialect.decode_job(rows[0])

    # -- workflows and waiting ---------------------------------------------------------
    async def workflow_insert(self, workflow: Workflow) -> WorkflowInfo:
        """Insert every task of ``workflow`` in one transaction (see
        :mod:`riverboat.workflow`): tasks without dependencies are available at once,
        the others pending until their dependencies complete. With
        ``Workflow(id=...)``, adds the tasks to that stored workflow."""
        async with self.driver.transaction() as tx:
            info, jobs = await self._workflow_insert(tx, workflow)
        self._after_insert(jobs)
        return info

    async def workflow_insert_tx(self, conn: Any, workflow: Workflow) -> WorkflowInfo:
        """:meth:`workflow_insert` inside the caller's open transaction on ``conn``."""
        info, _ = await self._workflow_insert(self.driver.wrap(conn), workflow)
        return info

    async def _workflow_link_form(self) -> LinkForm:
        """How workflows' links are written here (riverboat.workflow's LinkForm): where
        the dialect writes them compactly (Postgres), id lists as text once riverboat's
        migration line is at WORKFLOW_IDS_TEXT_LINE_VERSION and a task's links as one
        "node" from WORKFLOW_NODE_LINE_VERSION, each version saying that every process
        sharing the schema reads the form (docs/workflows.md, "Upgrading"). The version
        is read again at most once every LINK_FORM_RECHECK seconds, in the newest form
        too: after ``migrate down`` (a downgrade) this process goes back to the form the
        schema's version says, which the earlier release reads."""
        core = self._core
        if not core.dialect.workflow_ids_as_text:
            return "arrays"
        if core.workflow_link_form is None or time.monotonic() >= core.workflow_link_form_after:
            version = await applied_version_async(self.driver, "riverboat")
            core.workflow_link_form = link_form_at(version)
            core.workflow_link_form_after = time.monotonic() + LINK_FORM_RECHECK
        return core.workflow_link_form

    async def _workflow_insert(
        self, executor: Any, workflow: Workflow
    ) -> tuple[WorkflowInfo, list[InsertParams]]:
        if not isinstance(workflow, Workflow):
            raise InvalidInputError("workflow", "must be a riverboat.Workflow")
        workflow.check_acyclic()
        dialect = self._core.dialect
        existing: dict[str, int] = {}
        stored_name: str | None = None
        # The workflow's lock (Postgres, until the transaction ends) before reading what
        # is stored under its id: another client adding to it, or inserting the same
        # Workflow again, must not pass the checks below before this one's tasks are
        # committed; it waits for this transaction and then sees them.
        fresh = workflow.take_fresh()
        if (lock := dialect.workflow_lock(workflow.id)) is not None:
            await executor.fetch(lock)
        if workflow.adding:
            rows = await executor.fetch(dialect.workflow_get(workflow.id, WORKFLOW_TASKS_MAX))
            stored = WorkflowInfo.from_jobs(workflow.id, dialect.decode_jobs(rows))
            if not stored.tasks:
                raise NotFoundError(f"workflow {workflow.id} not found")
            if len(stored.tasks) + len(workflow.tasks) > WORKFLOW_TASKS_MAX:
                # Reads stop at WORKFLOW_TASKS_MAX tasks: past it, workflow_get and
                # workflow_wait would miss the newest ones, and the wait end early.
                raise InvalidInputError(
                    "tasks",
                    f"workflow {workflow.id} has {len(stored.tasks)} tasks; adding "
                    f"{len(workflow.tasks)} would take it past {WORKFLOW_TASKS_MAX}",
                )
            existing = {task.name: task.job.id for task in stored.tasks}
            stored_name = stored.name
            clash = sorted(existing.keys() & {task.name for task in workflow.tasks})
            if clash:
                raise InvalidInputError("name", f"tasks already in the workflow: {clash}")
            workflow.check_deps(existing)
        elif not fresh and await executor.fetch(dialect.workflow_get(workflow.id, 1)):
            # The same Workflow inserted again (a retry after an error that did not say
            # whether the first insert committed) made a second copy of every task under
            # its id: each ran twice, and names clashed.
            raise InvalidInputError(
                "workflow",
                f"{workflow.id} is in the database already: a Workflow is inserted once"
                " (add tasks to it with Workflow(id=...))",
            )
        form = await self._workflow_link_form()
        reserve = dialect.workflow_reserve_ids(len(workflow.tasks))
        given = sorted(int(row[0]) for row in await executor.fetch(reserve)) if reserve else None
        if given:
            check_workflow_job_ids(given)  # before anything is written
        links = workflow.links(given, existing) if given is not None else None

        def prepare(jobs: list[InsertParams]) -> None:
            add_workflow_metadata(workflow, jobs, given, links, stored_name, form)
            if given is not None:
                for job, job_id in zip(jobs, given, strict=True):
                    job.id = job_id

        try:
            plan = self._core.plan_many(workflow.task_params(), prepare=prepare)
        except InvalidInputError as exc:
            raise workflow.blame_task(exc) from None
        inserted = [r.job for r in await run_insert(plan, executor)]
        ids = [job.id for job in inserted]
        if given is None:
            check_workflow_job_ids(ids)  # raised inside the insert's transaction
        targets: list[int] = []
        dep_ids: list[list[int] | None] = []
        dependents: list[list[int]] = []
        if links is None:
            targets, dep_ids, dependents = workflow.links(ids, existing)
        elif existing:
            # The new tasks' metadata is complete as inserted; only tasks inserted
            # earlier learn their new dependents.
            earlier = set(existing.values())
            all_targets, _, all_dependents = links
            for target, more in zip(all_targets, all_dependents, strict=True):
                if target in earlier:
                    targets.append(target)
                    dep_ids.append(None)
                    dependents.append(more)
        if targets:
            await executor.execute(
                dialect.workflow_link(targets, dep_ids, dependents, as_text=form != "arrays")
            )
        if not workflow.adding:
            # The rows as inserted, with the links just written: no read-back.
            return WorkflowInfo.linked(workflow, inserted, targets, dep_ids, dependents), plan.jobs
        # A new task whose dependencies already finished has nothing left to wake it.
        waiting = [i for i, task in zip(ids, workflow.tasks, strict=True) if task.deps]
        if waiting:
            await executor.fetch(dialect.workflow_promote([], waiting))
        rows = await executor.fetch(dialect.workflow_get(workflow.id, WORKFLOW_TASKS_MAX))
        return WorkflowInfo.from_jobs(workflow.id, dialect.decode_jobs(rows)), plan.jobs

    async def workflow_get(self, workflow_id: str) -> WorkflowInfo:
        """A stored workflow's tasks and their jobs; raises NotFoundError."""
        return await self._workflow_read(check_workflow_id(workflow_id))

    async def workflow_list(self, *, limit: int = 20) -> list[WorkflowSummary]:
        """The ``limit`` (1 to 100) workflows with the newest tasks, newest first, each
        with counts over all its tasks. Workflows are found among the newest 10,000
        workflow tasks: an older one is read by id with :meth:`workflow_get`."""
        dialect = self._core.dialect
        rows = await self.driver.fetch(dialect.workflow_list(check_limit(limit, WORKFLOW_LIST_MAX)))
        return [
            WorkflowSummary(
                str(row[0]),
                str(row[1]),
                int(row[2]),
                int(row[3]),
                int(row[4]),
                int(row[5]),
                dialect.decode_timestamp(row[6]),
            )
            for row in rows
        ]

    async def _workflow_read(self, wid: str, min_id: int = 0) -> WorkflowInfo:
        dialect = self._core.dialect
        rows = await self.driver.fetch(dialect.workflow_get(wid, WORKFLOW_TASKS_MAX, min_id))
        info = WorkflowInfo.from_jobs(wid, dialect.decode_jobs(rows))
        if not info.tasks:
            raise NotFoundError(f"workflow {wid} not found")
        return info

    async def workflow_cancel(self, workflow_id: str) -> WorkflowInfo:
        """Cancel every task of the workflow that has not finished: at once, or, for a
        running one, as :meth:`job_cancel` does. Returns the workflow as it is then."""
        wid = check_workflow_id(workflow_id)
        now = format_rfc3339_nano(datetime.now(UTC))
        await self.driver.fetch(self._core.dialect.workflow_cancel(wid, now))
        return await self.workflow_get(wid)

    async def workflow_retry(self, workflow_id: str) -> WorkflowInfo:
        """Retry the workflow's discarded and cancelled tasks, each with one more
        attempt if it had used its last: a task whose dependencies all completed is
        available now, the others wait for them again (pending), so the rest of the
        workflow continues. Returns the workflow as it is then."""
        wid = check_workflow_id(workflow_id)
        dialect = self._core.dialect
        retried = dialect.decode_jobs(await self.driver.fetch(dialect.workflow_retry(wid)))
        waiting = [job.id for job in retried if job.state is JobState.PENDING]
        if waiting:
            await self.driver.fetch(dialect.workflow_promote((), waiting))
        return await self.workflow_get(wid)

    async def job_wait(self, job_id: int, timeout: float = 30.0) -> JobRow:
        """Wait until the job is finalized (completed, discarded or cancelled) and
        return it, from any process: woken as its outcome is written (in this process,
        or through LISTEN/NOTIFY on Postgres), polling meanwhile (see riverboat.wait).
        Raises NotFoundError for an unknown id and
        :class:`~riverboat.errors.WaitTimeoutError` after ``timeout`` seconds."""
        job_id = _job_id(job_id)
        timeout = check_timeout(timeout)
        # A read that fails on the way (a server restart, a dropped connection) costs
        # the wait a poll, not the wait: it asks again (no sooner than FAILING_PAUSE
        # while reads fail), and the last failure is raised if none answered by the
        # deadline.
        failed: DriverError | None = None
        try:
            job = await self.job_get(job_id)
            if is_finalized(job):
                return job  # no waiter to set up (on Postgres, a LISTEN connection)
        except DriverError as exc:
            failed = read_failed_while_waiting(exc, failed)
        async with AsyncFinalizedWaiter(self.driver, timeout, job_id=job_id) as waiter:
            for delay in itertools.chain((0.0,), waiter.pauses()):
                if delay:
                    await waiter.pause(max(delay, FAILING_PAUSE) if failed else delay)
                try:
                    job = await self.job_get(job_id)
                except DriverError as exc:
                    failed = read_failed_while_waiting(exc, failed)
                    continue
                failed = None
                if is_finalized(job):
                    return job
        if failed is not None:
            raise failed
        if is_finalized(job):
            return job
        raise WaitTimeoutError(f"job {job.id} is still {job.state} after {timeout:g}s", job)

    async def workflow_wait(self, workflow_id: str, timeout: float = 60.0) -> WorkflowInfo:
        """Wait until every task of the workflow is finalized and return the workflow,
        woken as :meth:`job_wait` is. Raises NotFoundError and
        :class:`~riverboat.errors.WaitTimeoutError`."""
        wid = check_workflow_id(workflow_id)
        timeout = check_timeout(timeout)
        info = await self._workflow_read(wid)
        if info.finalized:
            return info
        # Each wake-up asks whether a task is unfinished (one row at most) and reads the
        # whole workflow only once none is: a 1,000-task workflow was read and decoded
        # in full at every wake-up. Tasks added later take larger ids than these, so
        # the reads from here start at the first task (on SQLite, a range of the table
        # rather than all of it).
        first = min(task.job.id for task in info.tasks)
        dialect = self._core.dialect
        unfinished = dialect.workflow_unfinished(wid, first)
        failed: DriverError | None = None  # as job_wait's: a failed read costs a poll
        async with AsyncFinalizedWaiter(self.driver, timeout, workflow_id=wid) as waiter:
            for delay in waiter.pauses():
                try:
                    if not await self.driver.fetch(unfinished):
                        info = await self._workflow_read(wid, first)
                        if info.finalized:
                            return info
                    failed = None
                except DriverError as exc:
                    failed = read_failed_while_waiting(exc, failed)
                await waiter.pause(max(delay, FAILING_PAUSE) if failed else delay)
        if failed is not None:
            raise failed
        info = await self._workflow_read(wid, first)
        if info.finalized:
            return info
        raise WaitTimeoutError(f"workflow {info.id} is still running after {timeout:g}s", info)

    async def resumable_set_step_tx(self, conn: Any, job: Job[Any]) -> JobRow:
        """Persist the running resumable step as finished now, inside the caller's
        open transaction on ``conn`` (River's ``ResumableSetStepTx``): a later attempt
        skips it even if this process dies before the attempt ends. Call it from inside
        ``job.step`` and commit before the step returns; if the transaction rolls back,
        so does the checkpoint. Returns the updated row."""
        return await self._resumable_checkpoint_tx(conn, job, None, with_cursor=False)

    async def resumable_set_step_cursor_tx(self, conn: Any, job: Job[Any], cursor: Any) -> JobRow:
        """Persist the running cursor step and ``cursor`` now, inside the caller's open
        transaction on ``conn`` (River's ``ResumableSetStepCursorTx``): a later attempt,
        by riverboat or Go, runs that step again from ``cursor``. Call it from inside
        ``job.step_cursor``; returns the updated row."""
        return await self._resumable_checkpoint_tx(conn, job, cursor, with_cursor=True)

    async def _resumable_checkpoint_tx(
        self, conn: Any, job: Job[Any], cursor: Any, *, with_cursor: bool
    ) -> JobRow:
        if not isinstance(job, Job):
            raise InvalidInputError("job", "must be the Job being worked")
        if job.row.state is not JobState.RUNNING:
            raise InvalidInputError("job", f"must be running, not {job.row.state}")
        state = job._resumable()
        update = state.checkpoint(cursor, with_cursor)
        row = await self.job_update_tx(conn, job.id, metadata=update)
        state.checkpointed(update)
        return row
