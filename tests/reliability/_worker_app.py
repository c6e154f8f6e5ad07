"""The worker application the reliability tests run in subprocesses, through the real
``python -m riverboat.cli worker tests.reliability._worker_app:client`` command.

Everything is configured by environment variables (see :func:`client`). Every job
appends ``<job id> <attempt>`` to ``$RB_OUT/exec.<pid>`` with one ``write`` on an
``O_APPEND`` descriptor when its body returns, so a SIGKILL can lose at most the line
being written, never interleave two; the test reads these files to count executions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import riverboat
from riverboat import (
    ElectorConfig,
    Job,
    JobRow,
    MaintenanceConfig,
    QueueConfig,
    RetryPolicy,
    Workers,
)
from riverboat.riverlog import RiverLog
from riverboat.runtime.maintenance import Service
from riverboat.runtime.runner import Runtime

ENV = os.environ
OUT = ENV.get("RB_OUT", ".")
_fd: int | None = None


def _record(line: str) -> None:
    global _fd
    if _fd is None:
        _fd = os.open(
            os.path.join(OUT, f"exec.{os.getpid()}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
    os.write(_fd, line.encode())


def _refuse_file_writes(_signum: int, _frame: object) -> None:
    """SIGUSR1: from now on no write of this process to any regular file succeeds (file
    size limit 0, SIGXFSZ ignored), as when the disk is full: SQLite's writes fail at
    once ("disk I/O error"; a full disk says "database or disk is full")."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


if ENV.get("RB_DISK_FULL_ON_USR1") == "1":
    import signal

    signal.signal(signal.SIGUSR1, _refuse_file_writes)

workers = Workers()


@workers.register("rel_work")
async def rel_work(job: Job[Any]) -> None:
    """Sleeps ``args.sleep`` seconds (default ``$RB_JOB_SLEEP``), then records itself."""
    delay = job.args.get("sleep", float(ENV.get("RB_JOB_SLEEP", "0")))
    if delay:
        await asyncio.sleep(delay)
    _record(f"{job.id} {job.attempt}\n")


@workers.register("rel_span")
async def rel_span(job: Job[Any]) -> None:
    """Records ``S <job id> <attempt> <pid> <time>`` when it starts and ``E ...`` when its
    body ends (after ``args.sleep`` seconds, or ``args.sleep_by_attempt[str(attempt)]``):
    the test checks that no two runs of one job overlap."""
    _record(f"S {job.id} {job.attempt} {os.getpid()} {time.time():.6f}\n")
    by_attempt = job.args.get("sleep_by_attempt", {})
    await asyncio.sleep(by_attempt.get(str(job.attempt), job.args.get("sleep", 0)))
    _record(f"E {job.id} {job.attempt} {os.getpid()} {time.time():.6f}\n")


@workers.register("rel_sync")
def rel_sync(job: Job[Any]) -> None:
    """The same in the thread pool (a sync job cannot be interrupted)."""
    delay = job.args.get("sleep", 0)
    if delay:
        time.sleep(delay)
    _record(f"{job.id} {job.attempt}\n")


# What Postgres can't store: a NUL character and a lone surrogate.
UNSTORABLE = "nul here:\x00 end, surrogate here:\ud800 end"


@workers.register("rel_unstorable")
async def rel_unstorable(job: Job[Any]) -> None:
    """Carries unstorable text out through ``args.via``: the exception's message
    (``raise``, on the first attempt only), ``output``, staged ``metadata`` (with a
    snooze on the first attempt), a ``log`` line (riverlog), a ``cancel`` reason."""
    via = job.args["via"]
    if via == "raise":
        if job.attempt == 1:
            raise RuntimeError(UNSTORABLE)
    elif via == "output":
        riverboat.record_output({"text": UNSTORABLE})
    elif via == "metadata":
        job.set_metadata("note", {UNSTORABLE: UNSTORABLE})
        if job.attempt == 1 and not job.metadata.get("snoozes"):
            raise riverboat.JobSnooze(0)
    elif via == "log":
        logging.getLogger("rel.app").warning("a line with %s", UNSTORABLE)
    elif via == "cancel":
        raise riverboat.JobCancel(UNSTORABLE)
    _record(f"{job.id} {job.attempt}\n")


class QuickRetry(RetryPolicy):
    """Retry rescued and failed jobs after 0.2 s instead of River's 1 s, 16 s, 81 s..."""

    def next_retry(self, job: JobRow, now: datetime) -> datetime:
        return now + timedelta(seconds=0.2)


# Short elections so a handover fits in a test: a leader that can't re-elect within
# ttl - safety_margin (1.5 s) steps down; its row expires after 2 s.
FAST_ELECTOR = ElectorConfig(
    elect_interval=0.2,
    elect_jitter=0.05,
    ttl=2.0,
    reelect_interval=0.25,
    safety_margin=0.5,
    attempt_timeout=1.0,
)


class MaintenanceRecorder(Service):
    """A maintenance service that only records that it acted, with the leader's id and
    when its run began, in ``rel_maintenance_log`` (created by the test).

    The time is taken as the run begins, right after the leadership check and before
    anything awaits, not by the database when the row arrives: a process frozen between
    its check and its statement sends that statement when it wakes, and what the elector
    promises is that no run *begins* once the term is gone (the host's clock, which the
    database's clock_timestamp() also reads)."""

    name = "recorder"

    def __init__(self, runtime: Runtime) -> None:
        assert runtime.maintainer is not None
        super().__init__(runtime.maintainer.services["scheduler"].ctx, 0.05)
        self.client_id = runtime.client_id
        self._driver = runtime.driver

    async def run_once(self) -> None:
        from riverboat._sql import Query, Statement

        began = datetime.now(UTC).isoformat()
        table = f'"{ENV["RB_SCHEMA"]}".rel_maintenance_log'
        query = Query(
            "rel_maintenance_log",
            f"INSERT INTO {table} (leader_id, at) VALUES (:leader_id, :at::timestamptz)",
        )
        await self._driver.execute(Statement(query, {"leader_id": self.client_id, "at": began}))


def _add_recorder(runtime: Runtime) -> None:
    # Runs right after the elector started and before anything awaits, so the service is
    # in place before the first election can be won.
    recorder = MaintenanceRecorder(runtime)
    assert runtime.maintainer is not None
    runtime.maintainer.services[recorder.name] = recorder


def _announce_leadership(runtime: Runtime) -> None:
    def changed(leading: bool) -> None:
        print("LEADER" if leading else "FOLLOWER", runtime.client_id, flush=True)

    assert runtime.elector is not None
    runtime.elector.on_change(changed)


def client() -> riverboat.AsyncClient:
    """``$RB_URL``/``$RB_SCHEMA``; ``$RB_MAX_WORKERS``; the completer's
    ``$RB_FLUSH_DELAY`` and ``$RB_FLUSH_THRESHOLD``; ``$RB_RESCUE_AFTER`` (s);
    ``$RB_CALL_TIMEOUT`` (s, the runtime's ``db_call_timeout``);
    ``$RB_RECORD_MAINTENANCE=1`` adds :class:`MaintenanceRecorder`; ``$RB_RIVERLOG=1``
    stores each job's log lines (riverlog)."""
    rescue_after = float(ENV.get("RB_RESCUE_AFTER", "3600"))
    maintenance = MaintenanceConfig(
        elector=FAST_ELECTOR,
        start_jitter=0.0,
        rescuer_interval=0.3,
        rescue_stuck_jobs_after=rescue_after,
        scheduler_interval=0.3,
        dead_client_check_interval=0.3,
    )
    client_id = ENV.get("RB_CLIENT_ID") or f"rel_{os.getpid()}_{time.time_ns()}"
    c = riverboat.AsyncClient(
        ENV["RB_URL"],
        schema=ENV.get("RB_SCHEMA") or None,
        id=client_id,
        queues={"default": QueueConfig(max_workers=int(ENV.get("RB_MAX_WORKERS", "20")))},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.1,
        job_timeout=float(ENV.get("RB_JOB_TIMEOUT", min(1.0, rescue_after))),
        retry_policy=QuickRetry(),
        maintenance=maintenance,
        middleware=[RiverLog(level=logging.INFO)] if ENV.get("RB_RIVERLOG") == "1" else None,
        # The registry of live clients: a killed worker counts as dead after
        # $RB_DEAD_AFTER seconds (2 by default here), its jobs then run elsewhere.
        heartbeat_interval=float(ENV.get("RB_HEARTBEAT_INTERVAL", "0.3")),
        dead_after=float(ENV.get("RB_DEAD_AFTER", "2")),
    )
    # The completer's timing is a RuntimeConfig knob, read when the runtime starts: a
    # long delay and a high threshold keep finished jobs' outcomes buffered (unflushed)
    # for a while, so a SIGKILL can land between "the job returned" and "written".
    config = c.runtime.config
    config.completer_flush_delay = float(ENV.get("RB_FLUSH_DELAY", "0.05"))
    config.completer_batch_threshold = int(ENV.get("RB_FLUSH_THRESHOLD", "100"))
    if ENV.get("RB_CALL_TIMEOUT"):
        config.db_call_timeout = float(ENV["RB_CALL_TIMEOUT"])
    c.runtime.on_start.append(_announce_leadership)
    if ENV.get("RB_RECORD_MAINTENANCE") == "1":
        c.runtime.on_start.append(_add_recorder)
    return c
