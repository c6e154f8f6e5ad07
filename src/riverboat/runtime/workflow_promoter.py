"""Promoting workflow tasks (see :mod:`riverboat.workflow`) from the runtime.

Two paths, both by primary key, a bounded number of candidates per statement on
Postgres (PROMOTE_STEP, then twice as many each step, up to PROMOTE_STEP_MAX):

* after the completer wrote outcomes that finalized workflow tasks, their dependents are
  decided at once (:meth:`WorkflowPromoter.after_finalized`), so a chain moves at the
  speed of pick-up, not of a poll;
* a sweep of pending workflow tasks in bounded batches, in id order
  (:meth:`WorkflowPromoter.sweep`), which covers what the first path can miss: a client
  that died between writing an outcome and promoting, tasks finished by Go River
  workers, tasks added to a running workflow, and two dependencies finishing at the same
  moment in two processes (each promotion may see the other still running; the
  statement that starts last sees both, and the sweep is the net under that). One
  client of the fleet sweeps every SWEEP_INTERVAL: the live one with queues whose id is
  smallest in riverboat's registry (``sweeps_here``); the others every
  FOLLOWER_SWEEP_INTERVAL only, the net under a sweeper that died (its registry row
  stays live for ``dead_after``). Leadership can't choose it: the leader may be a Go
  River client. Without the registry (riverboat's migration line not applied) every
  client sweeps every SWEEP_INTERVAL.

A task cancelled because a dependency failed is finalized too, so its own dependents
are decided in the next step of the same cascade (bounded by the graph's depth).

Promoting and claiming at once (Postgres, ``promotion_claims``): after the completer's
write, the producer of the finalized tasks' queue in this client may offer its free
slots (:meth:`PromotionClaimer.promotion_claim`); the step then moves the tasks it
makes ready straight to running for this client, as its claim would, and hands their
rows over (:meth:`PromotionClaimer.take_promoted`). A task then waits for no
notification and no claim, and is written once less. The statement claims nothing
while a job is available in the queue, so a task ready now passes no job waiting there,
whether the producer has heard of it or not (``poll_only``, or a notification on its
way; see ``Producer.promotion_claim``). Tasks a step decided but found locked by
another session are looked at again soon (LOCKED_RETRY), not left to the sweep.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from riverboat._job import FAILED_STATES, FINALIZED_STATES
from riverboat._sql import Statement
from riverboat.dialect._workflow_common import PendingTask, PromoteClaim, PromoteStep
from riverboat.drivers.base import AsyncDriver
from riverboat.errors import DriverError
from riverboat.runtime._waiting import end_within, wait_event
from riverboat.runtime.data_errors import first_line, is_data_error
from riverboat.runtime.outcomes import attempt_error
from riverboat.runtime.supervise import supervised
from riverboat.workflow import WORKFLOW_TASKS_MAX

__all__ = [
    "FOLLOWER_SWEEP_INTERVAL",
    "LOCKED_RETRY",
    "PROMOTE_STEP",
    "PROMOTE_STEP_MAX",
    "SWEEP_BATCH",
    "SWEEP_INTERVAL",
    "PromotionClaimer",
    "WorkflowPromoter",
]

log = logging.getLogger("riverboat.workflow")

SWEEP_INTERVAL = 2.0  # seconds between sweeps of pending workflow tasks
FOLLOWER_SWEEP_INTERVAL = 30.0  # seconds between the sweeps of the other clients
SWEEP_BATCH = 1000  # pending tasks looked at per statement
# Steps of a cancellation cascade: a workflow's tasks at most (the admin API's cascades,
# _admin_async._follow, have the same bound).
CASCADE_MAX = WORKFLOW_TASKS_MAX
STOP_WAIT = 2.0  # seconds a stop lets a sweep under way finish
# Pending task ids a sweep pass keeps (known unfinished when another task names them).
SEEN_PENDING_MAX = 100_000
# Candidates decided per promotion statement (Postgres): a fan-out's first tasks start
# after one short statement, while the rest are promoted. Each later step of the same
# promotion decides twice as many, up to PROMOTE_STEP_MAX: every step reads the whole
# list of dependents again and costs a statement, so steps of 128 throughout took 8
# statements (about 45 ms of server time) for a 1,000-task fan-out, where 128, 256 and
# 512 take 4 (and its first tasks start as soon). The cap keeps any one statement from
# locking and rewriting thousands of rows at once.
PROMOTE_STEP = 128
PROMOTE_STEP_MAX = 1024
# Seconds before each look again at tasks a promotion found locked by another session.
LOCKED_RETRY = (0.05, 0.2, 0.5)


def _decidable(task: PendingTask, states: dict[int, str], seen_pending: set[int]) -> bool:
    """Whether the promotion statement would decide ``task`` now, from the states read:
    a dependency whose row is gone was finalized and cleaned (it counts as completed,
    as in the statement)."""
    unfinished = failed = False
    for dep in task.dep_ids:
        if dep in seen_pending:
            unfinished = True
            continue
        state = states.get(dep)
        if state is None:
            continue
        if state not in FINALIZED_STATES:
            unfinished = True
        elif state in FAILED_STATES:  # a StrEnum: the statement's text states compare equal
            failed = True
    return not unfinished or (failed and not task.runs_after_failure)


class PromotionClaimer(Protocol):
    """A queue's producer, as a promotion that claims for it sees it."""

    def promotion_claim(self) -> PromoteClaim | None:
        """The claim a promotion step may make now (None: none). Each offer is answered
        by one :meth:`take_promoted`, whatever the step's fate."""

    def take_promoted(self, claim: PromoteClaim, rows: Sequence[Sequence[Any]]) -> None:
        """The rows the step claimed under ``claim`` (none when it failed): run them."""


class WorkflowPromoter:
    def __init__(
        self,
        driver: AsyncDriver,
        wake_queues: Callable[[Iterable[str]], None],
        sweeps_here: Callable[[], Awaitable[bool]] | None = None,
        claimer: Callable[[str], PromotionClaimer | None] | None = None,
    ) -> None:
        self._driver = driver
        self._dialect = driver.dialect
        self._wake_queues = wake_queues
        # The producer of a queue in this client, to claim for (None: never claims).
        self._claimer = claimer if self._dialect.promotion_claims else None
        self.claimed = 0  # tasks promoted straight to running here
        # Whether this client is the fleet's sweeper now (None: always).
        self._sweeps_here = sweeps_here
        self.passes = 0  # sweep passes run
        self.passes_left_to_others = 0  # intervals at which another client swept
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self.statements = 0  # promotion statements run (tests count them)
        # Tasks decided but found locked by another session, to look at again soon.
        self._locked_elsewhere: set[int] = set()
        self._retrying: asyncio.Task[None] | None = None
        self.locked_retries = 0  # looks at tasks found locked
        self.promoted = 0
        # One promotion statement at a time in this runtime. A sweep that ran beside a
        # completer's promotion could lock a task the other had just made available (a
        # row lock kept from rechecking a row updated under it, though the sweep then
        # leaves the row alone): the producer woken for that task found it locked, skipped
        # it, and the task waited for the next poll (1 s).
        self._one_statement = asyncio.Lock()

    async def after_finalized(
        self, job_ids: Sequence[int], skip_ids: Sequence[int] = (), queue: str | None = None
    ) -> None:
        """Decide the dependents of the workflow tasks ``job_ids`` just finalized, but
        those of ``skip_ids``: known to wait on a task still running in this client (see
        :meth:`WorkflowStatements.workflow_promote_step`). ``queue``: where those tasks
        ran; this client's producer of it may claim the dependents made ready there."""
        finalized = list(job_ids)
        for _ in range(CASCADE_MAX):
            cancelled, _ = await self._promote(finalized, (), skip_ids, queue)
            if not cancelled:
                break
            finalized, skip_ids, queue = cancelled, (), None
        self._look_again_soon()

    async def sweep(self) -> int:
        """One pass over every pending workflow task; returns how many changed.

        Only the tasks that can be decided now are named to the promotion statement:
        those with no unfinished dependency, or with a failed one under the ``cancel``
        policy. Each batch's dependencies are looked up once (the 1,000 leaves of a
        fan-out share one), and a dependency seen pending in this pass is unfinished
        without a look; naming every pending task made the statement probe each one's
        dependencies, about 0.5 s a pass for 20,000 tasks waiting on their root, in
        every runtime every SWEEP_INTERVAL. The statement decides the named tasks
        again from the rows as they are then, and writes only those still pending once
        it holds their locks, so what was read here only picks candidates."""
        after, changed = 0, 0
        seen_pending: set[int] = set()
        dialect = self._dialect
        while True:
            rows = await self._driver.fetch(dialect.workflow_pending_tasks(after, SWEEP_BATCH))
            self.statements += 1
            tasks = dialect.decode_pending_tasks(rows)
            if len(seen_pending) < SEEN_PENDING_MAX:
                seen_pending.update(task.id for task in tasks)
            look_up = {dep for task in tasks for dep in task.dep_ids} - seen_pending
            states: dict[int, str] = {}
            if look_up:
                found = await self._driver.fetch(dialect.workflow_dep_states(sorted(look_up)))
                self.statements += 1
                states = {int(row[0]): str(row[1]) for row in found}
            decidable = [task.id for task in tasks if _decidable(task, states, seen_pending)]
            if decidable:
                # Cancellations found here cascade like a completer's.
                cancelled, promoted = await self._promote((), decidable)
                changed += promoted
                if cancelled:
                    await self.after_finalized(cancelled)
            if len(tasks) < SWEEP_BATCH:
                return changed
            after = tasks[-1].id

    async def _promote(
        self,
        finalized_ids: Sequence[int],
        candidate_ids: Sequence[int],
        skip_ids: Sequence[int] = (),
        queue: str | None = None,
        *,
        locked_into: set[int] | None = None,
    ) -> tuple[list[int], int]:
        """Decide the pending dependents of ``finalized_ids`` and the pending
        ``candidate_ids``, PROMOTE_STEP candidates per statement where the dialect
        bounds them, each step's tasks handed to the producers before the next runs
        (those claimed for ``queue``'s producer, when it offers, to it); returns (the
        tasks cancelled, how many changed)."""
        dialect = self._dialect
        claimer = None
        if queue is not None and self._claimer is not None:
            claimer = self._claimer(queue)
        cancelled: list[int] = []
        changed = 0
        after: int | None = 0
        step = PROMOTE_STEP
        while after is not None:
            claim: PromoteClaim | None = None
            claimed: list[Sequence[Any]] = []
            refused: DriverError | None = None
            rows: Sequence[Sequence[Any]] = ()
            try:
                # The first step only: it takes at most PROMOTE_STEP tasks, as many as a
                # queue's free slots usually are; later ones find the slots taken.
                if claimer is not None and after == 0:
                    claim = claimer.promotion_claim()
                stmt = dialect.workflow_promote_step(
                    finalized_ids, candidate_ids, after, step, skip_ids, claim
                )
                rows, refused = await self._fetch_unless_refused(stmt)
                if claim is not None:
                    claimed = dialect.decode_promotion_claims(rows)
            finally:
                if claimer is not None and claim is not None:
                    # Whatever happened: the producer runs what was claimed, and its offer
                    # ends (its stop waits for that).
                    self._hand_over(claimer, claim, claimed)
            self.statements += 1
            into = self._locked_elsewhere if locked_into is None else locked_into
            if refused is None:
                promoted, next_after = dialect.decode_promoted_step(rows, step)
                into.update(dialect.decode_promotion_locked_elsewhere(rows))
            else:
                promoted, next_after = await self._decide_apart(
                    finalized_ids, candidate_ids, after, step, skip_ids, into, refused
                )
            after = next_after
            step = min(2 * step, PROMOTE_STEP_MAX)
            await self._handle(promoted)
            changed += len(promoted)
            # A task discarded here (refused, below) is failed like a cancelled one.
            cancelled += [job_id for job_id, state, _ in promoted if state in FAILED_STATES]
        return cancelled, changed

    async def _fetch_unless_refused(
        self, stmt: Statement
    ) -> tuple[Sequence[Sequence[Any]], DriverError | None]:
        """``stmt``'s rows, one promotion statement at a time in this runtime; or no rows
        and the error, when the database refused it for its data (see _decide_apart)."""
        try:
            async with self._one_statement:
                return await self._driver.fetch(stmt), None
        except DriverError as exc:
            if not is_data_error(exc, python_errors=False):
                raise
            return (), exc

    # -- a step the database refused for its data -------------------------------------
    async def _decide_apart(
        self,
        finalized_ids: Sequence[int],
        candidate_ids: Sequence[int],
        after: int,
        limit: int,
        skip_ids: Sequence[int],
        locked_into: set[int],
        refused: DriverError,
    ) -> tuple[list[tuple[int, str, str]], int | None]:
        """A step the database refused for the data it carries: a fan-in whose
        dependencies' outputs together pass what one jsonb value holds (256 MB on
        Postgres), say. Its candidates are decided again in halves, each half apart,
        until the refused task is alone; that task is discarded with the error
        (:meth:`_refuse`). Left as it was, it failed every statement that named it: the
        completer's promotions and every sweep, whose batches name up to SWEEP_BATCH
        tasks of every workflow, so no task anywhere in the schema was promoted by a
        sweep again. Returns what changed and where the next step starts."""
        log.warning(
            "workflow: a promotion was refused for its data (%s); deciding its tasks apart",
            first_line(refused),
        )
        dialect = self._dialect
        rows = await self._driver.fetch(
            dialect.workflow_step_candidates(
                finalized_ids, candidate_ids, PromoteStep(after, limit, list(skip_ids))
            )
        )
        self.statements += 1
        ids = sorted({int(row[0]) for row in rows})
        changed = await self._split(ids, locked_into)
        # Where the dialect takes steps, the next starts after this one's last candidate.
        more = dialect.promotion_claims and len(ids) >= limit
        return changed, (ids[-1] if more and ids else None)

    async def _split(self, ids: list[int], locked_into: set[int]) -> list[tuple[int, str, str]]:
        if not ids:
            return []
        dialect = self._dialect
        rows, refused = await self._fetch_unless_refused(
            dialect.workflow_promote_step((), ids, 0, len(ids))
        )
        self.statements += 1
        if refused is not None:
            if len(ids) == 1:
                return await self._refuse(ids[0], refused)
            half = len(ids) // 2
            return await self._split(ids[:half], locked_into) + await self._split(
                ids[half:], locked_into
            )
        promoted, _ = dialect.decode_promoted_step(rows, len(ids))
        locked_into.update(dialect.decode_promotion_locked_elsewhere(rows))
        return promoted

    async def _refuse(self, task_id: int, exc: DriverError) -> list[tuple[int, str, str]]:
        """Discard task ``task_id``, whose promotion the database refuses whatever it is
        decided with, the error recorded on it (as a failed attempt's): the workflow
        goes on as for any failed task (its dependents are cancelled, or run under the
        ``run`` policy), and ``job_retry`` can try it again once what was refused is
        fixed (a dependency's output made smaller)."""
        error = attempt_error(
            datetime.now(UTC),
            0,
            "riverboat could not make this workflow task available: the database refused "
            f"its promotion ({first_line(exc)}); it is discarded so that the rest of "
            "the workflow, and every other one, is decided",
            "",
        )
        rows = await self._driver.fetch(self._dialect.workflow_task_refused(task_id, error))
        self.statements += 1
        log.error("workflow: task %d discarded, its promotion refused: %s", task_id, exc)
        return self._dialect.decode_promoted(rows)

    # -- tasks found locked ------------------------------------------------------------
    def _look_again_soon(self) -> None:
        """Tasks a promotion decided but found locked by another session (a transaction
        adding tasks to the workflow rewrites their dependents until it commits) are
        looked at again after LOCKED_RETRY delays, not left to the next sweep (up to
        SWEEP_INTERVAL later; the sweep stays the net if they are still locked)."""
        if not self._locked_elsewhere or self._retrying is not None or self._stop.is_set():
            return
        self._retrying = asyncio.create_task(self._retry_locked(), name="riverboat-workflow-retry")

    async def _retry_locked(self) -> None:
        try:
            again: set[int] = set()  # found locked by this task's own last look
            for delay in LOCKED_RETRY:
                await wait_event(self._stop, delay)
                if self._stop.is_set():
                    return
                ids = sorted(again | self._locked_elsewhere)
                self._locked_elsewhere.clear()
                again = set()
                self.locked_retries += 1
                cancelled, _ = await self._promote((), ids, locked_into=again)
                if cancelled:
                    await self.after_finalized(cancelled)
                if not again and not self._locked_elsewhere:
                    return
            # Still locked after the last look: the sweep's (those found meanwhile by
            # other promotions stay, for the next look below).
        except DriverError as exc:
            log.warning("workflow: deciding tasks found locked failed (the sweep will): %s", exc)
        except Exception:  # nothing awaits this task: say what happened here
            log.exception("workflow: deciding tasks found locked failed (the sweep will)")
        finally:
            self._retrying = None
        self._look_again_soon()  # tasks other promotions found locked meanwhile

    def _hand_over(
        self, claimer: PromotionClaimer, claim: PromoteClaim, rows: list[Sequence[Any]]
    ) -> None:
        self.claimed += len(rows)
        try:
            claimer.take_promoted(claim, rows)
        except Exception:  # the completer that called us handles driver errors only
            log.exception(
                "workflow: starting %d tasks claimed by a promotion failed (they are "
                "running in the table; the rescuer will retry them)",
                len(rows),
            )

    async def _handle(self, promoted: list[tuple[int, str, str]]) -> None:
        if not promoted:
            return
        self.promoted += len(promoted)
        queues = sorted({queue for _, state, queue in promoted if state == "available"})
        if queues:
            # Other processes heard of them from the statement (NOTIFY, or SQLite's
            # outbox row written in its transaction); this one's producers now.
            self._wake_queues(queues)
        cancelled = [job_id for job_id, state, _ in promoted if state == "cancelled"]
        if cancelled:
            log.info(
                "workflow: %d tasks cancelled because a dependency failed: %s",
                len(cancelled),
                cancelled[:20],
            )

    # -- the sweep loop ----------------------------------------------------------------
    def start(self, interval: float = SWEEP_INTERVAL) -> None:
        self._stop.clear()
        self._task = asyncio.create_task(
            supervised(
                "workflow sweep", lambda: self._loop(interval), self._stop.is_set, self._stop
            ),
            name="riverboat-workflow-sweep",
        )

    async def _loop(self, interval: float) -> None:
        last_pass = -math.inf
        while not self._stop.is_set():
            try:
                due = time.monotonic() - last_pass >= FOLLOWER_SWEEP_INTERVAL
                if due or self._sweeps_here is None or await self._sweeps_here():
                    last_pass = time.monotonic()
                    self.passes += 1
                    if await self.sweep():
                        # Cancellations found by the sweep cascade on the next pass at once.
                        continue
                else:
                    self.passes_left_to_others += 1
            except DriverError as exc:
                log.warning("workflow: sweeping pending tasks failed: %s", exc)
            await wait_event(self._stop, interval)

    async def stop(self) -> None:
        """End the sweep loop: a sweep under way finishes (its statements are short and
        under the call deadline), then the loop sees the stop; cancelled only if it
        has not ended within STOP_WAIT seconds."""
        self._stop.set()
        if self._retrying is not None:
            await end_within(self._retrying, STOP_WAIT)
        task, self._task = self._task, None
        if task is None:
            return
        await end_within(task, STOP_WAIT)
