"""Leader election on River's ``river_leader`` table, compatible with River's Go elector.

A follower tries to claim the row every ``elect_interval`` (+ jitter); a ``resigned``
notification from another client wakes it early (after 0-50 ms, so followers don't all
pounce at once). The leader extends its term every ``reelect_interval``. It trusts its
leadership only until ``attempt start + ttl - safety_margin``: if it cannot re-elect by
then (the database is unreachable or slow) it steps down locally, strictly before its
term can expire in the database and someone else be elected. On stop it resigns with a
notification so another client takes over at once. A ``request_resign`` notification
makes the leader resign and run for election again.

Each acquisition, re-election and resignation is one statement.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from riverboat._seconds import is_seconds
from riverboat.drivers.base import AsyncDriver
from riverboat.errors import CALLBACK_FAILURES, DriverError, InvalidInputError
from riverboat.runtime._waiting import backoff_delay, wait_any
from riverboat.runtime.health import PathHealth, bounded
from riverboat.runtime.supervise import supervised

if TYPE_CHECKING:
    from riverboat.runtime.notifier import Notifier

__all__ = ["Elector", "ElectorConfig", "ElectorStats"]

log = logging.getLogger("riverboat.elector")

# River's internal/leadership constants.
ELECT_INTERVAL = 5.0
ELECT_JITTER = 1.0
TTL_PADDING = 10.0
SAFETY_MARGIN = 1.0
ATTEMPT_TIMEOUT = 5.0
RESIGN_TIMEOUTS = (1.0, 2.0, 3.0)
RESIGNED_WAKE_DELAY_MAX = 0.05
# How late the backstop may cancel a leadership statement whose driver ignores the call
# deadline: the local trust window (ttl - safety_margin) must hold to within this.
BACKSTOP_GRACE = 0.05
ELECT_BACKOFF_MAX = 64.0


@dataclass(slots=True, frozen=True)
class ElectorConfig:
    """Election timing; the defaults are River's. Shorten them only for tests."""

    elect_interval: float = ELECT_INTERVAL
    elect_jitter: float = ELECT_JITTER
    ttl: float = ELECT_INTERVAL + TTL_PADDING
    reelect_interval: float = ELECT_INTERVAL
    safety_margin: float = SAFETY_MARGIN
    attempt_timeout: float = ATTEMPT_TIMEOUT

    def __post_init__(self) -> None:
        for name in ("elect_interval", "ttl", "reelect_interval", "attempt_timeout"):
            value = getattr(self, name)
            if not is_seconds(value, positive=True):
                raise InvalidInputError(f"elector.{name}", "must be a positive number of seconds")
        for name in ("elect_jitter", "safety_margin"):
            value = getattr(self, name)
            if not is_seconds(value):
                raise InvalidInputError(f"elector.{name}", "must be ≥ 0 seconds")
        if self.ttl - self.safety_margin <= self.reelect_interval:
            raise InvalidInputError(
                "elector.ttl",
                "ttl - safety_margin must exceed reelect_interval, or a healthy leader "
                "would step down between re-elections",
            )


@dataclass(slots=True)
class ElectorStats:
    """What the elector did, and how many statements it took."""

    elect_attempts: int = 0
    elections_won: int = 0
    reelections: int = 0
    reelections_failed: int = 0
    resignations: int = 0
    step_downs: int = 0
    errors: int = 0
    # Statements sent per operation ("elect", "reelect", "resign"): one each time.
    by_operation: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class _Term:
    leader_id: str
    elected_at: Any  # datetime, exactly as the database returned it


class Elector:
    """Runs for leadership until stopped.

    ``is_leader`` tells the current state; :attr:`leader` is set while leading and
    :attr:`follower` while not, so code can ``await elector.leader.wait()``; callbacks
    registered with :meth:`on_change` run (on the loop) at every transition.
    """

    def __init__(
        self,
        driver: AsyncDriver,
        client_id: str,
        config: ElectorConfig,
        *,
        notifier: Notifier | None,
    ) -> None:
        self._driver = driver
        self._dialect = driver.dialect
        self.client_id = client_id
        self.config = config
        self._notifier = notifier
        self.stats = ElectorStats()
        self.leader = asyncio.Event()
        self.follower = asyncio.Event()
        self.follower.set()
        self._callbacks: list[Callable[[bool], None]] = []
        self._wake = asyncio.Event()
        self._resign_requested = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._term: _Term | None = None
        self._trusted_until = 0.0
        self._pending_wake: asyncio.TimerHandle | None = None
        self._background: set[asyncio.Task[None]] = set()
        # Its statements run under attempt_timeout / the resign timeouts as call
        # deadlines (runtime/health.py); failures are logged as one path's outage.
        self.health = PathHealth("elector", log)
        if notifier is not None:
            notifier.subscribe("river_leadership", self._handle_notification)

    # -- public ------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.leader.is_set()

    def trusts_leadership(self) -> bool:
        """Leading, and still inside the locally trusted part of the term. After a freeze
        (SIGSTOP, a long GC or swap pause) every timer fires at once when the process
        resumes; this is False from the moment the trust window passed, even before the
        elector's own loop has run and stepped down, so a service can refuse to act."""
        return self.is_leader and time.monotonic() < self._trusted_until

    def on_change(self, callback: Callable[[bool], None]) -> None:
        self._callbacks.append(callback)

    def start(self) -> None:
        self._stopping.clear()
        self._task = asyncio.create_task(
            supervised("elector", self._run, self._stopping.is_set, self._stopping),
            name="riverboat-elector",
        )

    async def stop(self) -> None:
        """Stop running; a leader resigns (with a notification) before this returns."""
        self._stopping.set()
        self._wake.set()
        if self._pending_wake is not None:
            self._pending_wake.cancel()
        task, self._task = self._task, None
        if task is not None:
            await asyncio.shield(task)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # -- notifications -----------------------------------------------------------------
    def _handle_notification(self, payload: dict[str, Any]) -> None:
        action = payload.get("action")
        if action == "resigned":
            if payload.get("leader_id") == self.client_id or self.is_leader:
                return
            # Stagger the followers a little so they don't all hit the row at once.
            if self._pending_wake is None or self._pending_wake.cancelled():
                loop = asyncio.get_running_loop()
                self._pending_wake = loop.call_later(
                    random.uniform(0, RESIGNED_WAKE_DELAY_MAX), self._fire_wake
                )
        elif action == "request_resign":
            if self.is_leader:
                self._resign_requested.set()

    def _fire_wake(self) -> None:
        self._pending_wake = None
        self._wake.set()

    def request_resign(self) -> None:
        """Resign (if leading) and run for election again, as a request_resign would."""
        if self.is_leader:
            self._resign_requested.set()

    # -- transitions -------------------------------------------------------------------
    def _set_leader(self, leading: bool, why: str = "lost") -> None:
        if leading == self.is_leader:
            return
        if leading:
            self.follower.clear()
            self.leader.set()
        else:
            self.leader.clear()
            self.follower.set()
        # A clean stop or a requested resignation is said as such, not as a loss.
        log.info("elector %s: leadership %s", self.client_id, "gained" if leading else why)
        for callback in list(self._callbacks):
            try:
                callback(leading)
            except CALLBACK_FAILURES:
                log.exception("elector: leadership callback failed")

    def _count(self, operation: str) -> None:
        self.stats.by_operation[operation] = self.stats.by_operation.get(operation, 0) + 1

    async def _sleep(self, seconds: float, *, wakeable: bool) -> None:
        """Sleep until ``seconds`` pass or the elector stops; a wake-up (resigned
        notification) ends a ``wakeable`` sleep early, never an error backoff."""
        await wait_any((self._stopping, self._wake) if wakeable else (self._stopping,), seconds)

    # -- the loop ----------------------------------------------------------------------
    async def _run(self) -> None:
        errors = 0
        try:
            while not self._stopping.is_set():
                try:
                    won = await self._attempt_elect()
                except (DriverError, OSError, TimeoutError) as exc:
                    errors += 1
                    self.stats.errors += 1
                    delay = backoff_delay(errors, 1.0, ELECT_BACKOFF_MAX)
                    self.health.failed(exc, f"election attempt, retry in {delay:.1f}s")
                    await self._sleep(delay, wakeable=False)
                    continue
                errors = 0
                self.health.ok()
                if not won:
                    self._wake.clear()
                    cfg = self.config
                    await self._sleep(
                        cfg.elect_interval + random.uniform(0, cfg.elect_jitter), wakeable=True
                    )
                    self._wake.clear()
                    continue
                self._set_leader(True)
                await self._keep_leadership()
                self._set_leader(False)
        finally:
            self._set_leader(False)

    async def _attempt_elect(self) -> bool:
        cfg = self.config
        self.stats.elect_attempts += 1
        self._count("elect")
        started = time.monotonic()
        async with bounded(cfg.attempt_timeout, "election", BACKSTOP_GRACE):
            rows = await self._driver.fetch(
                self._dialect.leader_attempt_elect(leader_id=self.client_id, ttl=cfg.ttl)
            )
        if not rows:
            return False
        row = self._dialect.decode_leader(rows[0])
        self._term = _Term(row.leader_id, row.elected_at)
        self._trusted_until = started + cfg.ttl - cfg.safety_margin
        self.stats.elections_won += 1
        self._resign_requested.clear()
        return True

    async def _keep_leadership(self) -> None:
        """Re-elect until stopped, asked to resign, or the term is lost."""
        cfg = self.config
        failures = 0
        delay = cfg.reelect_interval
        while True:
            remaining = self._trusted_until - time.monotonic()
            await wait_any((self._stopping, self._resign_requested), min(delay, remaining))
            if self._stopping.is_set() or self._resign_requested.is_set():
                self._resign_requested.clear()
                # Stop acting as leader before giving the row up.
                self._set_leader(
                    False,
                    "resigned (stopping)" if self._stopping.is_set() else "resigned (asked to)",
                )
                await self._resign()
                return
            remaining = self._trusted_until - time.monotonic()
            if remaining <= 0:
                self._step_down("the term could not be renewed in time")
                return
            started = time.monotonic()
            term = self._term
            assert term is not None
            self._count("reelect")
            try:
                async with bounded(
                    min(cfg.attempt_timeout, remaining), "re-election", BACKSTOP_GRACE
                ):
                    rows = await self._driver.fetch(
                        self._dialect.leader_attempt_reelect(
                            leader_id=self.client_id, elected_at=term.elected_at, ttl=cfg.ttl
                        )
                    )
            except (DriverError, OSError, TimeoutError) as exc:
                failures += 1
                self.stats.errors += 1
                self.stats.reelections_failed += 1
                if failures > 3:
                    failures = 1
                delay = min(2.0 ** (failures - 1), cfg.reelect_interval)
                self.health.failed(exc, f"re-election, retry in {delay:.1f}s")
                continue
            self.health.ok()
            if not rows:
                # Someone else holds the row (our term expired): lost, nothing to resign.
                self.stats.reelections_failed += 1
                self._term = None
                log.warning("elector %s: leadership lost (term not renewable)", self.client_id)
                return
            failures = 0
            delay = cfg.reelect_interval
            self.stats.reelections += 1
            self._trusted_until = started + cfg.ttl - cfg.safety_margin

    def _step_down(self, reason: str) -> None:
        self.stats.step_downs += 1
        log.warning("elector %s: stepping down locally: %s", self.client_id, reason)
        self._set_leader(False)
        # The row may still name us; a resignation (if the database answers) lets the next
        # leader in without waiting for the TTL. Best effort, in the background.
        term, self._term = self._term, None
        if term is not None:
            task = asyncio.create_task(self._resign_term(term, (RESIGN_TIMEOUTS[0],)))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _resign(self) -> None:
        term, self._term = self._term, None
        if term is not None:
            await asyncio.shield(self._resign_term(term, RESIGN_TIMEOUTS))

    async def _resign_term(self, term: _Term, timeouts: tuple[float, ...]) -> None:
        for attempt, timeout in enumerate(timeouts, 1):
            self._count("resign")
            try:
                async with bounded(timeout, "resignation", BACKSTOP_GRACE):
                    await self._driver.fetch(
                        self._dialect.leader_resign(
                            leader_id=term.leader_id, elected_at=term.elected_at
                        )
                    )
            except (DriverError, OSError, TimeoutError) as exc:
                log.warning("elector: resignation attempt %d failed: %s", attempt, exc)
                continue
            self.stats.resignations += 1
            return
