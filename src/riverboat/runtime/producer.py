"""One producer per queue: claims as many jobs as it has free slots, in one statement.

Wake-ups come from insert notifications for this queue, the poll timer (with jitter), a
freed slot after a full batch, resume, and local inserts. Fetches are debounced: the
first wake-up fetches at once, more within ``fetch_cooldown`` collapse into one fetch at
the end of the cooldown (River's leading-edge debounce).

Idle queues (riverboat's policy, not River's): with the default cooldown, the wait
after a fetch grows with what it found: ``QUICK_FETCH_GAP`` (10 ms) per job claimed, at
least one gap, at most the cooldown. One job at a time into an idle queue then starts
in milliseconds instead of after up to 100 ms, at one claim per job. A notification
storm still collapses into one claim per cooldown: jobs arriving faster than one per
gap make each fetch find several, each wait is longer, and the next fetch finds more,
until the wait is the whole cooldown. Wake-ups cause at most 1/``QUICK_FETCH_GAP``
claims a second, and River's one per cooldown under a burst. (Every insert of available
jobs notifies at the default cooldown, ``_insert_plan.NotifyLimiter``: this pacing is
what keeps a storm of them from multiplying claims.)

Refill (riverboat's policy, not River's): while the last fetch came back full there is
a backlog, and waiting out the cooldown would cap the queue at ``max_workers`` jobs per
cooldown (200 jobs/s for 20 workers at River's 100 ms). So when the cooldown is the
default (neither the client nor the queue set one), a fetch that came back full is
followed by the next one as soon as half the slots are free, cooldown or not: at most
two claims per ``max_workers`` jobs. After a fetch that came back short, a wake-up waits
as above. A cooldown the user set is kept for every fetch, as River does.

Claiming ahead (riverboat's policy, not River's): under a backlog every freed slot
otherwise waits for the next claim, whose commit (an fsync at stock durability) takes a
few ms; jobs of 10 ms then keep their slots busy only 10 ms out of every 10 + claim. So
with the default cooldown, a refill that follows a full fetch within ``AHEAD_WINDOW``
(short jobs) claims up to ``max_workers`` more jobs than there are free slots. Under
flow control too: a job claimed ahead is ``running`` in the table, so every limit counts
it, and the claim takes only the room the limits leave. Jobs claimed ahead wait in the producer,
claimed (``running`` in the table) but not started, and start as slots free, at most
``max_workers`` at once as always. None waits longer than ``AHEAD_MAX_WAIT``: older ones
are handed back (available again, attempt rolled back, like a hard stop's), and claiming
ahead pauses for ``AHEAD_BACKOFF``. A stop hands back every waiting job; a cancel of one
finishes it cancelled without running it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import random
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from riverboat._clock import Clock
from riverboat._job import JobRow
from riverboat._sql import Statement
from riverboat.dialect._rows import QUEUE_INDEX
from riverboat.dialect._workflow_common import PromoteClaim
from riverboat.dialect.base import MAX_ATTEMPTED_BY, is_plain_completion
from riverboat.drivers.base import AsyncDriver
from riverboat.errors import CALLBACK_FAILURES, DriverError
from riverboat.flow import ConcurrencyLimit, FlowControl, RateLimit
from riverboat.runtime import process_pool as _process_pool
from riverboat.runtime._waiting import wait_event
from riverboat.runtime.completer import Completer, PendingCompletion
from riverboat.runtime.events import Event, EventKind
from riverboat.runtime.executor import (
    ExecutorConfig,
    RunState,
    execute_job,
    runs_in_process,
    timeout_for,
    undecodable_completion,
)
from riverboat.runtime.health import DEFAULT_CALL_TIMEOUT, PathHealth, bounded
from riverboat.runtime.process_pool import ProcessPool, usable_cores
from riverboat.runtime.supervise import supervised
from riverboat.runtime.threads import DaemonThreadPool
from riverboat.workflow import WORKFLOW_METADATA_KEY

__all__ = ["DEFAULT_FETCH_COOLDOWN", "QUICK_FETCH_GAP", "Producer", "QueueConfig", "fetch_delay"]

if sys.version_info >= (3, 12):

    def _start_task(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        # Eager start: a job that finishes without suspending (a quick async job) runs to
        # completion right here, skipping a trip through the event loop. It still gets a
        # real Task, so current_task(), timeouts and cancellation behave as usual.
        return asyncio.Task(coro, loop=asyncio.get_running_loop(), eager_start=True)

else:

    def _start_task(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(coro)


log = logging.getLogger("riverboat.producer")

QUEUE_REPORT_INTERVAL = 600.0  # River refreshes river_queue.updated_at every 10 minutes
# Without notifications (poll-only), River reads the queue row and its running jobs'
# cancellation requests this often so pauses, resumes and cancellations made by other
# clients still take effect.
QUEUE_POLL_INTERVAL = 2.0
# With notifications, the same reads run this often (River 0.51): a notification sent
# while the listener reconnects is lost, and this is the fallback.
NOTIFICATION_POLL_INTERVAL = 60.0
# Where a river_queue row (queue_get, queue_create_or_set_updated_at) says it is paused.
_PAUSED_AT = QUEUE_INDEX["paused_at"]
CANCEL_POLL_BATCH = 1000  # River's jobCancelPollBatchSize
MAX_WORKERS_LIMIT = 10_000
DEFAULT_FETCH_COOLDOWN = 0.1  # River's FetchCooldownDefault
# With the default cooldown, the wait after a fetch per job it claimed (see fetch_delay).
QUICK_FETCH_GAP = 0.01
# Claiming ahead (see the module's docstring): only when a refill follows a full fetch
# within this many seconds (the jobs are short); a job claimed ahead starts or is handed
# back within AHEAD_MAX_WAIT; after a hand-back, no claiming ahead for AHEAD_BACKOFF.
AHEAD_WINDOW = 0.25
AHEAD_MAX_WAIT = 2.0
AHEAD_BACKOFF = 60.0
# How long a flow-controlled claim waits for the outcomes buffered here to be written
# (a job counts as running until then); past it, the claim counts them as running.
FLOW_FLUSH_WAIT = 0.5
# How often a flow-controlled producer prunes records of finished jobs whose outcome came
# another way (dialect flow_ended_prune): off the claim's and the completer's path.
FLOW_ENDED_PRUNE_INTERVAL = 60.0


@dataclass(slots=True, frozen=True)
class QueueConfig:
    """A queue this client works. ``None`` cooldown/poll take the client's defaults
    (River: 100 ms and 1 s). With the default cooldown a backlog is refilled without
    waiting it out, and an idle queue's wake-up waits 10 ms per job the last fetch found
    (see the module's docstring); setting ``fetch_cooldown`` here or on the client keeps
    it between every two fetches, as River does."""

    max_workers: int = 100
    fetch_cooldown: float | None = None
    fetch_poll_interval: float | None = None
    # Flow control, enforced in the claim for every riverboat process (riverboat.flow,
    # docs/flow-control.md). None/False: River's plain claim, unchanged.
    concurrency: ConcurrencyLimit | None = None
    rate_limit: RateLimit | None = None
    sequences: bool = False
    sequence_on_discard: Literal["halt", "continue"] = "halt"
    # Where this queue's plain def jobs run: "thread" (the default) or "process", a pool
    # of child processes (docs/process-executor.md), of ``process_pool_size`` children
    # (default: max_workers), each capped at ``process_memory_limit`` bytes (RLIMIT_AS).
    executor: str = "thread"
    process_pool_size: int | None = None
    process_memory_limit: int | None = None


def fetch_delay(
    since_last_fetch: float, last_claimed: int, cooldown: float, *, adaptive: bool
) -> float:
    """Seconds a wake-up waits before fetching, ``since_last_fetch`` seconds after the
    previous fetch began, which claimed ``last_claimed`` jobs (-1: none yet).

    River's leading-edge debounce waits out ``cooldown`` from the previous fetch. With
    ``adaptive`` (the default cooldown) the wait grows with what the previous fetch
    found: ``QUICK_FETCH_GAP`` per job claimed (at least one), at most the cooldown.
    Jobs arriving one at a time are fetched one at a time; jobs arriving faster than
    one per gap make every fetch find more, and the wait grows to the cooldown."""
    if adaptive:
        return min(cooldown, max(last_claimed, 1) * QUICK_FETCH_GAP) - since_last_fetch
    return cooldown - since_last_fetch


def _end_plain_completion(pending: PendingCompletion) -> bool:
    """Whether ``pending`` is a plain completion of a job that ran (outside a workflow,
    whose completions promote its dependents): then its ``ended`` is set, the job's end on
    the wall clock, which it is written with (finalized_at no later than it), and a
    flow-controlled claim may stop counting it before it is written."""
    if (
        not pending.started_at
        or not is_plain_completion(pending.update)
        or WORKFLOW_METADATA_KEY in pending.job.metadata
    ):
        return False
    if pending.ended is None:
        pending.ended = pending.started_at + pending.run_duration
    return True


class Producer:
    def __init__(
        self,
        *,
        queue: str,
        config: QueueConfig,
        driver: AsyncDriver,
        client_id: str,
        completer: Completer,
        executor_config: ExecutorConfig,
        fetch_cooldown: float,
        fetch_poll_interval: float,
        emit: Callable[[Event], None],
        refill_without_cooldown: bool = False,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
        child_lease: float | None = None,
    ) -> None:
        self.queue = queue
        # Every statement of this producer answers within call_timeout or its connection
        # is dropped; failures are logged as one path's outage (runtime/health.py).
        self._call_timeout = call_timeout
        self.health = PathHealth(f"producer {queue}", log)
        self.max_workers = config.max_workers
        self._flow = FlowControl.of(config)
        # Under flow control: wakes the producer once the completer has written what it
        # holds, after a claim held back by this client's own unwritten outcomes.
        self._wake_when_written_task: asyncio.Task[None] | None = None
        self._flow_pruned_at = -math.inf  # the first flow claim prunes
        self._driver = driver
        self._dialect = driver.dialect
        # A whole-queue concurrency limit on Postgres counts this client by the jobs it
        # has in flight (its slots held, its jobs claimed ahead, and its outcomes other
        # than plain completions until they are written), as it says in each claim,
        # instead of by rows: dialect/postgres_flow.py. After a claim that failed without
        # saying whether it committed, the jobs it may have claimed are this client's
        # though it never saw them: from then on its rows are counted.
        self._counts_in_flight = (
            self._flow is not None
            and self._flow.whole_queue_concurrency
            and self._dialect.flow_claim_counts_in_flight
        )
        # This client's record in riverboat_flow_client may be written (a claim counting
        # in flight was sent): forgotten when claims stop (_forget_flow_record).
        self._flow_record_held = False
        self._others_unwritten = 0  # outcomes other than plain completions, not written
        self._client_id = client_id
        self._completer = completer
        self._cooldown = fetch_cooldown
        self._poll = fetch_poll_interval
        self._emit = emit
        self._pool = DaemonThreadPool(thread_name_prefix=f"riverboat-{queue}")
        workers = executor_config.workers
        self.process_pool: ProcessPool | None = None
        references = [
            worker.process_reference
            for worker in (workers.get(kind) for kind in workers)
            if worker is not None and worker.process_reference is not None
        ]
        if config.executor == "process" or references:
            modules = {ref.removeprefix("class:").partition(":")[0] for ref in references}
            self.process_pool = ProcessPool(
                config.process_pool_size or config.max_workers,
                memory_limit=config.process_memory_limit,
                name=queue,
                preload=tuple(sorted(modules)),
                lease=child_lease,
            )
        self._exec_config = ExecutorConfig(
            workers,
            executor_config.job_timeout,
            executor_config.retry_policy,
            self._pool,
            executor_config.middleware,
            self.process_pool,
            config.executor,
        )
        self._wake = asyncio.Event()
        self._loop_time = asyncio.get_running_loop().time
        self._watch_handle: asyncio.TimerHandle | None = None
        self._watch_at = math.inf
        self._active: dict[int, tuple[asyncio.Task[None], RunState]] = {}
        self._slots_held = 0  # slots taken by running jobs
        self._fetch_when_slots_free = False
        self._refill_without_cooldown = refill_without_cooldown
        # Free slots that let a refill skip the cooldown: half the queue, so a backlog
        # costs at most two claims per max_workers jobs.
        self._refill_at = max(1, -(-config.max_workers // 2))
        self._refill = asyncio.Event()
        # Claiming ahead: jobs claimed but not started yet (monotonic claim time, row),
        # oldest first; slots plus jobs claimed ahead the last fetch aimed for.
        # Not under a rate limit: a job claimed ahead counts in the window of its claim
        # (its attempted_at) but starts when a slot frees, up to a job's duration later,
        # so RateLimit(4, 1s) let 6 bodies start within a second. (A concurrency limit
        # counts a job claimed ahead as running, which holds: no more run.)
        self._claim_ahead = refill_without_cooldown and (
            self._flow is None or self._flow.rate is None
        )
        self._ahead: deque[tuple[float, JobRow]] = deque()
        self._ahead_timer: asyncio.TimerHandle | None = None
        self._ahead_off_until = 0.0
        self._starting_ahead = False
        self._ahead_scheduled = False
        self._capacity = config.max_workers
        self._last_fetch_full = False
        self.handed_back = 0  # jobs claimed ahead and handed back unstarted
        self._stopping = False
        self._interrupting = False  # a hard stop began: jobs still starting are handed back
        # Sync jobs whose threads were still running when a hard stop handed them back.
        self.abandoned_threads = 0
        self._paused = False
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        # Set by the runtime when nothing LISTENs: queue state and cancellations are then
        # read every QUEUE_POLL_INTERVAL instead of every NOTIFICATION_POLL_INTERVAL.
        self._fetching = False
        self._cancelled_while_fetching: set[int] = set()
        # A workflow promotion claiming for this queue (promotion_claim), until its rows
        # are taken; set when none is in flight.
        self._promotion_claim: PromoteClaim | None = None
        self._fetch_passed_over = False
        # Set when the producer starts: the context its jobs run in, whoever starts them
        # (a promotion's claim runs in the completer's task, under its call deadline).
        self._job_context = contextvars.copy_context()
        self._promotion_claim_done = asyncio.Event()
        self._promotion_claim_done.set()
        self.promotion_claimed = 0  # jobs a workflow promotion claimed for this queue
        self._adding: set[asyncio.Task[None]] = set()
        self.poll_queue_state = False
        # Set by the runtime for fetch_only_known_kinds: claim only these kinds.
        self.fetch_kinds: list[str] | None = None
        self.last_fetch_count = -1
        self.fetches = 0
        self.jobs_started = 0
        self.fetch_errors = 0
        # Called with (queue, jobs claimed) after every fetch (metrics: contrib.otel/prometheus).
        self.claim_listeners: list[Callable[[str, int], None]] = []
        # River's HookMetricEmit: (queue, fetch seconds, jobs claimed) after every fetch;
        # None (the default) costs one check per fetch. Set by the runtime.
        self.fetch_metrics: Callable[[str, float, int], None] | None = None
        # The client's clock (riverboat/_clock.py): the claim's "now". The runtime sets
        # its own, shared with the rest of the client.
        self.clock = Clock()
        # The registry of live clients (runtime/registry.py): no claims while this
        # client may have been declared dead (the jobs whose outcomes must be dropped
        # are marked in their RunState: orphan_running).
        self.may_claim: Callable[[], bool] | None = None
        # Stopped by an operator through the registry (`riverboat workers stop`): like a
        # pause, but of this client only, and River's river_queue row is not touched.
        self.operator_stopped = False

    # -- external signals ------------------------------------------------------------
    def wake(self) -> None:
        self._wake.set()

    def wake_now(self) -> None:
        """Fetch without waiting out the cooldown: for workflow tasks just promoted (at
        most one wake-up per completer flush, so no storm to collapse), which are the
        next step of work already under way."""
        self._wake.set()
        self._refill.set()

    def handle_insert(self, payload: dict[str, Any]) -> None:
        if payload.get("queue") == self.queue:
            self._wake.set()

    def handle_control(self, payload: dict[str, Any]) -> None:
        action = payload.get("action")
        queue = payload.get("queue")
        if action == "cancel":
            if queue == self.queue:
                job_id = payload.get("job_id")
                if (
                    isinstance(job_id, int)
                    and not self.cancel_job(job_id)
                    and (self._fetching or self._promotion_claim is not None)
                ):
                    # Perhaps a job the fetch in flight is claiming (River 0.48, PR #1397):
                    # cancelled as soon as it starts.
                    self._cancelled_while_fetching.add(job_id)
            return
        if queue not in (self.queue, "*"):
            return
        if action == "pause":
            self.set_paused(True)
        elif action == "resume":
            self.set_paused(False)

    def set_paused(self, paused: bool) -> None:
        if paused == self._paused:
            return
        self._paused = paused
        self._emit(
            Event(EventKind.QUEUE_PAUSED if paused else EventKind.QUEUE_RESUMED, queue=self.queue)
        )
        if not paused:
            self._wake.set()

    @property
    def paused(self) -> bool:
        return self._paused

    def job_ids(self) -> list[int]:
        """The jobs this producer is running, or claimed ahead (for the registry's
        heartbeat)."""
        return [*self._active, *(row.id for _, row in self._ahead)]

    def set_max_workers(self, max_workers: int) -> None:
        """Work up to ``max_workers`` jobs at once from now on (an operator's scale);
        running jobs above a lowered limit finish, no new ones start until below it."""
        max_workers = max(1, min(int(max_workers), MAX_WORKERS_LIMIT))
        if max_workers == self.max_workers:
            return
        log.info("producer %s: max_workers %d -> %d", self.queue, self.max_workers, max_workers)
        self.max_workers = max_workers
        self._refill_at = max(1, -(-max_workers // 2))
        self._wake.set()

    def set_operator_stopped(self, stopped: bool) -> None:
        if stopped == self.operator_stopped:
            return
        self.operator_stopped = stopped
        log.info("producer %s: %s by an operator", self.queue, "stopped" if stopped else "started")
        self._emit(
            Event(EventKind.QUEUE_PAUSED if stopped else EventKind.QUEUE_RESUMED, queue=self.queue)
        )
        if not stopped:
            self._wake.set()

    def orphan_running(self) -> int:
        """This client lost its lease (runtime/registry.py): its running jobs may be run
        by others now. Their outcomes are dropped, async ones are cancelled, sync ones
        asked to stop (``job.cancel_requested``); a thread that can't stop keeps its slot
        until it returns. Returns how many jobs were orphaned."""
        # Claimed ahead, never started: dropped (others may claim them once rescued).
        count = len(self._ahead)
        self._ahead.clear()
        for task, state in list(self._active.values()):
            if state.orphaned:
                continue
            count += 1
            state.interrupted = True
            state.orphaned = True
            _ask_to_stop(task, state)
        return count

    def cancel_job(self, job_id: int) -> bool:
        entry = self._active.get(job_id)
        if entry is None:
            return self._cancel_ahead(job_id)
        task, state = entry
        state.cancelled_remotely = True
        _ask_to_stop(task, state)
        return True

    @property
    def active(self) -> int:
        return len(self._active)

    # -- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        async with bounded(self._call_timeout, "river_queue"):
            rows = await self._driver.fetch(
                self._dialect.queue_create_or_set_updated_at(self.queue)
            )
        if rows and rows[0][_PAUSED_AT] is not None:
            self._paused = True
        if self.process_pool is not None and self._exec_config.default_executor == "process":
            self.process_pool.warm(usable_cores())
        self._job_context = contextvars.copy_context()
        self._task = asyncio.create_task(
            supervised(f"producer {self.queue}", self._run, lambda: self._stopping),
            name=f"riverboat-producer-{self.queue}",
            context=self._job_context.copy(),
        )

    async def _run(self) -> None:
        last_fetch = 0.0
        next_report = time.monotonic() + QUEUE_REPORT_INTERVAL
        state_poll_every = (
            QUEUE_POLL_INTERVAL if self.poll_queue_state else NOTIFICATION_POLL_INTERVAL
        )
        next_state_poll = time.monotonic() + state_poll_every
        jitter_cap = max(self._poll / 10, 0.01)
        self._wake.set()  # fetch at start
        while not self._stopping:
            timeout = self._poll + random.uniform(0, jitter_cap)
            await wait_event(self._wake, timeout)
            if self._stopping:
                break
            wait = fetch_delay(
                time.monotonic() - last_fetch,
                self.last_fetch_count,
                self._cooldown,
                adaptive=self._refill_without_cooldown,
            )
            if wait > 0 and not self._refill.is_set():
                # A backlog refill (enough slots freed after a full fetch, with the default
                # cooldown) or a stop cuts the cooldown short; anything else waits it out.
                await wait_event(self._refill, wait)
                if self._stopping:
                    break
            self._wake.clear()
            self._refill.clear()
            if time.monotonic() >= next_report:
                next_report = time.monotonic() + QUEUE_REPORT_INTERVAL
                await self._report_queue()
            if time.monotonic() >= next_state_poll:
                # Before the pause and capacity checks: a paused or saturated queue must
                # still learn of cancellations.
                next_state_poll = time.monotonic() + state_poll_every
                await self._poll_queue_state()
                await self._poll_cancellations()
            if self._paused or self.operator_stopped:
                await self._forget_flow_record()
                continue
            if self.may_claim is not None and not self.may_claim():
                continue
            now = time.monotonic()
            self._capacity = self.max_workers
            if (
                self._claim_ahead
                and self._last_fetch_full
                and now - last_fetch < AHEAD_WINDOW
                and now >= self._ahead_off_until
            ):
                self._capacity += self.max_workers
            free = self._capacity - self._slots_held - len(self._ahead)
            if free <= 0:
                self._fetch_when_slots_free = True
                continue
            if self._promotion_claim is not None:
                # A promotion is claiming with this queue's free slots: claiming beside it
                # would take them twice. take_promoted wakes this loop again.
                self._fetch_passed_over = True
                continue
            last_fetch = now
            self._fetching = True
            try:
                async with bounded(self._call_timeout, "claim"):
                    if self._flow is None:
                        rows = await self._driver.fetch(
                            self._dialect.job_get_available(
                                queue=self.queue,
                                max_to_lock=free,
                                client_id=self._client_id,
                                now=self.clock.now(),
                                kinds=self.fetch_kinds,
                            )
                        )
                    else:
                        rows = await self._claim_with_flow_control(self._flow, free)
            except DriverError as exc:
                self.fetch_errors += 1
                self.health.failed(exc, "fetching jobs")
                continue
            finally:
                self._fetching = False
            self.health.ok()
            self.fetches += 1
            self.last_fetch_count = len(rows)
            if self.fetch_metrics is not None:
                self.fetch_metrics(self.queue, time.monotonic() - last_fetch, len(rows))
            for listener in self.claim_listeners:
                try:
                    listener(self.queue, len(rows))
                except CALLBACK_FAILURES:
                    # An exporter's failure must not strand the jobs just claimed
                    # (running in the table, never started) nor end this loop.
                    log.exception("producer %s: claim listener %r failed", self.queue, listener)
            # Set before the jobs start: with eager task start (Python 3.12+) a short job
            # finishes inside _start_job, and its slot must already count toward a refill.
            # Under flow control a short claim means "held back" as often as "no
            # backlog": ending jobs refill the same way (a wake-up per release, debounced
            # by the cooldown; at once when half the slots are free).
            self._last_fetch_full = len(rows) == free
            self._fetch_when_slots_free = self._last_fetch_full or self._flow is not None
            for pending in self._take_rows(rows):
                await self._completer.add(pending)
            self._apply_cancels_while_claiming()

    def _take_rows(
        self, rows: Sequence[Sequence[Any]], *, hand_back: bool = False
    ) -> list[PendingCompletion]:
        """Run the rows a claim took (or hold them until a slot frees); with
        ``hand_back``, give them back unrun instead (a stop starts nothing new).
        Returns the outcomes of the rows that could not be read, for the completer."""
        unreadable: list[PendingCompletion] = []
        readable: list[JobRow] = []
        decode = self._dialect.decode_job
        for raw in rows:
            # One row that fails to decode must not kill the loop (the queue would stop)
            # nor strand the rest of the batch as running.
            try:
                row = decode(raw)
            except Exception:
                log.exception(
                    "producer %s: job %r could not be decoded; left running for the rescuer",
                    self.queue,
                    raw[0] if raw else None,
                )
                continue
            if row.decode_errors:  # failed by id, not run (runtime/outcomes.py)
                if self._counting_in_flight:
                    self._others_unwritten += 1  # running in the table until written
                unreadable.append(
                    undecodable_completion(row, self._exec_config.retry_policy, self.queue)
                )
                continue
            readable.append(row)
        if not hand_back and (self._ahead or len(readable) > self.max_workers - self._slots_held):
            # Some wait for a slot (claimed ahead): they start in the claim's order
            # (priority, scheduled_at, id), not in the order the statement returned
            # them (id order on both databases), or a job of priority 1 claimed with
            # one of priority 4 could wait behind it.
            readable.sort(key=_claim_order)
        for row in readable:
            if hand_back:
                self._hand_back(row)
            elif self._ahead or self._slots_held >= self.max_workers:
                self._hold(row)
            else:
                self._start_job(row)
        if self._ahead and self._slots_held < self.max_workers and not hand_back:
            self._start_ahead()
        return unreadable

    def _apply_cancels_while_claiming(self) -> None:
        """Cancel the jobs whose cancellation arrived while a claim was in flight, once
        none is: those it took have started (or are held), the others are no concern."""
        if self._fetching or self._promotion_claim is not None:
            return
        if self._cancelled_while_fetching:
            for job_id in self._cancelled_while_fetching:
                self.cancel_job(job_id)
            self._cancelled_while_fetching.clear()

    # -- claims by workflow promotions (runtime/workflow_promoter.py) --------------------
    def promotion_claim(self) -> PromoteClaim | None:
        """This queue's free slots, offered to a workflow promotion about to make tasks
        ready here: it moves them straight to running for this client (one write, no
        notification, no claim) and hands them to :meth:`take_promoted`.

        Offered only when this producer could claim now, plainly: not paused or
        stopping, no flow control (whose claim counts limits), allowed to claim by the
        registry, no jobs held, no claim of its own or other offer in flight. A promoted
        task passes no job waiting in the queue, heard of or not (poll-only, or a
        notification on its way): the statement claims nothing while any job is
        available and due there, and the producer, woken by the promotion, then claims
        the tasks made available in River's order. It used to offer only while its last
        claim had found the queue empty and no insert had woken it since; but it can't
        tell the echo of its own insert's notification from another client's, so a
        fan-out inserted by the client that works it had its first tasks sent through
        the queue in most runs (2 of 12 claimed here in a bench, 12 of 12 now)."""
        if (
            self._stopping
            or self._paused
            or self.operator_stopped
            or self._flow is not None
            or self._promotion_claim is not None
            or self._fetching
            or self._ahead
            or (self.may_claim is not None and not self.may_claim())
        ):
            return None
        free = self.max_workers - self._slots_held
        if free <= 0:
            return None
        claim = PromoteClaim(
            self.queue, free, self._client_id, now=self.clock.now(), kinds=self.fetch_kinds
        )
        self._promotion_claim = claim
        self._promotion_claim_done.clear()
        return claim

    def take_promoted(self, claim: PromoteClaim, rows: Sequence[Sequence[Any]]) -> None:
        """The rows the promotion offered ``claim`` took (none when it failed)."""
        if claim is not self._promotion_claim:
            log.error("producer %s: rows of a promotion claim it did not offer", self.queue)
        self._promotion_claim = None
        self._promotion_claim_done.set()
        if self._fetch_passed_over:  # the fetch passed over while the offer was out
            self._fetch_passed_over = False
            self._wake.set()
        if rows:
            self.promotion_claimed += len(rows)
            for listener in self.claim_listeners:
                try:
                    listener(self.queue, len(rows))
                except CALLBACK_FAILURES:
                    log.exception("producer %s: claim listener %r failed", self.queue, listener)
            # Taken while this producer stops: handed back unrun, like jobs claimed ahead.
            # In the producer's context: this runs in the completer's task.
            unreadable = self._job_context.run(self._take_rows, rows, hand_back=self._stopping)
            for pending in unreadable:
                if not self._completer.add_nowait(pending):  # past the high-water mark
                    adding = _start_task(self._completer.add(pending))
                    self._adding.add(adding)  # a task only weakly referenced may vanish
                    adding.add_done_callback(self._adding.discard)
        self._apply_cancels_while_claiming()

    async def _claim_with_flow_control(self, flow: FlowControl, free: int) -> list[Any]:
        """The claim of a queue with limits or sequences (riverboat.flow): one statement
        that counts and claims (on Postgres inside riverboat_flow_claim_jobs_v3, which
        takes the queue's lock first), so no other process counts between the two.

        A job counts as running until its outcome is written (the database's record
        says so): a limit as large as the fleet's slots would otherwise hold back every
        job whose predecessor's outcome is still buffered. On Postgres the claim is told
        this queue's plain completions still in the completer
        (``flow_claim_excludes_finished``) and records them, so that no claim of any
        process counts them; the completer writes them with its own durable commit,
        finalized_at no later than the job's end. Any other outcome of this queue still
        buffered (and, for a queue with sequences, every one: the next job of a sequence
        waits for its predecessor's) is written first, without the completer's flush
        delay. A queue limited as a whole counts this client by its jobs in flight
        instead (:meth:`_claim_counting_in_flight`)."""
        completer = self._completer
        if self._counting_in_flight:
            return await self._claim_counting_in_flight(flow, free)
        finished: list[PendingCompletion] = []
        others = False
        if completer.backlog:
            exclude = (
                self._dialect.flow_claim_excludes_finished
                and not flow.sequences
                and self.clock.now() is None  # ends are on the wall clock, as now() is
            )
            for pending in completer.buffered():
                job = pending.job
                if job.queue != self.queue:
                    continue
                # Its end set now, while it is still buffered: whenever the completer
                # takes it, it is written ending no later than the job did, which is
                # before the claim's start.
                if exclude and _end_plain_completion(pending):
                    finished.append(pending)
                else:
                    others = True
        if others:
            await self._write_outcomes_now()
        stmt = self._flow_claim(flow, free, finished=[(p.job.id, p.job.attempt) for p in finished])
        rows = list(await self._driver.fetch(stmt))
        if self._dialect.flow_claim_excludes_finished:
            await self._prune_flow_ended()
        if len(rows) < free and not completer.idle:
            # Fewer than asked: held back, maybe by outcomes the completer is writing
            # right now (still running in the table). Claim again once they are
            # written, not only at the next slot release or poll.
            self._wake_when_written()
        return rows

    def _flow_claim(
        self,
        flow: FlowControl,
        free: int,
        *,
        finished: Sequence[tuple[int, int]] = (),
        in_flight: int | None = None,
    ) -> Statement:
        """The dialect's flow-controlled claim of up to ``free`` of this queue's jobs, at
        the client's clock (the wall clock where ``in_flight`` is counted)."""
        return self._dialect.job_get_available_flow(
            queue=self.queue,
            max_to_lock=free,
            client_id=self._client_id,
            flow=flow,
            max_attempted_by=MAX_ATTEMPTED_BY,
            now=self.clock.now(),
            finished=finished,
            in_flight=in_flight,
        )

    @property
    def _counting_in_flight(self) -> bool:
        """Whether this claim counts the client by its jobs in flight: its queue allows it,
        no claim has failed, and time is the wall clock (a job's end is written on it)."""
        return self._counts_in_flight and self.clock.now() is None

    async def _write_outcomes_now(self) -> bool:
        """Have the completer write what it holds without its flush delay; True once
        all of it is written, False if that takes longer than FLOW_FLUSH_WAIT."""
        self._completer.flush_now()
        try:
            async with asyncio.timeout(FLOW_FLUSH_WAIT):
                await self._completer.wait_drained()
        except TimeoutError:
            return False
        return True

    async def _claim_counting_in_flight(self, flow: FlowControl, free: int) -> list[Any]:
        """:meth:`_claim_with_flow_control` for a whole-queue concurrency limit on
        Postgres: the claim is told how many of this client's jobs are in flight and
        records it for every other client's claims; finished jobs need no word (their
        slots are free, their completions end no later than they did)."""
        if self._others_unwritten:
            # Retries, failures, cancellations: written first (the table shows them
            # running until then).
            counted = self._others_unwritten
            if await self._write_outcomes_now():
                self._others_unwritten -= counted
        stmt = self._flow_claim(
            flow, free, in_flight=self._slots_held + len(self._ahead) + self._others_unwritten
        )
        # Held from here: a claim whose answer never came may have committed it.
        self._flow_record_held = True
        try:
            rows = list(await self._driver.fetch(stmt))
        except asyncio.CancelledError:  # a stop: nothing to say
            self._counts_in_flight = False
            raise
        except Exception:
            self._counts_in_flight = False
            log.warning(
                "producer %s: a flow-controlled claim failed and may have committed; this "
                "client's jobs of the queue are counted from the table from now on",
                self.queue,
            )
            raise
        await self._prune_flow_ended()
        return rows

    async def _forget_flow_record(self) -> None:
        """A producer that stops claiming (an operator's stop, a pause, a queue removed,
        the client stopping) deletes its record of jobs in flight (Postgres, a queue
        limited as a whole): the record changes only at its owner's next claim, so every
        other client of the queue kept counting the jobs it named, finished long since,
        for as long as this client lived (an operator-stopped queue: for ever; a soft
        stop: until its last job ended). Without the record its rows count, as they
        finish. A failure is logged and tried again at the next turn of the loop."""
        if not self._flow_record_held:
            return
        stmt = self._dialect.flow_forget_record(self.queue, self._client_id)
        if stmt is None:
            self._flow_record_held = False
            return
        try:
            async with bounded(self._call_timeout, "riverboat_flow_client"):
                await self._driver.execute(stmt)
        except DriverError as exc:
            log.warning(
                "producer %s: forgetting this client's flow record failed (tried again): %s",
                self.queue,
                exc,
            )
            return
        self._flow_record_held = False

    async def _prune_flow_ended(self) -> None:
        """At most every FLOW_ENDED_PRUNE_INTERVAL, after a claim: the stale records of
        finished jobs go (they never count, they only take room). A failure is logged
        and tried again at the next interval."""
        now = time.monotonic()
        if now - self._flow_pruned_at < FLOW_ENDED_PRUNE_INTERVAL:
            return
        self._flow_pruned_at = now
        try:
            await self._driver.execute(self._dialect.flow_ended_prune())
        except DriverError as exc:
            log.warning("producer %s: pruning riverboat_flow_ended failed: %s", self.queue, exc)

    def _wake_when_written(self) -> None:
        if self._wake_when_written_task is None:
            self._wake_when_written_task = asyncio.create_task(
                self._wake_once_drained(), name=f"riverboat-flow-wake-{self.queue}"
            )

    async def _wake_once_drained(self) -> None:
        try:
            await self._completer.wait_drained()
        finally:
            self._wake_when_written_task = None
        self._wake.set()

    async def _report_queue(self) -> None:
        try:
            async with bounded(self._call_timeout, "river_queue"):
                await self._driver.fetch(self._dialect.queue_create_or_set_updated_at(self.queue))
        except DriverError as exc:
            self.health.failed(exc, "refreshing river_queue")

    async def _poll_queue_state(self) -> None:
        try:
            async with bounded(self._call_timeout, "queue state"):
                rows = await self._driver.fetch(self._dialect.queue_get(self.queue))
        except DriverError as exc:
            self.health.failed(exc, "reading the queue's state")
            return
        if rows:
            self.set_paused(rows[0][_PAUSED_AT] is not None)

    async def _poll_cancellations(self) -> None:
        """Cancel running jobs whose cancellation was requested in the database (River's
        pollForJobCancellations), for a cancel notification that never arrived."""
        # Entries, not ids: by the time the read returns, a job may have finished and a
        # new attempt of it started here, which must not be cancelled.
        active = dict(self._active)
        ids = list(active)
        for start in range(0, len(ids), CANCEL_POLL_BATCH):
            batch = ids[start : start + CANCEL_POLL_BATCH]
            try:
                async with bounded(self._call_timeout, "cancel requests"):
                    rows = await self._driver.fetch(self._dialect.job_get_cancel_requested(batch))
            except DriverError as exc:
                self.health.failed(exc, "reading cancel requests")
                return
            for (job_id,) in rows:
                if self._active.get(job_id) is active.get(job_id):
                    self.cancel_job(job_id)

    # -- jobs claimed ahead -------------------------------------------------------------
    def _hold(self, row: JobRow) -> None:
        """Keep a claimed job until a slot frees (claiming ahead)."""
        now = time.monotonic()
        self._ahead.append((now, row))
        self._idle.clear()
        if self._ahead_timer is None:
            self._ahead_timer = asyncio.get_running_loop().call_later(
                AHEAD_MAX_WAIT, self._expire_ahead
            )

    def _start_ahead(self) -> None:
        """Start jobs claimed ahead while slots are free, oldest first. Runs from the
        loop, not from a finishing job: with eager task start a no-op job finishes
        inside _start_job, and starting the next from its slot release would nest."""
        self._ahead_scheduled = False
        if self._starting_ahead:
            return
        self._starting_ahead = True
        try:
            ahead = self._ahead
            while ahead and self._slots_held < self.max_workers and not self._stopping:
                self._start_job(ahead.popleft()[1])
        finally:
            self._starting_ahead = False
        if not ahead and self._slots_held == 0 and not self._active:
            self._idle.set()

    def _expire_ahead(self) -> None:
        """Hand back jobs claimed ahead that waited AHEAD_MAX_WAIT (jobs got slow), and
        claim no more ahead for AHEAD_BACKOFF."""
        self._ahead_timer = None
        ahead = self._ahead
        now = time.monotonic()
        expired = 0
        while ahead and ahead[0][0] <= now - AHEAD_MAX_WAIT:
            self._hand_back(ahead.popleft()[1])
            expired += 1
        if expired:
            self._ahead_off_until = now + AHEAD_BACKOFF
            log.info(
                "producer %s: %d jobs claimed ahead waited %gs for a slot and were handed "
                "back; no claiming ahead for %gs",
                self.queue,
                expired,
                AHEAD_MAX_WAIT,
                AHEAD_BACKOFF,
            )
        if ahead:
            self._ahead_timer = asyncio.get_running_loop().call_later(
                max(ahead[0][0] + AHEAD_MAX_WAIT - now, 0.0), self._expire_ahead
            )

    def _hand_back_ahead(self) -> None:
        while self._ahead:
            self._hand_back(self._ahead.popleft()[1])

    def _hand_back(self, row: JobRow) -> None:
        """A job claimed ahead goes back unrun: the interrupted outcome (available
        again, attempt rolled back), through the same path as a hard stop's."""
        self.handed_back += 1
        self._start_job(row, interrupted=True)

    def _cancel_ahead(self, job_id: int) -> bool:
        for index, (_, row) in enumerate(self._ahead):
            if row.id == job_id:
                del self._ahead[index]
                self._start_job(row, cancelled=True)  # finishes cancelled, body not run
                return True
        return False

    def _start_job(
        self, row: JobRow, *, interrupted: bool = False, cancelled: bool = False
    ) -> None:
        state = RunState()
        state.interrupted = self._interrupting or interrupted
        state.cancelled_remotely = cancelled
        if self._cancelled_while_fetching and row.id in self._cancelled_while_fetching:
            # Cancelled while the fetch that claimed it was in flight: flagged before it
            # starts, since with eager task start (3.12+) a short job would otherwise run
            # to completion inside this call, before the fetch loop applies the cancel.
            self._cancelled_while_fetching.discard(row.id)
            state.cancelled_remotely = True
        worker = self._exec_config.workers.get(row.kind)
        if worker is not None:
            in_process = runs_in_process(worker, self._exec_config)
            state.cancellable = worker.is_async or in_process
            timeout = timeout_for(worker, self._exec_config.job_timeout, row)
            if timeout is not None:
                # Armed when the job starts (execute_job), or when a child takes it
                # (process_pool.py): the wait for the task's first step doesn't count.
                state.timeout = timeout
                state.arm_deadline = self._arm_deadline
        self._slots_held += 1
        self._idle.clear()
        self.jobs_started += 1
        self._completer.workflow_task_started(row)
        task = _start_task(self._work(row, state))
        if not task.done():
            self._active[row.id] = (task, state)

    # -- timeouts of async and process jobs: one timer for the producer, at the nearest --
    def _arm_deadline(self, state: RunState) -> None:
        state.deadline = deadline = self._loop_time() + state.timeout
        if deadline < self._watch_at:
            self._watch(deadline)

    def _watch(self, when: float) -> None:
        if self._watch_handle is not None:
            self._watch_handle.cancel()
        self._watch_at = when
        self._watch_handle = asyncio.get_running_loop().call_at(when, self._check_deadlines)

    def _check_deadlines(self) -> None:
        """Cancel running async jobs past their deadline, report sync ones as stuck;
        re-arm for the next one.

        Jobs of one worker share a timeout, so the earliest deadline belongs to the
        oldest job and the timer fires about once per timeout, not once per job."""
        self._watch_handle = None
        self._watch_at = math.inf
        now = self._loop_time()
        nearest = math.inf
        for task, state in self._active.values():
            deadline = state.deadline
            if deadline is None or state.timed_out or state.stuck or state.past_body:
                continue
            if deadline <= now:
                if not state.cancellable:
                    self._report_stuck(state)
                    continue
                if state.reading_sent:
                    # A hard stop's read of the outcome the child was sending decides
                    # the job (bounded by SENT_READ_LIMIT): looked at again after it.
                    nearest = min(nearest, now + _process_pool.SENT_READ_LIMIT)
                    continue
                state.timed_out = True
                if state.started:
                    task.cancel()
            elif deadline < nearest:
                nearest = deadline
        if nearest != math.inf:
            self._watch(nearest)

    def _report_stuck(self, state: RunState) -> None:
        """A sync job ran past its timeout. Its thread can't be stopped, so (as River
        does with a job that ignores its context) the row stays running and the slot
        held until the body returns; say so once, and let a body that checks
        ``job.cancel_requested`` stop."""
        state.stuck = True
        job = state.job
        if job is None:
            return
        job._cancel_requested = True
        log.warning(
            "job %d (%s) appears to be stuck: still running past its timeout of %gs; a sync "
            "job's thread can't be interrupted, so it stays running (slot held) until it "
            "returns, and job.cancel_requested is now True",
            job.id,
            job.kind,
            state.timeout,
        )

    def _release_slot(self) -> None:
        self._slots_held -= 1
        if self._ahead:
            if not self._ahead_scheduled:
                self._ahead_scheduled = True
                asyncio.get_running_loop().call_soon(self._start_ahead)
        elif self._slots_held == 0 and not self._active:
            self._idle.set()
        if self._fetch_when_slots_free:
            self._wake.set()
            if not self._refill_without_cooldown:
                self._fetch_when_slots_free = False  # River: one wake-up, after the cooldown
            elif self._capacity - self._slots_held - len(self._ahead) >= self._refill_at:
                self._fetch_when_slots_free = False
                self._refill.set()

    async def _work(self, row: JobRow, state: RunState) -> None:
        try:
            pending = await execute_job(row, self._exec_config, state)
            state.ended = True
            if state.stuck and not state.interrupted and state.deadline is not None:
                log.info(
                    "job %d (%s) became unstuck after %.1fs",
                    row.id,
                    row.kind,
                    self._loop_time() - (state.deadline - state.timeout),
                )
            if state.orphaned:
                log.warning(
                    "job %d (%s): outcome dropped: this client lost its lease while the job "
                    "ran, so the job may have run again elsewhere",
                    row.id,
                    row.kind,
                )
            else:
                if self._counting_in_flight:
                    self._note_outcome(pending)
                # A job handed back by a stop (claimed ahead, or started while the stop
                # ran) goes at once too: the stop must not wait for room.
                past_mark = state.hand_over_now or state.interrupted
                if not self._completer.add_nowait(pending, past_mark=past_mark):
                    await self._hand_over(pending)
        except Exception:  # pragma: no cover - execute_job turns user errors into outcomes
            log.exception("producer %s: job %d failed outside its worker", self.queue, row.id)
        finally:
            self._completer.workflow_task_ended(row)
            self._active.pop(row.id, None)
            self._release_slot()

    async def _hand_over(self, pending: PendingCompletion) -> None:
        """Wait for room in the completer (past its high-water mark), holding the slot
        meanwhile so no more jobs are claimed. A cancel of the wait (a hard stop, a stop
        that gives up on this producer) still buffers the outcome, past the mark: the job
        ran, and an outcome dropped here would leave its row running for the rescuer,
        which would run it again."""
        try:
            await self._completer.add(pending)
        except asyncio.CancelledError:
            self._completer.add_nowait(pending, past_mark=True)
            raise

    def _note_outcome(self, pending: PendingCompletion) -> None:
        """A job of a queue counted by what is in flight ended; its slot goes next. A
        plain completion is written ending no later than the job did (before any claim
        that no longer counts it); any other outcome counts as in flight until written
        (the table shows it running until then)."""
        if not _end_plain_completion(pending):
            self._others_unwritten += 1

    def interrupt_running(self) -> int:
        """Hard stop: hand back every running job, *interrupted* (available again, the
        attempt rolled back, errors unchanged, a ``job_interrupted`` event: River 0.44).

        Async jobs are cancelled. A sync job's thread can't be stopped: its row is handed
        back now and whatever the thread does later is discarded. That is only safe
        because the client is going away; the thread is a daemon and won't hold the
        process. Returns how many jobs were handed back."""
        self._interrupting = True
        count = len(self._ahead)
        self._hand_back_ahead()
        for task, state in list(self._active.values()):
            if state.past_body:
                # Its code is over, its outcome decided: not handed back. Its error
                # handlers are cut short (execute_job writes the outcome without their
                # verdict), or its outcome waits for room in the completer (buffered
                # now, past the mark: _hand_over). Also when an earlier stop handed it
                # back: a second hard stop must not wait for it either.
                state.hand_over_now = True
                task.cancel()
                continue
            if state.interrupted or state.stopped_after_body:
                if (
                    state.orphaned
                    and not state.cancellable
                    and state.started
                    and task.cancelling() == 0
                ):
                    # Orphaned by a lost lease (orphan_running), which can't stop a
                    # thread: the stop leaves it, as it leaves a handed-back job's (a
                    # job whose code awaits on the loop, its body not called or
                    # returned, has none to leave).
                    if state.body_call is not None:
                        self._leave_thread(state)
                    task.cancel()
                continue
            # Whatever its outcome, it goes to the completer now, not after room there.
            state.hand_over_now = True
            call = state.body_call
            if call is not None and call.returned:
                # A sync job whose body has returned on its thread, its result not yet
                # back on the loop: it ran to its end, and handed back it would run
                # again. Its result goes on; what its code awaits next is cut short
                # (executor._call).
                call.kept = True
                state.stopped_after_body = True
                task.cancel()
                continue
            state.interrupted = True
            count += 1
            if state.job is not None:
                state.job._cancel_requested = True
            if not state.cancellable and state.started and state.body_call is not None:
                # (A sync job whose work middleware runs on the loop, its body not
                # called or returned, has no thread to leave behind.)
                self._leave_thread(state, "handed back (available again)")
            if state.started:
                task.cancel()
        return count

    def _leave_thread(self, state: RunState, what: str = "its outcome dropped") -> None:
        """A hard stop leaves a sync job's thread running: counted and logged."""
        self.abandoned_threads += 1
        log.warning(
            "job %d (%s): %s while its thread still runs; what that thread does from now "
            "on is discarded",
            state.job.id if state.job is not None else -1,
            state.job.kind if state.job is not None else "?",
            what,
        )

    async def stop(self, *, cancel_running: bool = False) -> None:
        """Stop fetching; wait for running jobs (handing them all back first when
        ``cancel_running``: they are then *interrupted*, River's hard-stop outcome).
        :meth:`interrupt_running` may also be called while this waits."""
        self._stopping = True
        self._wake.set()
        self._refill.set()
        if self._task is not None:
            await self._task
            self._task = None
        # A promotion claiming for this queue hands its rows over (back, unrun) before the
        # wait for running jobs below; its statement is bounded by the call deadline.
        await self._promotion_claim_done.wait()
        # Claimed ahead, not started: handed back, not run (a stop starts nothing new).
        self._hand_back_ahead()
        if self._ahead_timer is not None:
            self._ahead_timer.cancel()
            self._ahead_timer = None
        if self._wake_when_written_task is not None:
            self._wake_when_written_task.cancel()
        if cancel_running:
            self.interrupt_running()
        # Claims are over: the record goes while the running jobs finish (beside them, so
        # a database that doesn't answer delays nothing here but itself).
        forget = asyncio.ensure_future(self._forget_flow_record())
        tasks = [task for task, _ in self._active.values()]
        try:
            await asyncio.gather(forget, *tasks, return_exceptions=True)
        finally:
            forget.cancel()
        if self._watch_handle is not None:
            self._watch_handle.cancel()
            self._watch_handle = None
        self._pool.shutdown(wait=False)
        if self.process_pool is not None:
            await self.process_pool.close()

    async def wait_idle(self) -> None:
        await self._idle.wait()


def _claim_order(row: JobRow) -> tuple[int, datetime, int]:
    """River's claim order: priority, then scheduled_at, then id."""
    return row.priority, row.scheduled_at, row.id


def _ask_to_stop(task: asyncio.Task[Any], state: RunState) -> None:
    """Ask a running job to stop: ``job.cancel_requested`` turns True, and an async job
    that has started is cancelled (a thread can't be; one cancelled before it started
    never runs, and its flags tell what to write)."""
    if state.job is not None:
        state.job._cancel_requested = True
    if state.cancellable and state.started and not state.ended:
        task.cancel()
