"""Client (sync) and AsyncClient: inserting jobs, and running workers.

Both clients are thin: the statements and their encoding come from the dialect
(``riverboat.dialect``), validation from ``riverboat._insert``, and each method is one
driver call. The ``*_tx`` forms run inside the caller's open transaction, so a job
commits or rolls back with the caller's own rows.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, cast

from riverboat._admin import T, _hears_notifications
from riverboat._client_async import AsyncClientBase
from riverboat._client_core import (
    _ClientCore,
    default_client_id,
)
from riverboat._client_sync import ClientBase
from riverboat._clock import Clock
from riverboat._insert import InsertParams
from riverboat._options import check_option_names
from riverboat.errors import InvalidInputError, NotFoundError
from riverboat.flow import partition_args_keys
from riverboat.runtime.events import EventKind, Subscription
from riverboat.runtime.health import DEFAULT_CALL_TIMEOUT
from riverboat.runtime.maintenance.periodic import PeriodicJob, PeriodicJobs
from riverboat.runtime.outcomes import RetryPolicy
from riverboat.runtime.producer import QueueConfig
from riverboat.runtime.registry import DEAD_AFTER, HEARTBEAT_INTERVAL
from riverboat.runtime.runner import (
    DEFAULT_SOFT_STOP_TIMEOUT,
    IDLE_HORIZON,
    Runtime,
    RuntimeConfig,
)
from riverboat.runtime.sync_events import SyncSubscription
from riverboat.runtime.worker import Workers

if TYPE_CHECKING:
    from riverboat.drivers.base import AsyncDriver, Driver
    from riverboat.runtime.maintenance import MaintenanceConfig

__all__ = ["AsyncClient", "Client", "ClientOptions", "default_client_id"]

log = logging.getLogger("riverboat.client")


class ClientOptions(TypedDict, total=False):
    """The keyword arguments of :class:`Client` and :class:`AsyncClient` (River's
    ``Config``); the sync client hands the runtime ones to its embedded AsyncClient.

    - ``id``: this client's name in ``attempted_by`` and leader election (default: host
      name and a random suffix, as River's).
    - ``schema``: where River's tables live (default: the driver's).
    - ``queues``, ``workers``: what to work; without ``queues`` the client only inserts
      and administers.
    - ``max_attempts``: the default for inserted jobs (25).
    - ``fetch_cooldown``, ``fetch_poll_interval``: the producer's pacing (see
      docs/operations.md; the poll interval defaults to 1 s).
    - ``job_timeout``: seconds a job may run (60; ``None`` for no limit).
    - ``poll_only``: never LISTEN; poll instead (for poolers that drop LISTEN).
    - ``fetch_only_known_kinds``: claim only jobs of the kinds ``workers`` take
      (aliases included), so clients with different workers can share a queue; other
      jobs stay available without using attempts (River's ``FetchOnlyKnownKinds``).
    - ``leader_election``: ``False`` works jobs without running for leader, so this
      client runs no maintenance (River's ``LeaderElectionDisabled``); other clients
      on the database schedule, rescue, clean and enqueue periodic jobs.
    - ``retry_policy``: when a failed job runs again (default: River's backoff).
    - ``skip_unknown_job_check``: insert kinds no worker here handles.
    - ``maintenance``: a :class:`~riverboat.MaintenanceConfig` (default: River's
      intervals and retention).
    - ``periodic_jobs``: :class:`~riverboat.PeriodicJob` s the leader enqueues.
    - ``middleware``: insert and work middleware, outermost first.
    - ``soft_stop_timeout``: how long ``stop()`` waits for running jobs before handing
      them back (25 s).
    - ``db_call_timeout``: seconds each database call of the worker runtime (claims,
      completions, LISTEN, leader election, maintenance) may take before its connection
      is dropped and the call retried on a fresh one (10 s; ``None``: no deadline).
    - ``heartbeat_interval``: how often a working client records itself in riverboat's
      registry of live clients (5 s; ``None`` turns the registry off), and
      ``dead_after``: how long after its last heartbeat it counts as dead and its running
      jobs run elsewhere (30 s). See docs/fleet.md.
    - ``owns_driver``: ``close()`` closes the driver too (always so for a driver the
      client built from a URL); for code that makes a driver only for this client."""

    id: str | None
    schema: str | None
    queues: Mapping[str, QueueConfig] | None
    workers: Workers | None
    max_attempts: int
    fetch_cooldown: float | None
    fetch_poll_interval: float
    job_timeout: float | None
    poll_only: bool
    leader_election: bool
    fetch_only_known_kinds: bool
    retry_policy: RetryPolicy | None
    skip_unknown_job_check: bool
    maintenance: MaintenanceConfig | None
    periodic_jobs: Sequence[PeriodicJob]
    middleware: Sequence[object] | None
    soft_stop_timeout: float | None
    db_call_timeout: float | None
    owns_driver: bool
    heartbeat_interval: float | None
    dead_after: float


_CLIENT_OPTIONS = ClientOptions.__optional_keys__


def _check_queues(queues: object) -> None:
    if queues is not None and not isinstance(queues, Mapping):
        raise InvalidInputError("queues", "must be a dict of queue name to riverboat.QueueConfig")


def _runtime_config(options: ClientOptions, core: _ClientCore) -> RuntimeConfig:
    """The worker runtime's settings from a client's options (both clients: the async
    one runs them, the sync one checks them when made and hands the options to the
    AsyncClient it embeds at start)."""
    workers = options.get("workers")
    return RuntimeConfig(
        queues=dict(options.get("queues") or {}),
        workers=workers if workers is not None else Workers(),
        fetch_cooldown=options.get("fetch_cooldown"),
        fetch_poll_interval=options.get("fetch_poll_interval", 1.0),
        job_timeout=options.get("job_timeout", 60.0),
        poll_only=options.get("poll_only", False),
        leader_election=options.get("leader_election", True),
        fetch_only_known_kinds=options.get("fetch_only_known_kinds", False),
        retry_policy=options.get("retry_policy") or RetryPolicy(),
        maintenance=options.get("maintenance"),
        periodic_jobs=list(options.get("periodic_jobs", ())),
        insert_defaults=core.defaults,
        notify_limiter=core.limiter,
        middleware=core.middleware,
        soft_stop_timeout=options.get("soft_stop_timeout", DEFAULT_SOFT_STOP_TIMEOUT),
        db_call_timeout=options.get("db_call_timeout", DEFAULT_CALL_TIMEOUT),
        heartbeat_interval=options.get("heartbeat_interval", HEARTBEAT_INTERVAL),
        dead_after=options.get("dead_after", DEAD_AFTER),
    )


def _core_for(
    driver: Driver | AsyncDriver | str, options: ClientOptions, *, want_async: bool
) -> _ClientCore:
    _check_queues(options.get("queues"))
    core = _ClientCore(
        driver,
        options.get("schema"),
        options.get("id"),
        options.get("max_attempts", 25),
        options.get("fetch_cooldown"),
        options.get("middleware"),
        options.get("workers"),
        want_async=want_async,
    )
    core.skip_unknown_job_check = bool(options.get("skip_unknown_job_check", False))
    core.owns_driver = core.owns_driver or bool(options.get("owns_driver", False))
    core.flow_args_keys = partition_args_keys(options.get("queues"))
    return core


class Client(ClientBase):
    """The synchronous client: inserts and administration from ordinary code.

    ``driver`` is a sync driver (``PsycopgDriver``, ``SqliteDriver``...) or a URL. With
    ``queues`` and ``workers`` it can also work jobs: ``start()`` runs the asyncio runtime
    on a background thread (embedded mode) over the driver's async twin, and ``stop()``
    stops it, so a sync program never has to touch an event loop.
    """

    def __init__(self, driver: Driver | str, **options: Unpack[ClientOptions]) -> None:
        check_option_names(options, _CLIENT_OPTIONS, "a Client option")
        self._core = _core_for(driver, options, want_async=False)
        # The core checked the driver's capabilities: sync here.
        self.driver = cast("Driver", self._core.driver)
        self._embedded: _Embedded | None = None
        if queues := options.get("queues"):
            # Checked now, as the AsyncClient checks its own; the runtime is built at
            # start(), on its thread.
            settings = _runtime_config(options, self._core)
            settings.validate()
            # The embedded runtime's own AsyncClient, on the driver's async twin; it
            # shares this client's id and middleware instances.
            embedded_options: ClientOptions = {
                **options,
                "id": self._core.id,
                "middleware": self._core.middleware.items,
                "owns_driver": False,  # _Embedded closes the async twin itself
            }
            self._embedded = _Embedded(
                lambda: AsyncClient(self.driver.async_driver(), **embedded_options),
                self._core.clock,
                settings,
            )
            self._embedded.base_queues = set(queues)
            self._embedded.periodic = PeriodicJobs(options.get("periodic_jobs", ()))

    def start(self) -> None:
        """Start working jobs on a background thread (embedded mode)."""
        if self._embedded is None:
            raise InvalidInputError("queues", "this client has no queues; it is insert-only")
        self._embedded.start()

    def stop(self) -> None:
        """Soft stop: running jobs finish (or are handed back after
        ``soft_stop_timeout``) and every outcome is written."""
        if self._embedded is not None:
            self._embedded.stop(cancel_running=False)

    def stop_and_cancel(self) -> None:
        """Hard stop: running jobs are handed back (interrupted); every outcome is
        written (see AsyncClient.stop_and_cancel)."""
        if self._embedded is not None:
            self._embedded.stop(cancel_running=True)

    def run_until_idle(self) -> None:
        """Work until every queue is drained, then stop."""
        if self._embedded is None:
            raise InvalidInputError("queues", "this client has no queues; it is insert-only")
        self._embedded.run_until_idle()

    @property
    def async_client(self) -> AsyncClient | None:
        """The embedded runtime's AsyncClient, once started."""
        return self._embedded.client if self._embedded is not None else None

    def subscribe(self, *kinds: EventKind | str, maxsize: int = 1000) -> SyncSubscription:
        """Events from this client's runtime (all kinds when none are given), read
        from any thread with ``get(timeout=)`` or by iterating; River's ``Subscribe``.
        May be called before ``start()``; it lasts across restarts until ``close()``."""
        if self._embedded is None:
            raise InvalidInputError("queues", "this client has no queues; it is insert-only")
        chosen = [EventKind(k) for k in kinds] or list(EventKind)
        sub = SyncSubscription(chosen, maxsize, self._embedded.unsubscribe)
        self._embedded.subscribe(sub)
        return sub

    def queue_add(self, name: str, config: QueueConfig) -> None:
        """Work queue ``name`` too (see :meth:`AsyncClient.queue_add`); kept across
        restarts."""
        self._running_queues().queue_change(name, config)
        self._core.set_flow_args_keys(name, config)

    def queue_remove(self, name: str) -> None:
        """Stop working queue ``name`` once its running jobs finish (see
        :meth:`AsyncClient.queue_remove`); kept across restarts."""
        self._running_queues().queue_change(name, None)
        self._core.set_flow_args_keys(name, None)

    @property
    def periodic_jobs(self) -> PeriodicJobs:
        """The client's periodic jobs, changeable from any thread, before or while it
        runs (see :attr:`AsyncClient.periodic_jobs`); kept across restarts."""
        return self._running_queues().periodic

    def _running_queues(self) -> _Embedded:
        if self._embedded is None:
            raise InvalidInputError("queues", "this client has no queues; it is insert-only")
        return self._embedded

    @property
    def stopped(self) -> threading.Event:
        """Set once a started client has fully stopped: jobs finished or handed back,
        outcomes written (River's ``Stopped()``); cleared again by ``start()``."""
        if self._embedded is None:
            raise InvalidInputError("queues", "this client has no queues; it is insert-only")
        return self._embedded.stopped

    def _after_insert(self, jobs: Sequence[InsertParams]) -> None:
        if self._embedded is not None:
            self._embedded.wake({j.queue for j in jobs if j.state == "available"})

    def _apply_local(self, effect: Callable[[T, Runtime], None], result: T) -> None:
        # The embedded runtime lives on its own loop thread: hand the effect to that loop.
        embedded = self._embedded
        client = embedded.client if embedded is not None else None
        loop = embedded._loop if embedded is not None else None
        runtime = client._runtime if client is not None else None
        if runtime is not None and loop is not None and not _hears_notifications(runtime):
            loop.call_soon_threadsafe(effect, result, runtime)

    def close(self) -> None:
        if self._embedded is not None and self._embedded.running:
            self._embedded.stop(cancel_running=False)
        if self._core.owns_driver:
            self.driver.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(AsyncClientBase):
    """The asyncio client: inserts, administration, and the worker runtime.

    Without ``queues`` it is insert-only. With ``queues`` and ``workers``, ``start()``
    runs a producer per queue, the batch completer and the notifier until ``stop()``.
    """

    def __init__(self, driver: AsyncDriver | str, **options: Unpack[ClientOptions]) -> None:
        check_option_names(options, _CLIENT_OPTIONS, "a Client option")
        self._core = _core_for(driver, options, want_async=True)
        # The core checked the driver's capabilities: async here.
        self.driver = cast("AsyncDriver", self._core.driver)
        self._runtime: Runtime | None = None
        workers = options.get("workers")
        if options.get("queues"):
            self._runtime = Runtime(
                self.driver, self._core.id, _runtime_config(options, self._core), self._core.clock
            )
            self._runtime.on_start.append(self._core.middleware.on_start)
        elif workers is not None and not isinstance(workers, Workers):
            raise InvalidInputError("workers", "must be a riverboat.Workers registry")

    # -- runtime ---------------------------------------------------------------------
    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            raise InvalidInputError("queues", "this client has no queues; it is insert-only")
        return self._runtime

    async def start(self) -> None:
        """Start working jobs: completer, notifier and one producer per queue."""
        await self.runtime.start()

    async def stop(self) -> None:
        """Soft stop: stop fetching, let running jobs finish, write every outcome. Jobs
        still running after ``soft_stop_timeout`` (25 s by default) are handed back as
        :meth:`stop_and_cancel` does."""
        if self._runtime is not None:
            await self._runtime.stop()

    async def stop_and_cancel(self) -> None:
        """Hard stop: hand back every running job (*interrupted*: available again, the
        attempt rolled back, errors unchanged; River 0.44) and write every outcome. Async
        jobs are cancelled; a sync job's thread can't be, so it is left running as a
        daemon thread and what it does afterwards is discarded."""
        if self._runtime is not None:
            await self._runtime.stop(cancel_running=True)

    @property
    def periodic_jobs(self) -> PeriodicJobs:
        """The client's periodic jobs, changeable while it runs (River's
        ``PeriodicJobs()``): ``add``, ``add_many``, ``remove(handle)``, ``remove_by_id``,
        ``clear``; changes reach the leader at once."""
        return self.runtime.periodic_jobs

    async def queue_add(self, name: str, config: QueueConfig) -> None:
        """Work queue ``name`` too, without a restart (River's ``Queues().Add``): at once
        when running, from ``start()`` otherwise. Raises InvalidInputError for a queue
        already worked, or on an insert-only client."""
        await self.runtime.add_queue(name, config)
        self._core.set_flow_args_keys(name, config)

    async def queue_remove(self, name: str) -> None:
        """Stop working queue ``name`` (River's ``Queues().Remove``): its producer stops
        fetching, and this returns once the jobs it was running have finished and their
        outcomes are buffered for writing. Raises NotFoundError for a queue not worked."""
        await self.runtime.remove_queue(name)
        self._core.set_flow_args_keys(name, None)

    @property
    def stopped(self) -> asyncio.Event:
        """Set once a started client has fully stopped: jobs finished or handed back,
        outcomes written (River's ``Stopped()``): ``await client.stopped.wait()``.
        Cleared again by ``start()``."""
        return self.runtime._stopped

    def subscribe(self, *kinds: EventKind | str, maxsize: int = 1000) -> Subscription:
        """Events for the given kinds (all when none are named), delivered after each
        outcome is written. Slow subscribers lose events rather than slowing jobs."""
        return self.runtime.subscribe(kinds, maxsize)

    async def run_until_idle(self, *, poll: float = 0.05, horizon: float = IDLE_HORIZON) -> None:
        """Start if needed, work until every queue is drained, then stop (soft).

        Drained means nothing running and no job of these queues available or due within
        ``horizon`` seconds (a retry or snooze due soon is waited for); what is due later
        is left, and logged."""
        runtime = self.runtime
        if not runtime.started:
            await runtime.start()
        try:
            while not await runtime.drained(horizon):
                runtime.wake_settled()
                await asyncio.sleep(poll)
        finally:
            await runtime.stop()

    def _after_insert(self, jobs: Sequence[InsertParams]) -> None:
        if self._runtime is not None and self._runtime.started:
            self._runtime.wake_queues({j.queue for j in jobs if j.state == "available"})

    def _apply_local(self, effect: Callable[[T, Runtime], None], result: T) -> None:
        runtime = self._runtime
        if runtime is not None and runtime.started and not _hears_notifications(runtime):
            effect(result, runtime)

    def add_middleware(self, middleware: object) -> None:
        """Add ``middleware`` inside the ones this client was made with, before
        ``start()`` (what ``riverboat worker --metrics-port`` does to instrument the
        client it loads)."""
        if self._runtime is not None and self._runtime.started:
            raise RuntimeError("add middleware before the client starts")
        self._core.middleware.add(middleware)

    async def close(self) -> None:
        """Stop the runtime if it runs (a soft stop, as ``Client.close()`` does), then
        close the driver when the client made it from a URL."""
        runtime = self._runtime
        try:
            if runtime is not None and (runtime.started or runtime.stopping):
                await runtime.stop()  # or waits for the stop under way
        finally:
            if self._core.owns_driver:
                await self.driver.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _run_surviving_exits(loop: asyncio.AbstractEventLoop) -> None:
    """The sync client's event loop, in its own thread, until it is stopped. A
    SystemExit or KeyboardInterrupt that a callback raises inside it (a periodic job's
    constructor calling sys.exit(), say) would end the loop, and asyncio lets it: the
    thread then died silently and every call of the client waited for it forever. Here
    it is logged and the loop goes on; the callback's own task has ended with it."""
    while True:
        try:
            loop.run_forever()
            return
        except (SystemExit, KeyboardInterrupt) as exc:
            log.error(
                "riverboat: %s raised inside the client's event loop (by a callback such "
                "as a periodic job's constructor); the loop goes on",
                type(exc).__name__,
                exc_info=exc,
            )


class _Embedded:
    """An AsyncClient running on its own event loop in a background thread."""

    def __init__(
        self, factory: Callable[[], AsyncClient], clock: Clock, settings: RuntimeConfig
    ) -> None:
        self._factory = factory
        self.client: AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.running = False
        self.stopped = threading.Event()
        self._stop_lock = threading.Lock()
        # The sync client's subscriptions, registered with each runtime it starts.
        self.subscribers: list[SyncSubscription] = []
        self.base_queues: set[str] = set()  # the queues the client was made with
        self.periodic = PeriodicJobs()  # shared with each runtime it starts
        # Queues added (a config) or removed (None) since construction.
        self.queue_changes: dict[str, QueueConfig | None] = {}
        self.clock = clock  # the sync client's: each runtime it starts shares it
        # The settings checked when the client was made: queue_add checks against them
        # while stopped, as the running runtime would.
        self.settings = settings

    def queue_change(self, name: str, config: QueueConfig | None) -> None:
        client = self.client
        if client is not None and self.running:
            if config is None:
                self._call(client.queue_remove(name))
            else:
                self._call(client.queue_add(name, config))
        else:
            # Checked now, as a running client would: on a throwaway runtime config.
            queues = self._queues_after_changes()
            if config is None and name not in queues:
                raise NotFoundError(f"queue {name!r} is not worked by this client")
            if config is not None:
                self.settings.validate_queue_config(
                    name, config, name_field="queue", where="config"
                )
                if name in queues:
                    raise InvalidInputError("queue", f"{name!r} is already worked by this client")
        self.queue_changes[name] = config

    def _queues_after_changes(self) -> set[str]:
        names = set(self.base_queues)
        for name, config in self.queue_changes.items():
            if config is None:
                names.discard(name)
            else:
                names.add(name)
        return names

    def subscribe(self, sub: SyncSubscription) -> None:
        self.subscribers.append(sub)
        client, loop = self.client, self._loop
        if client is not None and loop is not None and client._runtime is not None:
            loop.call_soon_threadsafe(client._runtime._subscriptions.append, sub)

    def unsubscribe(self, sub: SyncSubscription) -> None:
        if sub in self.subscribers:
            self.subscribers.remove(sub)
        client, loop = self.client, self._loop
        if client is not None and loop is not None and client._runtime is not None:
            loop.call_soon_threadsafe(client._runtime._unsubscribe, sub)

    def start(self) -> None:
        if self.running:
            return
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=_run_surviving_exits, args=(loop,), name="riverboat-runtime", daemon=True
        )
        self._thread.start()
        try:
            self.client = self._call(self._make())
            self._call(self.client.start())
        except BaseException:
            # A start that fails (no database, a bad option) must not leave the loop's
            # thread and the async driver behind.
            self._shutdown()
            raise
        self.running = True
        self.stopped.clear()

    async def _make(self) -> AsyncClient:
        client: AsyncClient = self._factory()
        if client._runtime is not None:
            client._runtime._subscriptions.extend(self.subscribers)
            client._runtime.periodic_jobs = self.periodic
            # Before start() hands the runtime's clock to its producers and services.
            client._core.clock = client._runtime.clock = self.clock
            queues = client._runtime.config.queues
            for name, config in self.queue_changes.items():
                if config is None:
                    queues.pop(name, None)
                else:
                    queues[name] = config
        return client

    def _call(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def wake(self, queues: set[str]) -> None:
        client, loop = self.client, self._loop
        if client is not None and loop is not None and client._runtime is not None:
            loop.call_soon_threadsafe(client._runtime.wake_queues, queues)

    def run_until_idle(self) -> None:
        self.start()
        assert self.client is not None
        self._call(self.client.run_until_idle())
        self._shutdown()

    def stop(self, *, cancel_running: bool) -> None:
        # One stop at a time: a job's thread stopping its own client beside the main
        # thread's stop, both then shutting the loop down, could wait for ever on a
        # loop the other had stopped. The second waits for the first, then finds it done.
        with self._stop_lock:
            if not self.running or self.client is None:
                return
            if cancel_running:
                self._call(self.client.stop_and_cancel())
            else:
                self._call(self.client.stop())
            self._shutdown()

    def _shutdown(self) -> None:
        if self.client is not None:
            try:
                self._call(self.client.driver.close())
            except Exception:  # closing must not hide why we are shutting down
                log.exception("closing the embedded runtime's driver failed")
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
        self._loop = self._thread = None
        self.client = None
        if self.running:
            self.stopped.set()
        self.running = False
