"""JobRescuer: recover jobs left ``running`` by a client that died (River §7.2).

Stuck jobs are running jobs attempted more than ``rescue_stuck_jobs_after`` ago, read in
keyset-paginated batches. For each one, in River's order:

1. ``cancel_attempted_at`` in metadata: **cancelled**;
2. no worker registered for its kind: **discarded**;
3. args that don't decode for its worker, or a row with a value riverboat can't read
   (``JobRow.decode_errors``, logged once per rescue with the job id): retried by the
   retry policy while attempts remain, else **discarded**;
4. an effective timeout (the worker's, else the client's) that is none, or that has
   not yet passed since the attempt began: left running;
5. otherwise retried (the worker's ``next_retry``, else the retry policy) while attempts
   remain, else **discarded**.

Every rescued job gets the error entry ``"Stuck job rescued by JobRescuer"`` and its
``river:rescue_count`` metadata incremented; the attempt is unchanged. The rules are
:func:`riverboat.runtime.outcomes.rescued`'s; this service finds the stuck jobs, asks
each one's worker (args, timeout, ``next_retry``) and writes the outcomes.

With riverboat's registry of live clients (runtime/registry.py) two rules come first,
decided by the client that claimed the job (the last entry of ``attempted_by``):

- a job whose client holds a live lease and listed it in a heartbeat (``job_ids``: its
  running jobs and unwritten outcomes) is never rescued, however long it runs: rescuing
  it would start a second run while the first goes on (a sync job past its timeout
  whose thread can't be stopped). A job of a live client that a heartbeat written after
  the claim did not list (the claim's reply was lost on the way) keeps River's rule;
- a job whose client's lease ran out is rescued by :class:`DeadClientRescuer` within
  ``dead_client_check_interval``, whatever its age and timeout (rule 4 doesn't apply:
  nothing runs it any more), after which the dead client's row is removed.

Jobs of clients that are not in the registry (Go River clients, riverboat clients
without the ``riverboat`` migration line) keep River's rules above.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any

from riverboat._fleet import WorkerInfo
from riverboat._job import JobRow
from riverboat.dialect.base import RescueUpdate
from riverboat.runtime import outcomes
from riverboat.runtime.maintenance._service import MaintenanceContext, Service
from riverboat.runtime.worker import Job, call_timeout_fn

__all__ = ["DeadClientRescuer", "JobRescuer"]

log = logging.getLogger("riverboat.maintenance")


class JobRescuer(Service):
    name = "rescuer"

    def __init__(self, ctx: MaintenanceContext, interval: float | None = None) -> None:
        super().__init__(ctx, ctx.config.rescuer_interval if interval is None else interval)
        self.rescue_after = ctx.config.rescue_after(ctx.job_timeout)
        self.rescued: dict[str, int] = {"cancelled": 0, "discarded": 0, "retryable": 0}
        self.skipped_live = 0  # stuck by River's rule, but their client is alive
        self._registry: bool | None = None  # riverboat's line applied? (asked once)

    async def _liveness(self) -> tuple[dict[str, WorkerInfo], set[str]]:
        """Clients with a live lease by id, and ids of those whose lease ran out; both
        empty without the registry."""
        ctx = self.ctx
        if self._registry is None:
            from riverboat.migrations import applied_version_async

            self._registry = await applied_version_async(ctx.driver, "riverboat") >= 1
        if not self._registry:
            return {}, set()
        clients = [
            ctx.dialect.decode_client(r) for r in await ctx.driver.fetch(ctx.dialect.client_list())
        ]
        live = {c.id: c for c in clients if c.alive}
        dead = {c.id for c in clients if not c.alive}
        return live, dead

    async def run_once(self) -> None:
        live, dead = await self._liveness()
        now = datetime.now(UTC)
        await self.rescue(now - timedelta(seconds=self.rescue_after), live, set(), leave=dead)

    async def rescue(
        self,
        horizon: datetime,
        live: dict[str, WorkerInfo],
        dead: set[str],
        leave: Collection[str] = (),
    ) -> None:
        """Rescue running jobs attempted before ``horizon`` (River's rule), except those
        of ``live`` clients and of clients in ``leave`` (those whose lease ran out are
        :class:`DeadClientRescuer`'s, which condemns their rows first: rescued here, a
        job of a client on SQLite whose lease a lock let run out would be handed out
        while that client renews its lease and runs it on); with ``dead``, only those
        of ``dead`` clients."""
        ctx = self.ctx
        dialect = ctx.dialect
        after_id = 0
        held = {client_id: set(info.job_ids) for client_id, info in live.items()}

        async def rescue_batch(max: int) -> int:
            nonlocal after_id
            rows = await ctx.driver.fetch(
                dialect.job_get_stuck(after_id=after_id, stuck_horizon=horizon, max=max)
            )
            jobs = dialect.decode_jobs(rows)
            if jobs:
                after_id = jobs[-1].id
            now = datetime.now(UTC)
            chosen = []
            for job in jobs:
                claimant = job.attempted_by[-1] if job.attempted_by else None
                if dead:
                    if claimant in dead:
                        chosen.append(self.decide(job, now, claimant_dead=True))
                elif claimant in leave:
                    continue
                elif claimant in live and (
                    job.id in held[claimant]
                    or job.attempted_at is None
                    or live[claimant].heartbeat_at <= job.attempted_at
                ):
                    self.skipped_live += 1  # its live client holds it (or may, so far)
                else:
                    chosen.append(self.decide(job, now))
            updates = [u for u in chosen if u is not None]
            if updates:
                result = await ctx.driver.fetch(
                    dialect.job_rescue_many(updates, stuck_horizon=horizon)
                )
                for _id, state in result:
                    self.rescued[state] = self.rescued.get(state, 0) + 1
            return len(jobs)

        await self.in_batches(rescue_batch)

    def decide(
        self, job: JobRow, now: datetime, *, claimant_dead: bool = False
    ) -> RescueUpdate | None:
        """What to write for the stuck ``job`` (None: leave it running)."""
        worker = self.ctx.workers.get(job.kind)
        decoded = False
        timeout: float | None = None
        worker_time = None
        if worker is not None and job.metadata.get("cancel_attempted_at") in (None, ""):
            if job.decode_errors:
                # A value in the row itself can't be read: failed like bad args.
                log.error(
                    "maintenance rescuer: job %d (%s) %s",
                    job.id,
                    job.kind or "?",
                    outcomes.decode_error_message(job),
                )
            else:
                try:
                    args: Any = worker.decode(job)
                except Exception:
                    pass  # args that don't decode: retried by the policy, or discarded
                else:
                    decoded = True
                    own = worker.timeout
                    if worker.timeout_fn is not None:
                        own = call_timeout_fn(worker, Job(job, args))
                    timeout = outcomes.effective_timeout(own, self.ctx.job_timeout)
                    if worker.next_retry is not None:
                        worker_time = functools.partial(worker.next_retry, Job(job, args))
        return outcomes.rescued(
            job,
            now,
            self.ctx.retry_policy,
            worker_known=worker is not None,
            decoded=decoded,
            timeout=timeout,
            claimant_dead=claimant_dead,
            worker_time=worker_time,
        )


class DeadClientRescuer(JobRescuer):
    """Every ``dead_client_check_interval``: the rows of clients whose registry lease ran
    out are condemned (their lease can no longer be renewed), those clients' running
    jobs are rescued as :class:`JobRescuer` rescues (retryable with backoff, or
    discarded when attempts are exhausted; cancelled if a cancel was asked), whatever
    their age, and then the rows are removed, which lets a client that was only frozen
    join again. A rescue that fails half way is done again on the next run. Idle (one
    small read) while every client is alive.

    On SQLite a lease also runs out when another connection holds the database's write
    lock past ``dead_after`` (it stops every heartbeat), so nothing is condemned until
    ``dead_after`` after this client's writes last waited for that lock, nor while no
    client has heartbeat within ``dead_after`` (the statement checks): the live clients
    renew their leases first, and only the dead ones' jobs run again."""

    name = "dead_client_rescuer"

    def __init__(self, ctx: MaintenanceContext) -> None:
        super().__init__(ctx, ctx.config.dead_client_check_interval)
        self.dead_clients = 0
        self.deferred = 0  # runs that left expired leases alone after a lock wait (SQLite)

    async def run_once(self) -> None:
        live, dead = await self._liveness()
        if dead:
            await self._rescue_dead(live, dead)

    async def rescue_client(self, client_id: str) -> None:
        """Rescue ``client_id``'s jobs and remove its row if its lease ran out (nothing
        otherwise): for a client that waits for its own id to be free, whatever the
        leader is."""
        live, dead = await self._liveness()
        if client_id in dead:
            await self._rescue_dead(live, {client_id})

    async def _rescue_dead(self, live: dict[str, WorkerInfo], dead: set[str]) -> None:
        ctx = self.ctx
        if not ctx.dialect.row_locks:
            # SQLite: a lease also runs out while another connection holds the write
            # lock, which stops every heartbeat; live clients renew theirs once it is
            # released. Give them dead_after from this client's own last wait for it.
            waited = time.monotonic() - ctx.driver.stats.blocked_at
            if waited < ctx.dead_after:
                self.deferred += 1
                log.debug(
                    "maintenance: %d client(s) with expired leases are left for now: "
                    "this client's writes waited for the SQLite write lock %.1fs ago",
                    len(dead),
                    waited,
                )
                return
        # Condemned first: a condemned lease is never renewed (on SQLite one that ran
        # out can be, after a lock), so the jobs rescued below are those of clients
        # that know they lost them. Removed last: a rescue that fails half way is done
        # again on the next run, the rows still there and still dead.
        rows = await ctx.driver.fetch(ctx.dialect.client_condemn(sorted(dead), ctx.dead_after))
        dead = {str(row[0]) for row in rows}
        if not dead:
            return
        log.warning(
            "maintenance: %d client(s) stopped sending heartbeats: %s; making their running "
            "jobs available again",
            len(dead),
            ", ".join(sorted(dead)[:5]) + (" ..." if len(dead) > 5 else ""),
        )
        before = dict(self.rescued)
        # Every running job is looked at, not only old ones: the horizon is now.
        await self.rescue(datetime.now(UTC), live, dead)
        rows = await ctx.driver.fetch(ctx.dialect.client_delete_dead(sorted(dead)))
        self.dead_clients += len(rows)
        rescued = {k: v - before.get(k, 0) for k, v in self.rescued.items()}
        log.warning(
            "maintenance: jobs of dead clients rescued: %s",
            ", ".join(f"{n} {state}" for state, n in sorted(rescued.items()) if n) or "none",
        )
