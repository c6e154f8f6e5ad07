"""The running part of an AsyncClient: completer, notifier, producers, events.

Start order: check the database and schema version, start the completer, the notifier
(unless poll-only or the driver cannot LISTEN), then one producer per queue. Stop order
is the reverse, so every outcome a job produced is written before the client stops:
producers stop fetching and their jobs finish (or are interrupted on a hard stop), the
completer flushes, then the notifier closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from riverboat._clock import Clock
from riverboat._insert import InsertDefaults, validate_queue
from riverboat._insert_plan import NotifyLimiter
from riverboat._seconds import is_seconds
from riverboat.drivers.base import AsyncDriver, call_deadline
from riverboat.errors import DriverError, InvalidInputError, MigrationError, NotFoundError
from riverboat.flow import FlowControl, partition_args_keys
from riverboat.runtime._waiting import wait_event
from riverboat.runtime.completer import Completer
from riverboat.runtime.events import Event, EventKind, Subscription
from riverboat.runtime.executor import ExecutorConfig
from riverboat.runtime.health import DEFAULT_CALL_TIMEOUT, bounded
from riverboat.runtime.notifier import Notifier
from riverboat.runtime.outcomes import RetryPolicy
from riverboat.runtime.producer import (
    DEFAULT_FETCH_COOLDOWN,
    MAX_WORKERS_LIMIT,
    Producer,
    QueueConfig,
)
from riverboat.runtime.registry import (
    DEAD_AFTER,
    HEARTBEAT_INTERVAL,
    ClientRegistry,
    check_heartbeat,
)
from riverboat.runtime.sync_events import SyncSubscription
from riverboat.runtime.worker import Workers, prepare_for_process
from riverboat.runtime.workflow_promoter import WorkflowPromoter
from riverboat.wait import WAIT_TOPIC, FinalizedSignals

if TYPE_CHECKING:
    from riverboat.middleware import MiddlewareStack
    from riverboat.runtime.elector import Elector
    from riverboat.runtime.maintenance import Maintainer, MaintenanceContext
    from riverboat.runtime.maintenance.config import MaintenanceConfig
    from riverboat.runtime.maintenance.periodic_job import PeriodicJob
    from riverboat.runtime.maintenance.rescuer import DeadClientRescuer

__all__ = ["DEFAULT_SOFT_STOP_TIMEOUT", "IDLE_HORIZON", "STOP_GRACE", "Runtime", "RuntimeConfig"]

log = logging.getLogger("riverboat.client")

LISTEN_WAIT = 5.0  # seconds start() waits for the notifier's LISTEN before producers start

# Kubernetes sends SIGTERM and SIGKILLs 30 s later (its default grace period; ECS and
# Cloud Run use 30 s too, Heroku 30 s). Handing jobs back after 25 s leaves about 5 s to
# write their outcomes and exit before the SIGKILL, so a deploy never leaves rows
# `running` for the rescuer to find an hour later.
DEFAULT_SOFT_STOP_TIMEOUT = 25.0

# Seconds a stop may take past soft_stop_timeout (past its start for a hard stop) to
# write the outcomes of the jobs it handed back and close: whatever the network does, a
# stop ends by then, leaving what it could not write `running` for the rescuer (and
# saying so). Within Kubernetes' 30 s grace period with the 25 s default.
STOP_GRACE = 4.0

# A drain (run_until_idle, --exit-when-idle) is not over while a job in the client's
# queues is available or will be within this many seconds: River makes a retry or snooze
# that close `available` at once (its scheduler interval), and one due a little later
# is promoted by the scheduler within another interval.
IDLE_HORIZON = 5.0
# drained(): seconds between its questions while they fail, and how long they may fail in
# a row before the error is raised.
DRAIN_RETRY = 1.0
DRAIN_GIVE_UP = 60.0


@dataclass(slots=True)
class RuntimeConfig:
    queues: dict[str, QueueConfig]  # queue_add / queue_remove change it
    workers: Workers
    # None: River's 100 ms, with backlog refills not waiting for it (runtime/producer.py).
    fetch_cooldown: float | None = None
    fetch_poll_interval: float = 1.0
    job_timeout: float | None = 60.0
    poll_only: bool = False
    # River 0.48's LeaderElectionDisabled, inverted: False works jobs without running
    # for leader, so this client runs no maintenance.
    leader_election: bool = True
    # River 0.48's FetchOnlyKnownKinds: claim only jobs of kinds the workers take
    # (aliases included), leaving others available for clients that do.
    fetch_only_known_kinds: bool = False
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    completer_batch_threshold: int = 100
    completer_flush_delay: float = 0.05
    # Whether a workflow promotion after this client's completions may claim the tasks it
    # makes ready for this client's producer of their queue (runtime/workflow_promoter.py;
    # Postgres). Off: they become available and are claimed as any job.
    promotion_claims: bool = True
    # How long a stop keeps trying to write buffered outcomes (River: 1 minute).
    completer_drain_timeout: float | None = 60.0
    # Leader election and maintenance (riverboat.runtime.elector / .maintenance).
    maintenance: MaintenanceConfig | None = None
    periodic_jobs: list[PeriodicJob] = field(default_factory=list)
    # The client's riverboat.middleware.MiddlewareStack (work middleware, start hooks).
    middleware: MiddlewareStack | None = None
    insert_defaults: InsertDefaults = field(default_factory=InsertDefaults)
    # The client's insert notify limiter, shared with the periodic enqueuer.
    notify_limiter: NotifyLimiter = field(default_factory=NotifyLimiter)
    # River's SoftStopTimeout: how long a soft stop waits for running jobs before it
    # hands them back as a hard stop does. None (or -1) waits for ever, River's default.
    soft_stop_timeout: float | None = DEFAULT_SOFT_STOP_TIMEOUT
    # Seconds each database call of the producers, completer, notifier and elector may
    # take before its connection is dropped and the call retried on a fresh one; the
    # LISTEN connection is checked after this long without traffic (runtime/health.py).
    # None: no deadline.
    db_call_timeout: float | None = DEFAULT_CALL_TIMEOUT
    # riverboat's registry of live clients (runtime/registry.py): heartbeat period
    # (None: no registry) and how long after the last heartbeat this client counts dead.
    heartbeat_interval: float | None = HEARTBEAT_INTERVAL
    dead_after: float = DEAD_AFTER

    def validate_queue_config(
        self, name: str, cfg: QueueConfig, *, name_field: str, where: str
    ) -> None:
        """One queue's name and settings, for the client's queues and for queue_add
        (the fields errors name: ``name_field`` for the name, ``where`` for the rest)."""
        validate_queue(name, name_field)
        if not isinstance(cfg, QueueConfig):
            raise InvalidInputError(where, "must be a riverboat.QueueConfig")
        if self.fetch_only_known_kinds and FlowControl.of(cfg) is not None:
            # The flow-controlled claim (riverboat.flow) has no kind filter yet.
            raise InvalidInputError(
                "fetch_only_known_kinds",
                f"queue {name!r} has flow control, which can't be combined with it yet",
            )
        if (
            isinstance(cfg.max_workers, bool)
            or not isinstance(cfg.max_workers, int)
            or not (1 <= cfg.max_workers <= MAX_WORKERS_LIMIT)
        ):
            raise InvalidInputError(f"{where}.max_workers", f"must be 1..{MAX_WORKERS_LIMIT}")
        for attr in ("fetch_cooldown", "fetch_poll_interval"):
            value = getattr(cfg, attr)
            if value is not None and not is_seconds(value, at_least=0.001):
                raise InvalidInputError(f"{where}.{attr}", "must be ≥ 0.001 s")
        validate_executor(name, cfg, self.workers, where)

    def validate(self) -> None:
        """Every option checked when the client is built, as River's NewClient refuses
        a bad config: a wrong value or type surfaced at start(), or as a Python error
        from deep inside (``maintenance`` given as a dict)."""
        from riverboat.runtime.maintenance.config import MaintenanceConfig

        if not isinstance(self.workers, Workers):
            raise InvalidInputError("workers", "must be a riverboat.Workers registry")
        if self.maintenance is not None and not isinstance(self.maintenance, MaintenanceConfig):
            raise InvalidInputError("maintenance", "must be a riverboat.MaintenanceConfig")
        if not callable(getattr(self.retry_policy, "next_retry", None)):
            raise InvalidInputError(
                "retry_policy", "must be a riverboat.RetryPolicy (an object with next_retry)"
            )
        for name, cfg in self.queues.items():
            where = f"queues[{name!r}]"
            self.validate_queue_config(name, cfg, name_field=where, where=where)
        for kind in self.workers:
            worker = self.workers.get(kind)
            if worker is not None and worker.executor == "process":
                prepare_for_process(worker)
        if self.fetch_cooldown is not None and not is_seconds(self.fetch_cooldown, at_least=0.001):
            raise InvalidInputError("fetch_cooldown", "must be at least 0.001 s")
        if not is_seconds(self.fetch_poll_interval):
            raise InvalidInputError("fetch_poll_interval", "must be a finite number of seconds")
        if self.fetch_poll_interval < (self.fetch_cooldown or DEFAULT_FETCH_COOLDOWN):
            raise InvalidInputError("fetch_poll_interval", "must be ≥ fetch_cooldown")
        if (
            self.job_timeout is not None
            and self.job_timeout != -1
            and not is_seconds(self.job_timeout, positive=True)
        ):
            raise InvalidInputError("job_timeout", "must be positive, -1 (none) or None")
        if self.maintenance is not None:
            # What the rescuer asks when the client wins leadership: checked there, it
            # failed start() after the producers had claimed (and run) jobs.
            self.maintenance.rescue_after(self.job_timeout)
        self.soft_stop_timeout = check_soft_stop_timeout(self.soft_stop_timeout)
        timeout = self.db_call_timeout
        if timeout is not None and not is_seconds(timeout, positive=True):
            raise InvalidInputError(
                "db_call_timeout", "must be a positive number of seconds or None"
            )
        check_heartbeat(self.heartbeat_interval, self.dead_after)


MIN_PROCESS_MEMORY_LIMIT = 64 * 1024 * 1024  # a child's interpreter needs about 30 MiB
# setrlimit's largest: past it every child failed to start (OverflowError) and every
# process job was discarded.
MAX_PROCESS_MEMORY_LIMIT = 2**63 - 1


def validate_executor(name: str, cfg: QueueConfig, workers: Workers, where: str) -> None:
    """A queue's executor settings; for a process queue, that a child can import every
    plain def worker that takes the queue's executor (InvalidInputError naming the
    worker otherwise, before the client starts: mark such a worker executor="thread")."""
    if cfg.executor not in ("thread", "process"):
        raise InvalidInputError(f"{where}.executor", 'must be "thread" or "process"')
    size = cfg.process_pool_size
    if size is not None and (
        isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_WORKERS_LIMIT
    ):
        raise InvalidInputError(f"{where}.process_pool_size", f"must be 1..{MAX_WORKERS_LIMIT}")
    limit = cfg.process_memory_limit
    if limit is not None and (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not MIN_PROCESS_MEMORY_LIMIT <= limit <= MAX_PROCESS_MEMORY_LIMIT
    ):
        raise InvalidInputError(
            f"{where}.process_memory_limit",
            "must be bytes, at least 64 MiB and below 2**63 (or None)",
        )
    if cfg.executor != "process":
        return
    for kind in workers:
        worker = workers.get(kind)
        if worker is None or worker.is_async or worker.executor is not None:
            continue
        try:
            prepare_for_process(worker)
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"{where}.executor",
                f'"process" can\'t run the worker for {kind!r}: {exc}; define it at a '
                'module\'s top level, or register it with executor="thread"',
            ) from None


def check_soft_stop_timeout(value: object) -> float | None:
    """``soft_stop_timeout`` as seconds, or None for no limit (-1 also means none)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError("soft_stop_timeout", "must be seconds (a number), -1 or None")
    if value == -1:
        return None
    if not is_seconds(value):
        raise InvalidInputError("soft_stop_timeout", "must be ≥ 0 seconds, -1 (none) or None")
    return float(value)


class Service(Protocol):
    """Something the runtime stops after its producers (:meth:`Runtime.add_service`)."""

    async def stop(self) -> None: ...


class Runtime:
    def __init__(
        self, driver: AsyncDriver, client_id: str, config: RuntimeConfig, clock: Clock | None = None
    ) -> None:
        config.validate()
        self.driver = driver
        self.client_id = client_id
        self.config = config
        # Subscription (asyncio) or, for the sync Client, SyncSubscription
        self._subscriptions: list[Subscription | SyncSubscription] = []
        self.completer: Completer | None = None
        self.workflow_promoter: WorkflowPromoter | None = None
        self.finalized_signals: FinalizedSignals | None = None
        self.notifier: Notifier | None = None
        self.producers: dict[str, Producer] = {}
        self.started = False
        self._stopped = asyncio.Event()
        # The stop under way or done (see stop()), until the next start.
        self._stopping: asyncio.Future[None] | None = None
        # Since when drained()'s questions fail (None: the last one succeeded), and when
        # it asks again.
        self._drain_failing_since: float | None = None
        self._drain_retry_at = 0.0
        self.schema_name = ""
        self._extra_services: list[Service] = []
        self.on_start: list[Callable[[Runtime], Any]] = []
        # The live periodic job set (client.periodic_jobs): checked here, before start.
        from riverboat.runtime.maintenance.periodic import PeriodicJobs

        self.periodic_jobs = PeriodicJobs(config.periodic_jobs)
        # The client's clock (riverboat/_clock.py): what claims and the scheduler take as
        # now. start() hands this one object to the producers and the maintenance.
        self.clock = clock if clock is not None else Clock()
        self._maintenance_ctx: MaintenanceContext | None = None
        self._dead_client_rescuer: DeadClientRescuer | None = None  # rescue_dead_client's
        self.registry: ClientRegistry | None = None
        # Leader election and maintenance: made by start() unless leader_election is off.
        self.elector: Elector | None = None
        self.maintainer: Maintainer | None = None

    # -- events ----------------------------------------------------------------------
    def subscribe(self, kinds: Iterable[EventKind | str], maxsize: int = 1000) -> Subscription:
        chosen = [EventKind(k) for k in kinds] or list(EventKind)
        sub = Subscription(chosen, maxsize, self._unsubscribe)
        self._subscriptions.append(sub)
        return sub

    def _unsubscribe(self, sub: Subscription | SyncSubscription) -> None:
        if sub in self._subscriptions:
            self._subscriptions.remove(sub)

    def _emit(self, event: Event) -> None:
        for sub in self._subscriptions:
            sub._offer(event)

    def _want_events(self) -> bool:
        return bool(self._subscriptions)

    async def _sweeps_workflows_here(self) -> bool:
        """Whether this client runs the fleet's sweep of pending workflow tasks now
        (runtime/workflow_promoter.py): it is the live client with queues whose id is
        smallest in the registry, or there is no registry to ask (riverboat's migration
        line not applied, or this client out of it), or the registry names no one."""
        registry = self.registry
        if registry is None or not registry.enabled or registry.lost:
            return True
        rows = await self.driver.fetch(self.driver.dialect.client_sweeper())
        sweeper = rows[0][0] if rows else None
        return sweeper is None or sweeper == self.client_id

    async def _check_flow_control_schema(self) -> None:
        queue = await _flow_claim_needs_riverboat_line(self.driver, self.config.queues)
        if queue is not None:
            raise MigrationError(
                f"queue {queue!r} has flow control, whose claim needs riverboat's migration "
                "line: run `riverboat migrate up`"
            )

    # -- lifecycle -------------------------------------------------------------------
    async def start(self) -> None:
        if self._stopping is not None and not self._stopping.done():
            # A stop its caller gave up on ends first; its failure was logged (below),
            # and is not this start's.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._stopping)
        self._stopping = None
        try:
            await self._start()
        except Exception:
            # Past the producers' start (leadership's services, a middleware's attach()
            # hook), jobs may be claimed and running: a failed start was left with them
            # running and its tasks pending. Stop what began, handing those jobs back.
            # A cancelled start (Ctrl-C while starting) propagates at once, as before,
            # rather than awaiting a stop inside a cancelled task.
            if self.producers or self.completer is not None:
                self.started = True
                try:
                    await self.stop(cancel_running=True)
                except Exception:
                    log.exception("start failed, and so did stopping what it had started")
            raise

    async def _start(self) -> None:
        dialect = self.driver.dialect
        cfg = self.config
        async with bounded(cfg.db_call_timeout, "ping"):
            await self.driver.fetch(dialect.stmt("ping"))
        await check_schema_version(self.driver)
        await warn_lost_indexes(self.driver)
        await self._check_flow_control_schema()
        if dialect.schema:
            self.schema_name = dialect.schema
        elif dialect.name == "postgres":
            async with bounded(cfg.db_call_timeout, "current_schema"):
                rows = await self.driver.fetch(dialect.stmt("current_schema"))
            self.schema_name = rows[0][0] if rows else "public"
        self.workflow_promoter = WorkflowPromoter(
            self.driver,
            self.wake_queues_now,
            self._sweeps_workflows_here,
            claimer=self.producers.get if cfg.promotion_claims else None,
        )
        self.finalized_signals = FinalizedSignals(self.driver)
        self.completer = Completer(
            self.driver,
            emit=self._emit,
            want_events=self._want_events,
            batch_threshold=cfg.completer_batch_threshold,
            flush_delay=cfg.completer_flush_delay,
            on_workflow_finalized=self.workflow_promoter.after_finalized,
            finalized_signals=self.finalized_signals,
        )
        # The completer's task inherits the call deadline: each of its writes answers
        # within db_call_timeout or its connection is dropped and the batch retried.
        # So does the workflow sweep's.
        with call_deadline(cfg.db_call_timeout):
            self.completer.start()
            if cfg.queues:
                self.workflow_promoter.start()
        stack = cfg.middleware
        executor_config = ExecutorConfig(
            cfg.workers,
            cfg.job_timeout,
            cfg.retry_policy,
            None,
            stack if stack is not None and (stack.has_work or stack.error_handlers) else None,
        )
        self._executor_config = executor_config
        if cfg.heartbeat_interval is not None:
            # Recorded as alive before the first claim: a claimed job's client is known.
            self.registry = ClientRegistry(self, cfg.heartbeat_interval, cfg.dead_after)
            await self.registry.start()
            if self.registry.enabled:
                self.completer.may_write = self.registry.may_write
        for name, qcfg in cfg.queues.items():
            self.producers[name] = self._make_producer(name, qcfg)
        if not cfg.poll_only and self.driver.capabilities.listen:
            self.notifier = Notifier(self.driver, self.schema_name, cfg.db_call_timeout)
            self.notifier.subscribe(WAIT_TOPIC, self.finalized_signals.heard)
            for producer in self.producers.values():
                self.notifier.subscribe("river_insert", producer.handle_insert)
                self.notifier.subscribe("river_control", producer.handle_control)
                self.notifier.on_reconnect(producer.wake)
            self.notifier.start()
            # Producers start once LISTEN is in place (bounded: they poll meanwhile), so
            # a cancel or pause sent for a job this client claims first is heard, not
            # left to the once-a-minute re-read of cancel requests.
            await wait_event(self.notifier.connected, LISTEN_WAIT)
        for producer in self.producers.values():
            producer.poll_queue_state = self.notifier is None
            await producer.start()
        self.elector = self.maintainer = None
        if cfg.leader_election:
            self._start_leadership()
        self._start_periodic_publisher()
        for hook in self.on_start:
            result = hook(self)
            if asyncio.iscoroutine(result):
                await result
        self.started = True
        self._stopped.clear()

    def _make_producer(self, name: str, qcfg: QueueConfig) -> Producer:
        cfg = self.config
        assert self.completer is not None  # made by start() before any producer
        producer = Producer(
            queue=name,
            config=qcfg,
            driver=self.driver,
            client_id=self.client_id,
            completer=self.completer,
            executor_config=self._executor_config,
            fetch_cooldown=qcfg.fetch_cooldown or cfg.fetch_cooldown or DEFAULT_FETCH_COOLDOWN,
            fetch_poll_interval=qcfg.fetch_poll_interval or cfg.fetch_poll_interval,
            emit=self._emit,
            refill_without_cooldown=qcfg.fetch_cooldown is None and cfg.fetch_cooldown is None,
            call_timeout=cfg.db_call_timeout,
            # Half the registry's horizon: a child of a frozen worker leaves its job well
            # before the leader hands the job to another worker.
            child_lease=cfg.dead_after / 2,
        )
        if cfg.middleware is not None:  # metric_emit hooks (River's HookMetricEmit)
            producer.fetch_metrics = cfg.middleware.fetch_metrics()
        producer.clock = self.clock
        if cfg.fetch_only_known_kinds:
            producer.fetch_kinds = cfg.workers.known_kinds()
        if self.registry is not None:
            producer.may_claim = self.registry.may_claim
        return producer

    # -- queues at runtime (River's client.Queues().Add / Remove) ------------------------
    async def add_queue(self, name: str, qcfg: QueueConfig) -> None:
        """Work ``name`` too: at once when running, from the next start otherwise."""
        # The same checks as the client's own queues (a max_workers of 0 made a producer
        # that never claimed), naming the argument.
        self.config.validate_queue_config(name, qcfg, name_field="queue", where="config")
        if name in self.config.queues:
            raise InvalidInputError("queue", f"{name!r} is already worked by this client")
        self.config.queues[name] = qcfg
        if not self.started:
            return
        producer = self.producers[name] = self._make_producer(name, qcfg)
        if self.notifier is not None:
            self.notifier.subscribe("river_insert", producer.handle_insert)
            self.notifier.subscribe("river_control", producer.handle_control)
            self.notifier.on_reconnect(producer.wake)
        producer.poll_queue_state = self.notifier is None
        await producer.start()

    async def remove_queue(self, name: str) -> None:
        """Stop working ``name``: its producer stops fetching and this returns once its
        running jobs have finished and their outcomes are buffered (River's Remove)."""
        if name not in self.config.queues:
            raise NotFoundError(f"queue {name!r} is not worked by this client")
        del self.config.queues[name]
        producer = self.producers.pop(name, None)
        if producer is None:
            return
        if self.notifier is not None:
            self.notifier.unsubscribe("river_insert", producer.handle_insert)
            self.notifier.unsubscribe("river_control", producer.handle_control)
            self.notifier.off_reconnect(producer.wake)
        await producer.stop()

    # -- leader election and maintenance (riverboat.runtime.elector / .maintenance) -----
    def _maintenance_context(self) -> MaintenanceContext:
        """The context the maintenance services run in (built once)."""
        from riverboat.runtime.maintenance import MaintenanceConfig, MaintenanceContext

        if self._maintenance_ctx is not None:
            return self._maintenance_ctx
        cfg = self.config
        mcfg = cfg.maintenance if cfg.maintenance is not None else MaintenanceConfig()
        self._maintenance_ctx = MaintenanceContext(
            driver=self.driver,
            client_id=self.client_id,
            config=mcfg,
            workers=cfg.workers,
            retry_policy=cfg.retry_policy,
            job_timeout=cfg.job_timeout,
            wake_queues=self.wake_queues,
            middleware=cfg.middleware,
            clock=self.clock,
            notify_limiter=cfg.notify_limiter,
            dead_after=cfg.dead_after,
            args_keys=lambda: partition_args_keys(self.config.queues),
        )
        return self._maintenance_ctx

    async def rescue_dead_client(self, client_id: str) -> None:
        """Rescue the jobs of ``client_id`` and remove its row when its registry lease
        ran out, as the leader's dead-client rescue does (runtime/maintenance/rescuer.py):
        for this client while it waits for its own id (runtime/registry.py), which only
        riverboat's leader would otherwise free, never a Go River leader."""
        from riverboat.runtime.maintenance.rescuer import DeadClientRescuer

        # One rescuer for the waits: it asks once whether riverboat's migration line is
        # applied, where a new one each heartbeat asked again every time.
        if self._dead_client_rescuer is None:
            self._dead_client_rescuer = DeadClientRescuer(self._maintenance_context())
        await self._dead_client_rescuer.rescue_client(client_id)

    def _start_leadership(self) -> None:
        """Run for leader, and run the maintenance services while leading."""
        from riverboat.runtime.elector import Elector
        from riverboat.runtime.maintenance import Maintainer, build_services

        cfg = self.config
        ctx = self._maintenance_context()
        mcfg = ctx.config
        elector = Elector(self.driver, self.client_id, mcfg.elector, notifier=self.notifier)
        maintainer = Maintainer(
            elector,
            build_services(ctx, self.periodic_jobs, cfg.insert_defaults),
            call_timeout=cfg.db_call_timeout,
        )
        self.elector, self.maintainer = elector, maintainer
        maintainer.start()
        elector.start()

    def _start_periodic_publisher(self) -> None:
        """Every client declares its periodic jobs (and runtime changes) to the leader,
        whichever client leads: one built with leader_election=False too (a web process
        adding a periodic job at runtime), which never reached the leader before."""
        from riverboat.runtime.maintenance.periodic import PeriodicPublisher

        publisher = PeriodicPublisher(self.driver, self.periodic_jobs, self.config.insert_defaults)
        publisher.start()
        self.add_service(publisher)

    async def _stop_leadership(self) -> None:
        if self.maintainer is not None:
            await self.maintainer.stop()
        if self.elector is not None:
            await self.elector.stop()  # resigns, notifying the others

    def wake_queues(self, queues: Iterable[str]) -> None:
        """Local wake-up after this client inserted jobs (poll-only mode and SQLite)."""
        for queue in queues:
            producer = self.producers.get(queue)
            if producer is not None:
                producer.wake()

    def wake_queues_now(self, queues: Iterable[str]) -> None:
        """Local wake-up, cooldown cut short, for workflow tasks just promoted."""
        for queue in queues:
            producer = self.producers.get(queue)
            if producer is not None:
                producer.wake_now()

    def add_service(self, service: Service) -> None:
        """Register something with async ``stop()`` to stop after the producers."""
        self._extra_services.append(service)

    async def _stop_services(self) -> None:
        await self._stop_leadership()
        if self.workflow_promoter is not None:
            await self.workflow_promoter.stop()
        for service in self._extra_services:
            await service.stop()

    async def stop(self, *, cancel_running: bool = False) -> None:
        """Stop: producers stop fetching and their jobs finish (or are handed back: at
        once with ``cancel_running``, after ``soft_stop_timeout`` otherwise), every
        outcome is written, then the notifier closes.

        With a ``soft_stop_timeout`` the whole stop ends within it plus
        :data:`STOP_GRACE` whatever the database does: what can't be written by then
        (outcomes, a claim in flight) is left ``running`` for the rescuer and logged.

        The stop runs in a task of its own, which a caller that stops waiting (a
        ``wait_for(client.stop(), 5)`` that times out, a job stopping its own client
        and handed back by that stop) does not cancel: a cancelled caller used to leave
        the stop half done for good (the completer, registry and notifier running, the
        jobs' rows running), with every later stop returning at once. A later stop or
        close waits for the same task; with ``cancel_running``, after handing the
        running jobs back."""
        stopping = self._stopping
        if stopping is None or stopping.done():
            if not self.started:
                return
            self.started = False
            stopping = self._stopping = asyncio.ensure_future(self._stop(cancel_running))
            stopping.add_done_callback(_log_stop_failure)
        elif cancel_running:
            self.interrupt_running()
        await asyncio.shield(stopping)

    @property
    def stopping(self) -> bool:
        """A stop is under way (one whose caller may have stopped waiting for it)."""
        return self._stopping is not None and not self._stopping.done()

    async def _stop(self, cancel_running: bool) -> None:
        loop = asyncio.get_running_loop()
        limit = self.config.soft_stop_timeout
        # As River's, the soft stop's clock starts when the stop does.
        hard_at = None if limit is None else loop.time() + limit
        give_up_at = None
        if hard_at is not None:
            give_up_at = (loop.time() if cancel_running else hard_at) + STOP_GRACE
        # Leadership (resigning) and maintenance stop alongside the producers, so a
        # database that doesn't answer delays the two once, not one after the other.
        services = asyncio.ensure_future(self._stop_services())
        stops = [
            asyncio.ensure_future(p.stop(cancel_running=cancel_running))
            for p in self.producers.values()
        ]
        if stops and not cancel_running and hard_at is not None:
            _, waiting = await asyncio.wait(stops, timeout=max(0.0, hard_at - loop.time()))
            if waiting:
                running = sum(p.active for p in self.producers.values())
                log.warning(
                    "soft stop timeout of %gs passed with %d jobs still running; handing "
                    "them back (available again, attempt restored)",
                    limit,
                    running,
                )
                self.interrupt_running()
        if stops and give_up_at is not None:
            _, waiting = await asyncio.wait(stops, timeout=max(0.0, give_up_at - loop.time()))
            if waiting:
                # A producer still waiting on the database (a claim with no answer):
                # whatever that claim locked stays running for the rescuer.
                log.warning(
                    "stop: %d producers still waiting for the database %gs past the "
                    "soft stop timeout; abandoning them (jobs a claim in flight took "
                    "stay running for the rescuer)",
                    len(waiting),
                    STOP_GRACE,
                )
                for task in waiting:
                    task.cancel()
                await asyncio.wait(waiting)
        await asyncio.gather(*[task for task in stops if not task.cancelled()])
        if self.completer is not None:
            drain = self.config.completer_drain_timeout
            if give_up_at is not None:
                left = round(max(give_up_at - loop.time(), 0.5), 1)
                drain = left if drain is None else min(drain, left)
            await self.completer.stop(drain)
        if give_up_at is None:
            await services
        else:
            await asyncio.wait([services], timeout=max(give_up_at - loop.time(), 0.5))
            if not services.done():
                log.warning(
                    "stop: leader resignation and maintenance still waiting for the "
                    "database; abandoned (the leadership expires with its term)"
                )
                services.cancel()
        if services.done() and not services.cancelled() and services.exception() is not None:
            log.warning("stop: stopping maintenance failed: %s", services.exception())
        if self.registry is not None:
            # A clean stop leaves no row (nothing for the leader to rescue), bounded like
            # the rest of the stop: without a database the row simply expires.
            wait = None if give_up_at is None else max(give_up_at - loop.time(), 0.5)
            try:
                async with asyncio.timeout(wait):
                    await self.registry.stop()
            except TimeoutError:
                log.warning("stop: leaving the registry of live clients timed out")
        if self.notifier is not None:
            await self.notifier.stop()
        self._stopped.set()

    def interrupt_running(self) -> int:
        """Hard stop the running jobs of every queue (see Producer.interrupt_running)."""
        return sum(p.interrupt_running() for p in self.producers.values())

    @property
    def abandoned_threads(self) -> int:
        """Sync jobs handed back by a hard stop while their threads still ran."""
        return sum(p.abandoned_threads for p in self.producers.values())

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def is_idle(self) -> bool:
        """No job running, no outcome unwritten, and every producer's last fetch came
        back empty (the in-memory half of :meth:`drained`)."""
        if self.completer is not None and not self.completer.idle:
            return False
        return all(
            p.active == 0 and p.last_fetch_count == 0 and not p.paused
            for p in self.producers.values()
        )

    def wake_settled(self) -> None:
        """Wake each producer whose jobs all finished, their outcomes written, but whose
        last fetch found some: it fetches again now instead of at its poll interval (1 s
        by default), so a queue that was emptied is seen as drained at once
        (``run_until_idle``, ``riverboat worker --exit-when-idle``)."""
        if self.completer is not None and not self.completer.idle:
            return
        self.wake_queues(
            name
            for name, producer in self.producers.items()
            if producer.active == 0 and producer.last_fetch_count > 0 and not producer.paused
        )

    async def drained(self, horizon: float = IDLE_HORIZON) -> bool:
        """True when :meth:`is_idle` and no job of this client's queues is available, or
        will be within ``horizon`` seconds (retries and snoozes due soon). Logs what is
        left for later when it says True with jobs still waiting.

        A database error is a "no" (said once in the log), and the questions pause for
        DRAIN_RETRY before the next, as the runtime's other loops retry theirs; raised,
        one connection dropped during the check ended ``riverboat worker
        --exit-when-idle`` and ``run_until_idle`` with an error, every job done. Errors
        for DRAIN_GIVE_UP seconds in a row are raised (a database that is gone, a
        schema without the table). Its questions have the runtime's
        ``db_call_timeout``, as its other calls: a network that stopped answering held
        the check (and the worker's exit) for ever."""
        if not self.is_idle():
            return False
        failing_since = self._drain_failing_since
        now = time.monotonic()
        if failing_since is not None and now < self._drain_retry_at:
            return False
        dialect = self.driver.dialect
        queues = list(self.producers)
        try:
            with call_deadline(self.config.db_call_timeout):
                # A cheap question first: an idle client held back by a flow limit asks
                # every poll, and the count reads the whole backlog.
                [(due,)] = await self.driver.fetch(dialect.job_due_exists(queues, horizon))
                if due or not self.is_idle():
                    return False
                rows = await self.driver.fetch(dialect.job_count_upcoming(queues, horizon))
        except DriverError as exc:
            if failing_since is None:
                log.warning("drained: checking for jobs left failed (asking again): %s", exc)
                self._drain_failing_since = failing_since = now
            elif now - failing_since >= DRAIN_GIVE_UP:
                raise
            self._drain_retry_at = time.monotonic() + DRAIN_RETRY
            return False
        self._drain_failing_since = None
        if any(due for _, due, _, _ in rows) or not self.is_idle():
            return False
        later = [(state, total, first) for state, _, total, first in rows if total]
        if later:
            log.info(
                "drained: nothing due within %gs; left for later: %s",
                horizon,
                ", ".join(f"{total} {state} (next at {first})" for state, total, first in later),
            )
        return True


def _log_stop_failure(stopping: asyncio.Future[None]) -> None:
    """A stop's failure, logged whether or not anyone still waits for it (a caller
    that gave up would never see it: "Task exception was never retrieved")."""
    if not stopping.cancelled() and (exc := stopping.exception()) is not None:
        log.error("stop failed: %s: %s", type(exc).__name__, exc, exc_info=exc)


async def _flow_claim_needs_riverboat_line(
    driver: AsyncDriver, queues: dict[str, Any]
) -> str | None:
    """The first queue with flow control when its claim needs riverboat's migration line
    (Postgres: the riverboat_flow_claim_jobs_v3 function) and the line is not at the
    version that creates it."""
    from riverboat.flow import FLOW_CLAIM_LINE_VERSION, FlowControl
    from riverboat.migrations import applied_version_async

    limited = [name for name, qcfg in queues.items() if FlowControl.of(qcfg) is not None]
    if not limited or driver.dialect.name != "postgres":
        return None
    if await applied_version_async(driver, "riverboat") >= FLOW_CLAIM_LINE_VERSION:
        return None
    return limited[0]


async def warn_lost_indexes(driver: AsyncDriver) -> None:
    """On SQLite, one WARNING when River's rebuild of ``river_job`` dropped indexes that
    riverboat's migrations created: the client works, but every workflow lookup reads
    the whole table until they are put back (``riverboat migrate validate`` says the
    same and exits 1)."""
    from riverboat.migrations import lost_indexes_advice, lost_indexes_async

    lost = await lost_indexes_async(driver)
    if not lost:
        return
    line = min(line for line, _, _ in lost)
    what, fix = lost_indexes_advice(line, [(v, name) for ln, v, name in lost if ln == line])
    log.warning(
        "riverboat's %s; workflow lookups read the whole table until they are back: %s",
        what,
        fix,
    )


async def check_schema_version(driver: AsyncDriver) -> None:
    """Refuse to run on a schema older than River's bulk-unique migration (006)."""
    try:
        from riverboat.migrations import require_current_async
    except ImportError:  # pragma: no cover - the migrations package always ships it
        return
    await require_current_async(driver)
