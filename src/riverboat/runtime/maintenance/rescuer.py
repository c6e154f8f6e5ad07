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
``river:rescue_count`` metadata incremented; the attempt is unchanged.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from riverboat._job import AttemptError, JobRow, JobState
from riverboat.dialect.base import RescueUpdate
from riverboat.runtime.maintenance._service import MaintenanceContext, Service
from riverboat.runtime.retry import safe_next_retry
from riverboat.runtime.undecodable import decode_error_message
from riverboat.runtime.worker import Job, call_timeout_fn

__all__ = ["RESCUE_ERROR", "JobRescuer"]

log = logging.getLogger("riverboat.maintenance")

RESCUE_ERROR = "Stuck job rescued by JobRescuer"


class JobRescuer(Service):
    name = "rescuer"

    def __init__(self, ctx: MaintenanceContext) -> None:
        super().__init__(ctx, ctx.config.rescuer_interval)
        self.rescue_after = ctx.config.rescue_after(ctx.job_timeout)
        self.rescued: dict[str, int] = {"cancelled": 0, "discarded": 0, "retryable": 0}

    async def run_once(self) -> None:
        ctx = self.ctx
        dialect = ctx.dialect
        horizon = datetime.now(UTC) - timedelta(seconds=self.rescue_after)
        after_id = 0

        async def rescue_batch(max: int) -> int:
            nonlocal after_id
            rows = await ctx.driver.fetch(
                dialect.job_get_stuck(after_id=after_id, stuck_horizon=horizon, max=max)
            )
            jobs = dialect.decode_jobs(rows)
            if jobs:
                after_id = jobs[-1].id
            now = datetime.now(UTC)
            updates = [u for u in (self.decide(job, now) for job in jobs) if u is not None]
            if updates:
                result = await ctx.driver.fetch(
                    dialect.job_rescue_many(updates, stuck_horizon=horizon)
                )
                for _id, state in result:
                    self.rescued[state] = self.rescued.get(state, 0) + 1
            return len(jobs)

        await self.in_batches(rescue_batch)

    def decide(self, job: JobRow, now: datetime) -> RescueUpdate | None:
        error = AttemptError(now, max(job.attempt, 0), RESCUE_ERROR, "").to_json()

        def final(state: JobState) -> RescueUpdate:
            # Finalized now; scheduled_at kept as it was.
            return RescueUpdate(job.id, error, now, job.scheduled_at, state.value)

        if job.metadata.get("cancel_attempted_at") not in (None, ""):
            return final(JobState.CANCELLED)
        worker = self.ctx.workers.get(job.kind)
        if worker is None:
            return final(JobState.DISCARDED)
        try:
            if job.decode_errors:
                # A value in the row itself can't be read: fail it like bad args.
                log.error(
                    "maintenance rescuer: job %d (%s) %s",
                    job.id,
                    job.kind or "?",
                    decode_error_message(job),
                )
                raise ValueError(decode_error_message(job))
            args: Any = worker.decode(job)
        except Exception:
            if job.attempt < max(job.max_attempts, 0):
                retry_at = safe_next_retry(job, self.ctx.retry_policy, now)
                return RescueUpdate(job.id, error, None, retry_at, JobState.RETRYABLE.value)
            return final(JobState.DISCARDED)
        own = worker.timeout
        if worker.timeout_fn is not None:
            own = call_timeout_fn(worker, Job(job, args))
        timeout = own if own is not None else self.ctx.job_timeout
        if timeout is None or timeout < 0:
            return None  # no timeout at all: River never rescues such a job
        if timeout > 0 and job.attempted_at is not None:
            if (now - job.attempted_at).total_seconds() < timeout:
                return None
        when: datetime | None = None
        if worker.next_retry is not None:
            try:
                when = worker.next_retry(Job(job, args))
            except Exception:
                when = None
        if when is None or when.tzinfo is None:
            when = safe_next_retry(job, self.ctx.retry_policy, now)
        if job.attempt < max(job.max_attempts, 0):
            return RescueUpdate(job.id, error, None, when, JobState.RETRYABLE.value)
        return final(JobState.DISCARDED)
