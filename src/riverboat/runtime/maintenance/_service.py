"""The loop every maintenance service shares: its own interval, its own error backoff.

A service runs once at start (after a small random stagger), then every ``interval``.
When a run fails it backs off exponentially (``error_backoff_base`` doubling up to
``error_backoff_max``, ±10%) and during a backoff nothing but stopping ends the wait:
:meth:`Service.wake` (or anything else that nudges the service) is ignored until the
backoff has passed, so a burst of ordinary wake-ups cannot hammer a failing database.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from riverboat._clock import Clock
from riverboat._insert_plan import NotifyLimiter
from riverboat.dialect.base import Dialect
from riverboat.drivers.base import AsyncDriver
from riverboat.errors import DriverError
from riverboat.runtime._waiting import backoff_delay, wait_any
from riverboat.runtime.registry import DEAD_AFTER

if TYPE_CHECKING:
    from riverboat.runtime.maintenance.config import MaintenanceConfig
    from riverboat.runtime.outcomes import RetryPolicy
    from riverboat.runtime.worker import Workers

__all__ = ["MaintenanceContext", "Service", "ServiceStats", "backoff_delay"]

log = logging.getLogger("riverboat.maintenance")

RUN_STARTS_KEPT = 100


@dataclass(slots=True)
class MaintenanceContext:
    """What the services need from the runtime."""

    driver: AsyncDriver
    client_id: str
    config: MaintenanceConfig
    workers: Workers
    retry_policy: RetryPolicy
    job_timeout: float | None
    wake_queues: Callable[[Iterable[str]], None] = lambda queues: None
    # The client's riverboat.middleware.MiddlewareStack: periodic runs go through its
    # insert hooks like any insert (OpenTelemetry trace propagation, say).
    middleware: Any = None
    # The client's clock (riverboat/_clock.py): the scheduler's now.
    clock: Clock = field(default_factory=Clock)
    # The client's: periodic runs notify their queues as the client's own inserts do.
    notify_limiter: NotifyLimiter = field(default_factory=NotifyLimiter)
    # The client's registry dead_after (runtime/registry.py): on SQLite the dead-client
    # rescue waits this long after this client's writes last waited for the lock.
    dead_after: float = DEAD_AFTER
    # Per queue of the client, the args keys its limits are partitioned by (by_args;
    # riverboat.flow.partition_args_keys), as they are now: periodic runs must have
    # them, as the client's inserts must.
    args_keys: Callable[[], Mapping[str, tuple[str, ...]]] = dict

    @property
    def dialect(self) -> Dialect:
        dialect: Dialect = self.driver.dialect
        return dialect


@dataclass(slots=True)
class ServiceStats:
    """One maintenance service's runs so far. ``consecutive_errors`` sets the error
    backoff; ``wakes_ignored`` counts the wake-ups that came during a backoff, which
    they may not cut short."""

    runs: int = 0
    successes: int = 0
    errors: int = 0
    consecutive_errors: int = 0
    wakes_ignored: int = 0
    last_error: BaseException | None = None
    # time.monotonic() of each run's start (the last RUN_STARTS_KEPT), and the end of the
    # current error backoff (0 when not backing off).
    run_started: list[float] = field(default_factory=list)
    backoff_until: float = 0.0


class Service:
    """Base class: override :meth:`run_once` (and :meth:`next_delay` for timers)."""

    name: ClassVar[str] = "service"

    def __init__(self, ctx: MaintenanceContext, interval: float) -> None:
        self.ctx = ctx
        self.interval = interval
        self.stats = ServiceStats()
        self._wake = asyncio.Event()
        self._changed = asyncio.Condition()
        self._stop: asyncio.Event | None = None
        # Set by the Maintainer to the elector's trusts_leadership: checked before every
        # run and between batches, so a leader that froze past its term never acts again.
        self.still_leading: Callable[[], bool] = lambda: True

    # -- hooks -------------------------------------------------------------------------
    async def run_once(self) -> None:
        raise NotImplementedError

    def next_delay(self) -> float:
        """Seconds from the end of a successful run to the next one."""
        return self.interval

    async def on_start(self) -> None:
        """Called each time the service starts (leadership gained)."""

    def run_time_limit(self) -> float | None:
        """The time limit of one run (``None``: none); the config's ``run_timeout``."""
        return self.ctx.config.run_timeout

    # -- signals -----------------------------------------------------------------------
    def wake(self) -> None:
        """Run now instead of at the next interval, unless backing off after an error."""
        if time.monotonic() < self.stats.backoff_until:
            self.stats.wakes_ignored += 1
            return
        self._wake.set()

    async def wait_for(self, predicate: Callable[[ServiceStats], bool]) -> ServiceStats:
        """Wait until ``predicate(stats)`` holds (checked after every run)."""
        async with self._changed:
            await self._changed.wait_for(lambda: predicate(self.stats))
        return self.stats

    # -- the loop ----------------------------------------------------------------------
    async def _sleep(self, seconds: float, stop: asyncio.Event, *, wakeable: bool) -> None:
        await wait_any((stop, self._wake) if wakeable else (stop,), seconds)

    async def in_batches(self, run_batch: Callable[[int], Awaitable[int]]) -> None:
        """Call ``run_batch(max)`` (it returns how many rows it met, at most ``max``: the
        config's ``batch_size``) until a batch comes back short or the service is
        stopping, with River's random pause between full batches."""
        batch = self.ctx.config.batch_size
        while await run_batch(batch) >= batch and not self.stopping:
            await self.pause_between_batches()

    async def pause_between_batches(self) -> None:
        cfg = self.ctx.config
        stop = self._stop
        delay = random.uniform(cfg.batch_pause_min, cfg.batch_pause_max)
        if stop is not None:
            await self._sleep(delay, stop, wakeable=False)

    @property
    def stopping(self) -> bool:
        """Stopping, or no longer trusted as leader (then stop between batches too)."""
        return (self._stop is not None and self._stop.is_set()) or not self.still_leading()

    async def run(self, stop: asyncio.Event) -> None:
        cfg = self.ctx.config
        self._stop = stop
        self._wake.clear()
        if cfg.start_jitter > 0:
            await self._sleep(random.uniform(0, cfg.start_jitter), stop, wakeable=False)
        await self.on_start()
        while not stop.is_set():
            if not self.still_leading():
                # The term ran out without the elector noticing yet (the process was
                # frozen): don't act; the elector steps down and the Maintainer stops us.
                log.warning("maintenance %s: leadership no longer trusted; not running", self.name)
                await stop.wait()
                return
            stats = self.stats
            stats.runs += 1
            stats.run_started.append(time.monotonic())
            del stats.run_started[:-RUN_STARTS_KEPT]
            self._wake.clear()
            try:
                async with asyncio.timeout(self.run_time_limit()):
                    await self.run_once()
            except Exception as exc:  # a database error, a timeout, or a bug: back off
                stats.errors += 1
                stats.consecutive_errors += 1
                stats.last_error = exc
                delay = backoff_delay(
                    stats.consecutive_errors, cfg.error_backoff_base, cfg.error_backoff_max
                )
                stats.backoff_until = time.monotonic() + delay
                expected = isinstance(exc, (DriverError, TimeoutError))
                log.log(
                    logging.WARNING if expected else logging.ERROR,
                    "maintenance %s: run failed (%s: %s); backing off %.2fs",
                    self.name,
                    type(exc).__name__,
                    exc,
                    delay,
                )
                await self._notify()
                # Only stopping ends a backoff early.
                await self._sleep(delay, stop, wakeable=False)
                stats.backoff_until = 0.0
                continue
            stats.successes += 1
            stats.consecutive_errors = 0
            await self._notify()
            await self._sleep(self.next_delay(), stop, wakeable=True)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
