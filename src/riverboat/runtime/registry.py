"""riverboat's registry of live clients: heartbeats in ``riverboat_client``.

A client that works jobs records itself (id, host, pid, its queues with ``max_workers``
and jobs running, slots in use, riverboat version) when it starts (or, when a row holds
its id already, once that row is gone: it claims nothing until then), and again every
``heartbeat_interval``; each heartbeat extends its lease, ``expires_at``, to
``dead_after`` from the database's now. A clean stop deletes the row. A row whose lease
ran out belongs to a dead client: the leader's rescuer makes that client's running jobs
available again (runtime/maintenance/rescuer.py), and leaves alone every job whose
claiming client (the last entry of ``attempted_by``) holds a live lease.

On Postgres the heartbeat only extends a lease that is still valid. A client that was
frozen (SIGSTOP, a VM pause) or cut off from the database longer than ``dead_after``
learns that it lost its place (no row updated, no heartbeat attempted for ``dead_after``
by its own clock, or, on Postgres, none written for that long): it stops claiming,
drops the outcomes of the jobs it was running (async ones are cancelled; a sync job's
thread can't be stopped, so it keeps its slot until the body returns and what it returns
is discarded), and joins again only once the leader has removed its old row, i.e. once
those jobs were handed to others. On SQLite a heartbeat waits or fails only while
another connection holds the database's one write lock, which also stops every rescue,
so it renews a lease that ran out meanwhile as long as the row exists (docs/fleet.md).

Without riverboat's migration line (``riverboat migrate up``) there is no registry: the
client logs one warning and runs as River's clients do.

The rows also carry what operators ask of a client (``queue_settings``: a queue's
``max_workers``, or ``stopped``), read back by every heartbeat: see docs/fleet.md.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from riverboat._seconds import is_seconds
from riverboat.errors import DriverError, InvalidInputError
from riverboat.flow import FlowControl
from riverboat.runtime._waiting import cancel_and_wait
from riverboat.runtime.health import bounded
from riverboat.runtime.supervise import supervised

if TYPE_CHECKING:
    from riverboat.drivers.base import AsyncDriver
    from riverboat.runtime.completer import Completer
    from riverboat.runtime.producer import Producer, QueueConfig

__all__ = ["DEAD_AFTER", "HEARTBEAT_INTERVAL", "ClientRegistry", "check_heartbeat"]

log = logging.getLogger("riverboat.client")

HEARTBEAT_INTERVAL = 5.0
"""Seconds between a client's heartbeats."""

DEAD_AFTER = 30.0
"""Seconds after its last heartbeat at which a client counts as dead."""


def check_heartbeat(interval: object, dead_after: object) -> None:
    """Refuse settings that could declare a healthy client dead."""
    if interval is None:
        return
    for name, value in (("heartbeat_interval", interval), ("dead_after", dead_after)):
        if not is_seconds(value, positive=True):
            raise InvalidInputError(name, "must be a positive number of seconds")
    assert isinstance(interval, (int, float)) and isinstance(dead_after, (int, float))
    if dead_after < 2 * interval:
        raise InvalidInputError(
            "dead_after", f"must be at least twice heartbeat_interval ({interval}s)"
        )


def _version() -> str:
    # From the installed distribution: importing the riverboat package from here would
    # make an import circle (riverboat -> client -> runner -> registry).
    from importlib import metadata

    try:
        return metadata.version("riverboat")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


class _RuntimeSettings(Protocol):
    @property
    def queues(self) -> dict[str, QueueConfig]: ...

    @property
    def db_call_timeout(self) -> float | None: ...


class RegisteredRuntime(Protocol):
    """What the registry reads from the runtime it reports on (``runtime.runner.Runtime``,
    which imports this module)."""

    @property
    def driver(self) -> AsyncDriver: ...

    @property
    def client_id(self) -> str: ...

    @property
    def config(self) -> _RuntimeSettings: ...

    @property
    def producers(self) -> dict[str, Producer]: ...

    @property
    def completer(self) -> Completer | None: ...

    async def rescue_dead_client(self, client_id: str) -> None: ...


class ClientRegistry:
    """One client's row in ``riverboat_client``, kept fresh by a heartbeat task."""

    def __init__(self, runtime: RegisteredRuntime, interval: float, dead_after: float) -> None:
        self._runtime = runtime
        self._driver = runtime.driver
        self._dialect = runtime.driver.dialect
        self.interval = float(interval)
        self.dead_after = float(dead_after)
        self.enabled = False
        self.lost = False  # the lease ran out: jobs may run elsewhere, don't claim
        self._last_ok = 0.0  # monotonic time a heartbeat that was written was sent
        # Monotonic time the last heartbeat attempt ended, written or not: a gap of
        # dead_after since then means this process did not run (frozen), not that its
        # statements were waiting.
        self._last_attempt = 0.0
        # Whether a heartbeat that fails means the lease may be lost. Not on SQLite:
        # there a write fails (or waits) only while another connection holds the
        # database's one write lock, and no one, the leader's rescue included, can write
        # then; its heartbeat renews a lease that ran out meanwhile, unless the leader
        # condemned the row (before rescuing the client's jobs) or a job it listed was
        # handed out since (dialect/sqlite_fleet.py's client_heartbeat).
        self._fail_loses = bool(self._dialect.row_locks)
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self.heartbeats = 0
        self._beating = asyncio.Lock()  # the heartbeat task and the completer share beat()

    # -- what the row says -------------------------------------------------------------
    def _queues(self) -> dict[str, dict[str, Any]]:
        producers = self._runtime.producers
        out: dict[str, dict[str, Any]] = {}
        for name, cfg in self._runtime.config.queues.items():
            producer = producers.get(name)
            if producer is None:
                out[name] = {"max_workers": cfg.max_workers, "running": 0, "stopped": False}
            else:
                out[name] = {
                    "max_workers": producer.max_workers,
                    "running": producer.active,
                    "stopped": producer.operator_stopped,
                    "paused": producer.paused,
                }
            flow = FlowControl.of(cfg)
            if flow is not None:  # its limits, for `riverboat queues limits` and the dashboard
                out[name]["flow"] = flow.describe()
        return out

    def _row(self) -> dict[str, Any]:
        queues = self._queues()
        held = {job_id for p in self._runtime.producers.values() for job_id in p.job_ids()}
        completer = self._runtime.completer
        if completer is not None:
            held.update(completer.pending_ids())
        return {
            "queues": queues,
            "job_ids": sorted(held),
            "slots": sum(q["running"] for q in queues.values()),
            "dead_after": self.dead_after,
        }

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        from riverboat.migrations import applied_version_async

        if await applied_version_async(self._driver, "riverboat") < 1:
            log.warning(
                "riverboat's migration line is not applied (run `riverboat migrate up`): "
                "this client is not in the registry of live clients, and its running jobs "
                "are rescued by River's rule only (rescue_stuck_jobs_after) if it dies"
            )
            return
        sent = time.monotonic()
        # Never over a row another run holds (see _wait_for_the_id).
        rows = await self._driver.fetch(self._register())
        self.enabled = True
        if rows:
            self._last_ok = sent
            self._apply(rows)
        else:
            # Who holds it, read only then: every other start saves the statement.
            client_id = self._runtime.client_id
            self._wait_for_the_id(await self._driver.fetch(self._dialect.client_holder(client_id)))
        # Stopped by cancellation (stop), which supervised() never catches.
        self._task = asyncio.create_task(
            supervised("registry heartbeat", self._run, lambda: False), name="riverboat-heartbeat"
        )

    def _wait_for_the_id(self, holders: Any) -> None:
        """This client's id has a row already: a process that holds it (two processes
        given one id, two pods given one name), or this process's previous run, which
        did not stop cleanly (killed, or its database gone at stop). The row's jobs may
        still be running there, or are the dead run's, which only the leader's rescue of
        dead clients hands out again, and only once the row's lease ran out. Taking the
        row over kept its lease alive: the killed run's jobs stayed ``running`` until
        River's rescue (``rescue_stuck_jobs_after``, 1 h by default), and two live
        processes shared one row, each counted as the other. So this client waits, as
        one that lost its place does: no claims, and at each heartbeat one attempt to
        join, which succeeds once the row is gone (a clean stop removes it; a dead one's
        jobs are rescued and the row removed once its lease ran out: by the leader, or
        by this client itself, see _free_the_id)."""
        self.lost = True
        self._last_attempt = time.monotonic()
        held_by = [
            f"host {host}, pid {pid}" + (", lease still valid" if alive else ", lease ran out")
            for host, pid, alive in holders
        ]
        log.warning(
            "registry: client id %r is already in the registry (%s): a process that holds "
            "it, or this one's previous run, which did not stop cleanly. This client claims "
            "no jobs until that row is gone: a live holder removes it when it stops; a dead "
            "run's jobs are rescued and its row removed once its lease has run out, "
            "dead_after (%gs) after its last heartbeat. Give each process run its own id "
            "(Client(id=...)); see docs/fleet.md",
            self._runtime.client_id,
            "; ".join(held_by) or "a row removed since",
            self.dead_after,
        )

    def _register(self) -> Any:
        """The client's row, unless one holds its id already (then no row comes back)."""
        return self._dialect.client_register(
            id=self._runtime.client_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=_version(),
            **self._row(),
        )

    async def stop(self) -> None:
        if self._task is not None:
            # Let a heartbeat in flight finish (it is bounded by db_call_timeout):
            # cancelling a query midway leaves its connection for the garbage collector.
            async with self._beating:
                self._task.cancel()
            await cancel_and_wait(self._task)
            self._task = None
        if not self.enabled:
            return
        self.enabled = False
        if self.lost:
            # The row under this id is not this run's to remove: another process's
            # (this client waited for it), or this run's own after its lease ran out,
            # whose jobs must be rescued before it goes. Removed here, a twin lost its
            # place (its jobs' outcomes dropped), and a dead run's jobs waited for
            # River's rescue (1 h). One last rescue of an expired row, as at each
            # heartbeat: without riverboat's leader (beside a Go River leader) nothing
            # else would remove this run's own row.
            await self._free_the_id()
            return
        try:
            await self._driver.execute(self._dialect.client_delete(self._runtime.client_id))
        except DriverError as exc:
            log.warning("registry: removing this client's row failed (it expires): %s", exc)

    def may_claim(self) -> bool:
        """False while this client may have been declared dead: its lease ran out (or
        nothing confirmed it for ``dead_after``), so it must not take new jobs."""
        if not self.enabled:
            return True
        return not self.lost and time.monotonic() - self._last_ok < self.dead_after

    async def may_write(self) -> bool:
        """For the completer, before each write: True while the lease is certainly
        valid (re-confirmed by a heartbeat when less than one interval of it is left),
        False once it is lost (the outcomes are then dropped: the leader makes those
        jobs available again). Raises DriverError when it can't be confirmed either way,
        so the completer keeps the outcomes and retries."""
        if not self.enabled:
            return True
        if not self.lost and self._fresh():
            return True
        await self.beat()
        if self.lost:
            return False
        if not self._fresh():
            raise DriverError("the registry lease could not be confirmed")
        return True

    def _fresh(self) -> bool:
        return time.monotonic() - self._last_ok < self.dead_after - self.interval

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.beat()

    async def beat(self) -> None:
        """One heartbeat (or, after the lease was lost, one attempt to join again)."""
        async with self._beating:
            await self._beat()

    async def _beat(self) -> None:
        sent = time.monotonic()
        quiet = sent - max(self._last_ok, self._last_attempt)
        if not self.lost and quiet >= self.dead_after:
            # Checked before anything awaits: asyncio runs the timers that expired
            # during a freeze (SIGSTOP) oldest first, so every job waiting on a timer set
            # after this one's is cancelled here before it runs another line.
            self._lose(f"no heartbeat attempted for {quiet:.1f}s")
        await self._send(sent)

    async def _send(self, sent: float) -> None:
        if self.lost:
            await self._free_the_id()
        try:
            # Bounded like every call of the runtime (runtime/health.py): a silent
            # connection is dropped, not waited on past dead_after.
            async with bounded(self._runtime.config.db_call_timeout, "heartbeat"):
                if self.lost:
                    # Heard from, not renewed: on SQLite the leader condemns (then
                    # removes) a dead row only while some client heartbeat recently,
                    # and a lone client that lost its place has no one else's.
                    await self._driver.execute(
                        self._dialect.client_touch_lost(self._runtime.client_id)
                    )
                    rows = await self._driver.fetch(self._register())
                else:
                    rows = await self._driver.fetch(
                        self._dialect.client_heartbeat(id=self._runtime.client_id, **self._row())
                    )
        except DriverError as exc:
            # Only a reply or the database's error counts as an attempt: a bug that
            # raised here (the loop is then run again) must leave the clock check on.
            self._last_attempt = time.monotonic()
            if not self._failing:
                log.warning(
                    "registry: heartbeat failed (retrying every %gs): %s", self.interval, exc
                )
                self._failing = True
            if self._fail_loses and time.monotonic() - self._last_ok >= self.dead_after:
                self._lose(f"no heartbeat written for {self.dead_after:g}s")
            return
        self._last_attempt = time.monotonic()
        if self._failing:
            log.warning("registry: the database answers heartbeats again")
            self._failing = False
        if not rows:
            if not self.lost:
                self._lose("its lease ran out before this heartbeat")
            return  # still waiting for the leader to remove the old row
        if self.lost:
            log.warning(
                "registry: client %s joined the registry%s; claiming jobs",
                self._runtime.client_id,
                " again" if self._last_ok else "",
            )
            self.lost = False
        self._last_ok = sent
        self.heartbeats += 1
        self._apply(rows)

    async def _free_the_id(self) -> None:
        """While this client waits for its id (its lease lost, or another row held the
        id when it started): the row under the id is rescued and removed here once its
        lease ran out, as riverboat's leader would. Only riverboat's leader does it
        otherwise: beside a Go River leader, a worker restarted under its killed run's
        id waited for ever, claiming nothing. A live holder's row is left alone. A
        failure is the next heartbeat's to retry (its jobs are rescued once: the
        rescue re-checks each is still running)."""
        try:
            async with bounded(self._runtime.config.db_call_timeout, "dead client rescue"):
                await self._runtime.rescue_dead_client(self._runtime.client_id)
        except DriverError as exc:
            log.warning("registry: rescuing the jobs under this client's id failed: %s", exc)

    def _lose(self, why: str) -> None:
        if self.lost:
            return
        self.lost = True
        orphaned = sum(p.orphan_running() for p in self._runtime.producers.values())
        completer = self._runtime.completer
        # Jobs that ended but whose outcome is not written yet are handed out again too
        # (after a freeze, the timers of jobs that were waiting fire before this one).
        unwritten = len(completer.pending_ids()) if completer is not None else 0
        log.warning(
            "registry: client %s counts as dead (%s): its %d running jobs and %d ended "
            "ones whose outcomes are not written yet may already run elsewhere, so their "
            "outcomes here are dropped (async jobs cancelled; a sync job's thread runs on "
            "with its slot held); no new claims until the leader has made them available "
            "again",
            self._runtime.client_id,
            why,
            orphaned,
            unwritten,
        )

    def _apply(self, rows: Any) -> None:
        """Apply what operators asked of this client's queues (docs/fleet.md)."""
        if not rows:
            return
        settings = self._dialect.decode_json_value(rows[0][0])
        if not isinstance(settings, Mapping):
            return
        for queue, wanted in settings.items():
            producer = self._runtime.producers.get(queue)
            if producer is None or not isinstance(wanted, Mapping):
                continue
            max_workers = wanted.get("max_workers")
            if isinstance(max_workers, int) and not isinstance(max_workers, bool):
                producer.set_max_workers(max_workers)
            stopped = wanted.get("stopped")
            if isinstance(stopped, bool):
                producer.set_operator_stopped(stopped)
