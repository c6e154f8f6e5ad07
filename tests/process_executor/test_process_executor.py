"""The process executor (issue #29.1), on Postgres and SQLite: a real client whose jobs
run in child processes that succeed, fail, crash (segfault, os._exit, SIGKILL), run past
a hard timeout or a memory limit, and are cancelled; then from the database, that each
job ended as it should, none ran twice at once, and the pool replaced the dead child
(the retry, in a new child, succeeded)."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import select
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import riverboat
from riverboat import (
    EventKind,
    InsertOpts,
    InvalidInputError,
    Job,
    JobState,
    QueueConfig,
    RetryPolicy,
    Workers,
)
from riverboat.riverlog import METADATA_KEY, RiverLog
from riverboat.runtime import process_pool
from riverboat.runtime.outcomes import ERROR_MESSAGE_MAX, ERROR_TRACE_MAX
from riverboat.runtime.process_pool import ChildJobError, ProcessPool
from tests.process_executor import jobs
from tests.runtime.dbs import Db
from tests.runtime.helpers import next_events, wait_for
from tests.waiting import wait_until_async

pytestmark = pytest.mark.asyncio

KINDS = (
    "succeed",
    "fail",
    "fail_unprintably",
    "fail_hugely",
    "fail_with",
    "snooze",
    "cancel",
    "crash",
    "hang",
    "hog",
    "noop",
    "fork",
    "end_after",
)


def _workers() -> Workers:
    workers = Workers()
    for kind in KINDS:
        workers.register(kind)(getattr(jobs, kind))
    return workers


class SeenErrors:
    """An error handler keeping what each failed attempt raised, as the parent sees it."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def handle_error(self, job: Any, exc: BaseException) -> None:
        self.errors.append(exc)


class RetryInAnHour(RetryPolicy):
    """A failed attempt's next one out of a test's reach: River's first backoff (1 s)
    let a loaded machine run it again before the test stopped its client."""

    def next_retry(self, job: Any, now: datetime) -> datetime:
        return now + timedelta(hours=1)


def _client(
    db: Db, *middleware: Any, retry_policy: RetryPolicy | None = None, **queue: Any
) -> riverboat.AsyncClient:
    queue.setdefault("max_workers", 2)
    return riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(executor="process", **queue)},
        workers=_workers(),
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        middleware=[RiverLog(), *middleware],
        soft_stop_timeout=10,
        retry_policy=retry_policy,
    )


def _no_overlap(tmp_path: Path) -> None:
    assert not list(tmp_path.glob("overlap-*")), "a job ran twice at once"


def _pool(client: riverboat.AsyncClient) -> Any:
    return client.runtime.producers["default"].process_pool


async def _finished(client: riverboat.AsyncClient, job_id: int, *states: JobState) -> Any:
    async def done() -> Any:
        row = await client.job_get(job_id)
        return row if row.state in states else None

    return await wait_until_async(done, timeout=30, what=f"job {job_id} in {states}")


def _one_child(db: Db, workers: Workers | None = None, **options: Any) -> riverboat.AsyncClient:
    """A client whose process queue runs one job at a time, in one child; ``options``
    are the client's (``soft_stop_timeout`` 10 s unless given)."""
    options.setdefault("soft_stop_timeout", 10)
    return riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(executor="process", max_workers=1, process_pool_size=1)},
        workers=workers or _workers(),
        **options,
    )


async def _run_one(
    client: riverboat.AsyncClient, tmp_path: Path, args: dict[str, Any], kind: str
) -> int:
    """Insert a ``kind`` job of ``args``, start the client, and return the job's id
    once its first attempt started in its child."""
    job_id = int((await client.insert(args, kind=kind)).job.id)
    await client.start()
    await _started(tmp_path, job_id)
    return job_id


async def _started(tmp_path: Path, job_id: int) -> Path:
    """Once job ``job_id``'s first attempt started in its child: its ``started-`` file
    (jobs.py), which holds the child's pid."""
    started = tmp_path / f"started-{job_id}-1"
    await wait_until_async(started.exists, timeout=30, what=f"job {job_id} started in its child")
    return started


async def test_outcomes_output_and_logs_come_back_from_the_child(
    any_db: Db, tmp_path: Path
) -> None:
    seen = SeenErrors()
    # One failed attempt, one error handled (two when the retry ran before the stop).
    async with _client(any_db, seen, retry_policy=RetryInAnHour()) as client:
        args = {"dir": str(tmp_path), "value": 7}
        ids = {
            kind: (await client.insert(args, kind=kind)).job.id
            for kind in ("succeed", "fail", "snooze", "cancel")
        }
        await client.start()
        try:
            done = await _finished(client, ids["succeed"], JobState.COMPLETED)
            failed = await _finished(client, ids["fail"], JobState.AVAILABLE, JobState.RETRYABLE)
            snoozed = await _finished(client, ids["snooze"], JobState.SCHEDULED)
            cancelled = await _finished(client, ids["cancel"], JobState.CANCELLED)
        finally:
            await client.stop()
        child_pid = done.metadata["output"]["pid"]
        assert child_pid != os.getpid()
        assert done.metadata["output"]["value"] == 7 and done.metadata["seen"] is True
        (entry,) = done.metadata[METADATA_KEY]
        assert f"working job {done.id} in pid {child_pid}" in entry["log"]
        error = failed.errors[-1]
        assert error.error == "ValueError: bad value 7"
        assert 'raise ValueError(f"bad value' in error.trace and "jobs.py" in error.trace
        # Error handlers see an exception of the original type, the child's message.
        (exc,) = seen.errors
        assert isinstance(exc, ValueError) and isinstance(exc, ChildJobError)
        assert str(exc) == "bad value 7" and "jobs.py" in exc.remote_traceback
        assert snoozed.metadata["snoozes"] == 1 and snoozed.attempt == 0
        assert cancelled.errors[-1].error == "JobCancel: no longer wanted"
        _no_overlap(tmp_path)


@pytest.mark.parametrize("executor", ["process", "thread"])
async def test_an_error_whose_str_raises_is_still_the_jobs_error(any_db: Db, executor: str) -> None:
    """In a child, str() of such an error ended the child (ChildProcessDied); in a
    thread it recorded the RuntimeError str() raised. Both record the job's own class."""
    failed = await _discarded(any_db, executor, "fail_unprintably", {})
    assert failed.errors[-1].error == "Unprintable: <str() of the error raised RuntimeError>"


async def test_an_error_of_megabytes_is_cut_in_the_child(any_db: Db) -> None:
    """A child sent its error whole, message and traceback (which repeats it): 30 MB of
    message took seconds to cross, past the job's timeout, and the job was recorded as
    a JobTimeoutError. The child cuts the text as the parent stores it."""
    size = 30_000_000
    failed = await _discarded(any_db, "process", "fail_hugely", {"size": size}, timeout=5.0)
    (error,) = failed.errors
    assert error.error.startswith("ValueError: xxx")
    assert error.error.endswith(f"({size - ERROR_MESSAGE_MAX + 512:,} more characters not stored)")
    assert len(error.error) <= ERROR_MESSAGE_MAX and len(error.trace) < ERROR_TRACE_MAX + 100


async def _discarded(
    db: Db,
    executor: str,
    kind: str,
    args: dict[str, Any],
    *middleware: Any,
    timeout: float | None = None,
) -> Any:
    """One job of ``kind`` with one attempt, on a one-slot ``executor`` queue: its row
    once discarded."""
    client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(executor=executor, max_workers=1)},
        workers=_workers(),
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        middleware=list(middleware),
        job_timeout=timeout,
    )
    async with client:
        job = (await client.insert(args, InsertOpts(max_attempts=1), kind=kind)).job
        await client.start()
        try:
            return await _finished(client, job.id, JobState.DISCARDED)
        finally:
            await client.stop()


@pytest.mark.parametrize(
    ("raised", "recorded", "kind_of"),
    [
        (
            "missing_file",
            "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/in.csv'",
            FileNotFoundError,
        ),
        ("timeout", "TimeoutError: upstream took too long", TimeoutError),
        ("surrogate", "ValueError: cannot parse report_\ufffd.csv", ValueError),
        ("group", "ExceptionGroup: two steps failed (2 sub-exceptions)", Exception),
        # Re-raised in the child, they ended it: "exited with code 3", the error lost.
        ("sys_exit", "SystemExit: 3", BaseException),
        ("keyboard_interrupt", "KeyboardInterrupt", BaseException),
    ],
    ids=["missing_file", "timeout", "surrogate", "group", "sys_exit", "keyboard_interrupt"],
)
async def test_errors_python_makes_hard_to_rebuild_are_recorded_as_raised(
    any_db: Db,
    raised: str,
    recorded: str,
    kind_of: type[BaseException],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An OSError subclass was recorded as 'TypeError: Exception.__new__(...) is not
    safe' (and handlers saw that TypeError); a lone surrogate in the text ended the child
    (ChildProcessDied). Each is recorded as the thread executor records it."""
    # The failure's log line carries its traceback as Python formats it, lone surrogate
    # and all, which pytest-xdist can't send back from its worker: not captured.
    caplog.set_level(logging.CRITICAL, logger="riverboat.executor")
    recorded_by: dict[str, str] = {}
    for executor in ("thread", "process"):
        seen = SeenErrors()
        failed = await _discarded(any_db, executor, "fail_with", {"raise": raised}, seen)
        recorded_by[executor] = failed.errors[-1].error
        (exc,) = seen.errors
        assert isinstance(exc, kind_of), (executor, type(exc).__mro__)
        assert type(exc).__name__ == recorded.split(":")[0]
    assert recorded_by == {"thread": recorded, "process": recorded}


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("segfault", "killed by signal SIGSEGV"),
        ("exit", "exited with code 3"),
        ("sigkill", "killed by signal SIGKILL"),
    ],
)
async def test_a_crashed_child_fails_only_its_job_and_is_replaced(
    any_db: Db, tmp_path: Path, how: str, said: str
) -> None:
    async with _client(any_db) as client:
        crash_id = (await client.insert({"dir": str(tmp_path), "how": how}, kind="crash")).job.id
        others = [
            (await client.insert({"dir": str(tmp_path)}, kind="succeed")).job.id for _ in "ab"
        ]
        await client.start()
        try:
            row = await _finished(client, crash_id, JobState.COMPLETED)
            for job_id in others:
                await _finished(client, job_id, JobState.COMPLETED)
            pool = _pool(client)
        finally:
            await client.stop()
        assert row.attempt == 2
        error = row.errors[0]
        assert error.error.startswith("ChildProcessDied: child process ")
        assert f"working job {crash_id} {said}" in error.error
        first = int((tmp_path / f"started-{crash_id}-1").read_text())
        assert row.metadata["output"] != first  # the retry ran in a new child
        assert pool.replaced >= 1
        _no_overlap(tmp_path)


async def test_a_child_that_forked_is_still_seen_dying(any_db: Db, tmp_path: Path) -> None:
    """A job forks a process that lives on; the next job in the same child crashes. The
    forked process held the child's pipes open: the parent saw no EOF, and the crash
    was reported at the job's timeout as a timeout (never, without one)."""
    async with _client(any_db, max_workers=1) as client:
        forked = (await client.insert({}, kind="fork")).job.id
        await client.start()
        grandchild = None
        try:
            row = await _finished(client, forked, JobState.COMPLETED)
            grandchild = int(row.metadata["output"])
            args = {"dir": str(tmp_path), "how": "exit"}
            crash_id = (await client.insert(args, kind="crash")).job.id
            row = await _finished(client, crash_id, JobState.COMPLETED)  # retried, then ok
        finally:
            if grandchild is not None:
                os.kill(grandchild, 9)
            await client.stop()
        assert row.errors[0].error.endswith(f"working job {crash_id} exited with code 3")


async def test_a_hard_timeout_kills_the_child_and_the_job_retries(
    any_db: Db, tmp_path: Path
) -> None:
    async with _client(any_db) as client:
        workers = client.runtime.config.workers
        workers.get("hang").timeout = 3  # type: ignore[union-attr]
        job_id = (await client.insert({"dir": str(tmp_path)}, kind="hang")).job.id
        await client.start()
        try:
            row = await _finished(client, job_id, JobState.COMPLETED)
        finally:
            await client.stop()
        assert row.attempt == 2
        assert row.errors[0].error == (
            "JobTimeoutError: job exceeded its timeout of 3s; its child process was killed"
        )
        first = int((tmp_path / f"started-{job_id}-1").read_text())
        assert row.metadata["output"] != first
        assert not _alive(first)
        _no_overlap(tmp_path)


async def test_the_memory_limit_fails_the_job_with_a_clear_error(
    any_db: Db, tmp_path: Path
) -> None:
    async with _client(any_db, process_memory_limit=256 * 1024 * 1024) as client:
        job_id = (await client.insert({"dir": str(tmp_path), "mib": 512}, kind="hog")).job.id
        await client.start()
        try:
            row = await _finished(client, job_id, JobState.COMPLETED)
        finally:
            await client.stop()
        assert row.attempt == 2
        assert row.errors[0].error.startswith(
            "MemoryLimitExceeded: job exceeded its child process's memory limit of 256 MiB "
            "(RLIMIT_AS): MemoryError"
        )
        assert "bytearray" in row.errors[0].trace
        _no_overlap(tmp_path)


async def test_cancelling_a_running_job_kills_its_child(any_db: Db, tmp_path: Path) -> None:
    async with _client(any_db) as client:
        job_id = (await client.insert({"dir": str(tmp_path)}, kind="hang")).job.id
        after = (await client.insert({"dir": str(tmp_path)}, kind="succeed")).job.id
        await client.start()
        try:
            started = await _started(tmp_path, job_id)
            child = int(started.read_text())
            if any_db.dialect == "postgres":
                # From another client, as `riverboat jobs cancel` or River's UI would: the
                # notification reaches the producer (SQLite has no notifications, so a
                # running job hears of a cancel only from its own client, whatever its
                # executor).
                async with riverboat.AsyncClient(any_db.url, schema=any_db.schema) as admin:
                    await admin.job_cancel(job_id)
            else:
                await client.job_cancel(job_id)
            row = await _finished(client, job_id, JobState.CANCELLED)
            await _finished(client, after, JobState.COMPLETED)
        finally:
            await client.stop()
        assert row.errors[-1].error == "JobCancelledRemotely: job cancelled remotely"
        assert not _alive(child)
        _no_overlap(tmp_path)


async def test_soft_stop_lets_children_finish(any_db: Db, tmp_path: Path) -> None:
    async with _client(any_db) as client:
        ids = [
            (await client.insert({"dir": str(tmp_path), "seconds": 1}, kind="hang")).job.id
            for _ in range(2)
        ]
        sub = client.subscribe(EventKind.JOB_COMPLETED)
        await client.start()
        try:
            for job_id in ids:
                await _started(tmp_path, job_id)
            pids = _pool(client).pids
        finally:
            await client.stop()
        events = await next_events(sub, 2)
        assert {event.job.id for event in events if event.job is not None} == set(ids)
        for job_id in ids:
            assert (await client.job_get(job_id)).state is JobState.COMPLETED
        assert pids and not any(_alive(pid) for pid in pids)
        _no_overlap(tmp_path)


def _children_starting(parent: int) -> list[int]:
    """Pids of ``parent``'s process-executor children, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"process_child" in cmdline:
            found.append(int(entry.name))
    return found


async def test_ctrl_c_while_a_child_starts_does_not_kill_it() -> None:
    """Children ignore SIGINT (a terminal's Ctrl-C reaches its whole process group), but
    one that came while a child was still importing riverboat killed it, and the job
    that had asked for it lost an attempt to 'ChildProcessDied: a child process could
    not start'. The signal is sent here as soon as the child's process exists, before
    it can import anything."""
    signalled: list[int] = []

    async def interrupt_the_first_child() -> None:
        while not signalled:
            for pid in _children_starting(os.getpid()):
                os.kill(pid, signal.SIGINT)
                signalled.append(pid)
            await asyncio.sleep(0)

    pool = ProcessPool(1, name="ctrl-c")
    interrupter = asyncio.create_task(interrupt_the_first_child())
    try:
        child = await pool._spawn()
        await asyncio.wait_for(interrupter, 30)
        assert child.pid == signalled[0] and _alive(child.pid)
        await child.close(5)
    finally:
        interrupter.cancel()
        await pool.close()


async def test_hard_stop_kills_children_and_hands_their_jobs_back(
    any_db: Db, tmp_path: Path
) -> None:
    # Three slots, two children: two jobs run, the third waits for a child.
    async with _client(any_db, max_workers=3, process_pool_size=2) as client:
        ids = [
            (await client.insert({"dir": str(tmp_path), "always": True}, kind="hang")).job.id
            for _ in range(3)
        ]
        sub = client.subscribe(EventKind.JOB_INTERRUPTED)
        await client.start()
        try:
            await wait_until_async(
                lambda: len(list(tmp_path.glob("started-*"))) == 2,
                timeout=30,
                what="two jobs started",
            )

            async def all_claimed() -> bool:
                rows = [await client.job_get(job_id) for job_id in ids]
                return all(row.state is JobState.RUNNING for row in rows)

            await wait_until_async(all_claimed, timeout=30, what="the third job claimed")
            pids = _pool(client).pids
        finally:
            await asyncio.wait_for(client.stop_and_cancel(), 20)
        # In any order: the job still waiting for a child may be handed back first.
        events = await next_events(sub, len(ids))
        assert {event.job.id for event in events if event.job is not None} == set(ids)
        for job_id in ids:
            row = await client.job_get(job_id)
            assert row.state is JobState.AVAILABLE and row.attempt == 0 and not row.errors
        assert len(pids) == 2 and not any(_alive(pid) for pid in pids)
        assert len(list(tmp_path.glob("started-*"))) == 2  # the third never ran
        _no_overlap(tmp_path)


def _wait_until_readable_blocking(client: riverboat.AsyncClient) -> Any:
    """Block this thread (the client's event loop with it) until the busy child's pipe
    to this process holds something to read (its job's outcome, sent and not read);
    returns that child."""
    (child,) = _pool(client)._busy
    pipe = child.process._transport.get_pipe_transport(1).get_extra_info("pipe")
    poller = select.poll()  # the pipe may be past select()'s FD_SETSIZE
    poller.register(pipe, select.POLLIN)
    assert poller.poll(30_000), "the child sent nothing within 30 s"
    return child


@pytest.fixture
def fds_past_fd_setsize() -> Iterator[None]:
    """Every descriptor up to 1100 taken, so that those opened next (a child's pipes)
    are past FD_SETSIZE (1024), which select() refuses."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        if hard != resource.RLIM_INFINITY and hard < 2048:
            pytest.skip(f"RLIMIT_NOFILE {hard}: no descriptors past 1024")
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    taken: list[int] = []
    try:
        while not taken or taken[-1] < 1100:
            taken.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in taken:
            os.close(fd)
        if soft < 2048:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# More than a pipe holds (64 KiB on Linux): the child writes it only as it is read.
LARGE = 1_000_000


@pytest.mark.parametrize(
    ("middleware", "outcome"),
    [
        (False, "output"),
        (True, "output"),
        (False, "large_output"),
        (True, "large_output"),
        (False, "error"),
        (False, "large_error"),
        (False, "large_output_past_fd_1024"),
    ],
    ids=[
        "plain",
        "riverlog",
        "larger_than_the_pipe",
        "larger_riverlog",
        "error",
        "larger_error",
        "larger_past_fd_1024",
    ],
)
async def test_a_hard_stop_keeps_an_outcome_the_child_had_sent(
    any_db: Db, tmp_path: Path, request: pytest.FixtureRequest, middleware: bool, outcome: str
) -> None:
    """A hard stop that comes once a child has begun sending its job's outcome, before
    this process read it (its event loop busy meanwhile), keeps that outcome: the job
    ran to its end, so it is completed with its output (or retryable with its error),
    and it is not handed back to run again (it was: available, attempt 0, run a second
    time by the next worker). Also an outcome larger than the pipe holds, which the
    child writes only as this process reads it (it was handed back: the child was
    killed first, and half its message lost), its pipe's descriptor past 1024 too
    (select() refuses it)."""
    if outcome.endswith("past_fd_1024"):
        request.getfixturevalue("fds_past_fd_setsize")
        outcome = outcome.removesuffix("_past_fd_1024")
    client = _one_child(
        any_db, middleware=[RiverLog()] if middleware else [], retry_policy=RetryInAnHour()
    )
    args: dict[str, Any] = {"dir": str(tmp_path), "seconds": 0.2}
    if outcome.startswith("large"):
        args["size"] = LARGE
    if outcome.endswith("error"):
        args["fail"] = "failed at its end"
    async with client:
        job_id = (await client.insert(args, kind="end_after")).job.id
        await client.start()
        try:
            started = await _started(tmp_path, job_id)
            # The loop does not run from here to the stop: the outcome the child sends
            # 0.2 s after it started waits unread.
            _wait_until_readable_blocking(client)
            client.runtime.interrupt_running()
        finally:
            await asyncio.wait_for(client.stop_and_cancel(), 20)
        row = await client.job_get(job_id)
        assert row.attempt == 1
        if outcome.endswith("error"):
            assert row.state is JobState.RETRYABLE
            assert "failed at its end" in row.errors[-1].error
        else:
            assert row.state is JobState.COMPLETED
            expected = "x" * LARGE if outcome == "large_output" else int(started.read_text())
            assert row.metadata.get("output") == expected
        assert list(tmp_path.glob("started-*")) == [started]
        _no_overlap(tmp_path)


HUGE = 30_000_000


def _once_fed(
    monkeypatch: pytest.MonkeyPatch, client: riverboat.AsyncClient, size: int, then: Any
) -> None:
    """Call ``then()`` on the event loop once it has read ``size`` bytes from the busy
    child's pipe, in the middle of the message it reads."""
    (child,) = _pool(client)._busy
    reader = child.reader
    feed = reader.feed_data
    fed = [0]

    def feed_then(data: bytes) -> None:
        feed(data)
        before, fed[0] = fed[0], fed[0] + len(data)
        if before < size <= fed[0]:
            then()

    monkeypatch.setattr(reader, "feed_data", feed_then)


async def test_a_hard_stop_while_an_outcome_is_read_keeps_it(
    any_db: Db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hard stop that comes while this process reads an outcome larger than the pipe
    (its header read, a quarter of it in) keeps it: the child goes on writing it as it
    is read. It was handed back, the child killed mid-message."""
    client = _one_child(any_db)
    async with client:
        args = {"dir": str(tmp_path), "seconds": 0.2, "size": LARGE}
        job_id = (await client.insert(args, kind="end_after")).job.id
        await client.start()
        try:
            await _started(tmp_path, job_id)
            # Nothing of the outcome read yet (the loop blocked until it came): the stop
            # comes once a quarter of it is.
            _wait_until_readable_blocking(client)
            stopped: list[int] = []
            _once_fed(
                monkeypatch,
                client,
                LARGE // 4,
                lambda: stopped.append(client.runtime.interrupt_running()),
            )
            await wait_until_async(lambda: stopped, timeout=30, what="the stop mid-read")
        finally:
            await asyncio.wait_for(client.stop_and_cancel(), 20)
        assert stopped == [1]
        row = await client.job_get(job_id)
        assert row.state is JobState.COMPLETED and row.attempt == 1
        assert row.metadata.get("output") == "x" * LARGE
        assert len(list(tmp_path.glob("started-*"))) == 1
        _no_overlap(tmp_path)


@pytest.mark.parametrize("bound", ["read_within", "passed_mid_message"])
async def test_a_hard_stop_during_a_huge_outcome_ends(
    any_db: Db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: str
) -> None:
    """A hard stop that comes while a child sends an outcome of 30 MB ends, and so does
    the client's close: the outcome is read within the stop's bound and kept, or the
    bound passes mid-message (forced here) and the job is handed back, never left
    running or lost. A first version left asyncio's reader paused on a full buffer when
    it gave up, and the reaping of the killed child waited for ever for the end of its
    pipe, never read."""
    if bound == "passed_mid_message":
        monkeypatch.setattr(process_pool, "SENT_READ_LIMIT", 1.0)
    client = _one_child(any_db)
    try:
        args = {"dir": str(tmp_path), "seconds": 0.2, "size": HUGE}
        job_id = (await client.insert(args, kind="end_after")).job.id
        await client.start()
        try:
            await _started(tmp_path, job_id)
            child = _wait_until_readable_blocking(client)
            if bound == "passed_mid_message":
                # Past the read's bound, as a sync callback or another job holding
                # the GIL would block the loop, with the child still writing.
                limit = process_pool.SENT_READ_LIMIT
                _once_fed(monkeypatch, client, 1 << 20, lambda: time.sleep(limit))
            client.runtime.interrupt_running()
        finally:
            await asyncio.wait_for(client.stop_and_cancel(), 30)
        row = await client.job_get(job_id)
        if bound == "passed_mid_message" or row.state is not JobState.COMPLETED:
            assert row.state is JobState.AVAILABLE and row.attempt == 0 and not row.errors
        else:
            assert row.attempt == 1 and row.metadata.get("output") == "x" * HUGE
        assert not _alive(child.pid)
        assert len(list(tmp_path.glob("started-*"))) == 1
        _no_overlap(tmp_path)
    finally:
        await asyncio.wait_for(client.close(), 30)


async def test_a_timeout_while_a_hard_stop_reads_an_outcome_does_not_fail_the_job(
    any_db: Db, tmp_path: Path
) -> None:
    """The job's timeout passing while a hard stop reads the outcome its child was
    sending does not decide the job: it ran to its end, and is completed. It was failed
    as timed out (discarded, at max_attempts 1), the read cancelled by the timeout."""
    client = _one_child(any_db, job_timeout=2.0)
    async with client:
        args = {"dir": str(tmp_path), "seconds": 0.2, "size": LARGE}
        job_id = (await client.insert(args, InsertOpts(max_attempts=1), kind="end_after")).job.id
        await client.start()
        try:
            await _started(tmp_path, job_id)
            # The loop does not run from here to the stop: the outcome waits unread,
            # and the job's deadline passes meanwhile, its timer due.
            _wait_until_readable_blocking(client)
            _, state = client.runtime.producers["default"]._active[job_id]
            assert state.deadline is not None
            loop = asyncio.get_running_loop()
            while loop.time() <= state.deadline:
                time.sleep(state.deadline - loop.time() + 0.01)
            client.runtime.interrupt_running()
        finally:
            await asyncio.wait_for(client.stop_and_cancel(), 20)
        row = await client.job_get(job_id)
        assert row.state is JobState.COMPLETED and row.attempt == 1 and not row.errors
        assert row.metadata.get("output") == "x" * LARGE
        assert len(list(tmp_path.glob("started-*"))) == 1
        _no_overlap(tmp_path)


async def test_a_child_is_sending_once_bytes_are_read_and_not_taken() -> None:
    """Bytes read from a child's pipe into its reader and not taken by a receive (one
    cancelled as they came) are a message begun: a hard stop reads it alive, not
    killing the child first. Only the pipe was polled, so a large outcome whose header
    was in the reader, the pipe emptied a moment, was cut short."""
    pool = ProcessPool(1, name="sending")
    try:
        child = await pool._spawn()
        assert not child.sending()  # its ready message taken, nothing since
        child.reader.feed_data(b"\x00\x00")  # half a header, as a read would leave it
        assert child.sending()
        await child.kill()
        assert not child.sending()  # its pipe closed
    finally:
        await pool.close()


async def test_a_process_queue_refuses_workers_a_child_cannot_import(any_db: Db) -> None:
    workers = Workers()
    workers.register("closure")(lambda job: None)
    with pytest.raises(InvalidInputError, match=r"'closure'.*closure or lambda"):
        riverboat.AsyncClient(
            any_db.url,
            schema=any_db.schema,
            queues={"default": QueueConfig(executor="process")},
            workers=workers,
        )
    # The same worker is fine on a thread queue, or marked executor="thread".
    thread_workers = Workers()
    thread_workers.register("closure", executor="thread")(lambda job: None)
    riverboat.AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(executor="process")},
        workers=thread_workers,
    )


async def test_register_refuses_what_a_child_cannot_import() -> None:
    workers = Workers()

    def local(job: Job[Any]) -> None:
        pass

    with pytest.raises(InvalidInputError, match="closure or lambda"):
        workers.register("local", executor="process")(local)

    async def coroutine(job: Job[Any]) -> None:
        pass

    with pytest.raises(InvalidInputError, match="plain def workers only"):
        workers.register("async", executor="process")(coroutine)
    with pytest.raises(InvalidInputError, match="executor"):
        workers.register("other", executor="fork")(jobs.noop)
    workers.register("noop", executor="process")(jobs.noop)
    assert "local" not in workers and "noop" in workers


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose: it runs nothing.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


async def test_soft_stop_past_its_timeout_kills_children_and_hands_jobs_back(
    any_db: Db, tmp_path: Path
) -> None:
    async with _client(any_db) as client:
        client.runtime.config.soft_stop_timeout = 0.5
        job_id = (await client.insert({"dir": str(tmp_path), "always": True}, kind="hang")).job.id
        sub = client.subscribe(EventKind.JOB_INTERRUPTED)
        await client.start()
        try:
            started = await _started(tmp_path, job_id)
            child = int(started.read_text())
        finally:
            await asyncio.wait_for(client.stop(), 20)
        await wait_for([EventKind.JOB_INTERRUPTED], sub, job_id)
        row = await client.job_get(job_id)
    assert row.state is JobState.AVAILABLE and row.attempt == 0
    assert not _alive(child)
    _no_overlap(tmp_path)


@pytest.mark.serial  # a 1 s margin: run apart from the busy suite (tests/conftest.py)
async def test_a_timeout_counts_from_when_a_child_takes_the_job(any_db: Db, tmp_path: Path) -> None:
    # One child for two slots: the second job waits 2 s for the child, then needs 2 s
    # of its 3 s timeout (counted from the claim, it would time out every attempt).
    async with _client(any_db, process_pool_size=1) as client:
        client.runtime.config.workers.get("hang").timeout = 3  # type: ignore[union-attr]
        args = {"dir": str(tmp_path), "seconds": 2, "always": True}
        ids = [(await client.insert(args, kind="hang")).job.id for _ in range(2)]
        await client.start()
        try:
            rows = [await _finished(client, job_id, JobState.COMPLETED) for job_id in ids]
        finally:
            await client.stop()
    assert [row.attempt for row in rows] == [1, 1]
    assert [row.errors for row in rows] == [[], []]


async def test_a_thread_left_by_a_job_does_not_log_into_the_next_jobs_log(any_db: Db) -> None:
    """A record made in the child by a thread an earlier job left running is logged by
    the parent outside every job: the job running then keeps only its own lines (the
    child's one process works both, one after the other)."""
    workers = Workers()
    workers.register("leave", executor="process")(jobs.leave_a_logging_thread)
    workers.register("release", executor="process")(jobs.release_the_leftover_thread)
    async with riverboat.AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(max_workers=1)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        middleware=[RiverLog()],
    ) as client:
        await client.start()
        try:
            first = (await client.insert({}, kind="leave")).job.id
            left = await _finished(client, first, JobState.COMPLETED)
            second = (await client.insert({}, kind="release")).job.id
            after = await _finished(client, second, JobState.COMPLETED)
        finally:
            await client.stop()
    (entry,) = left.metadata[METADATA_KEY]
    assert entry["log"].strip().endswith(f"job {first} started a thread")
    (entry,) = after.metadata[METADATA_KEY]
    assert f"job {second} ran after it" in entry["log"]
    assert "leftover thread" not in entry["log"]


async def test_workers_choose_their_executor_on_a_thread_queue(any_db: Db, tmp_path: Path) -> None:
    workers = Workers()
    workers.register("steps", executor="process")(jobs.steps)
    workers.register("in_thread")(jobs.in_thread)
    workers.add(jobs.Reporter())
    async with riverboat.AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    ) as client:
        steps_id = (await client.insert({"dir": str(tmp_path)}, kind="steps")).job.id
        thread_id = (await client.insert({}, kind="in_thread")).job.id
        reporter_id = (await client.insert({}, kind="reporter")).job.id
        await client.start()
        try:
            steps = await _finished(client, steps_id, JobState.COMPLETED)
            in_thread = await _finished(client, thread_id, JobState.COMPLETED)
            reporter = await _finished(client, reporter_id, JobState.COMPLETED)
        finally:
            await client.stop()
    assert in_thread.metadata["output"] == os.getpid()
    assert reporter.metadata["output"] != os.getpid()
    # The second attempt resumed after step "one", whose progress came back from the
    # first attempt's child.
    assert steps.attempt == 2 and steps.errors[0].error == "RuntimeError: step two fails once"
    assert (tmp_path / "step-one-1").exists() and not (tmp_path / "step-one-2").exists()


@pytest.mark.parametrize("limit", [True, 1024, 2**63, 2**64, 1.5e9])
async def test_a_memory_limit_setrlimit_cannot_take_is_refused_when_declared(limit: Any) -> None:
    """2**63 bytes and more were accepted, then every child failed to start
    (setrlimit's OverflowError) and every process job was discarded."""
    with pytest.raises(riverboat.InvalidInputError, match="process_memory_limit"):
        riverboat.AsyncClient(
            "sqlite:///unused.sqlite3",
            queues={"default": QueueConfig(executor="process", process_memory_limit=limit)},
            workers=_workers(),
        )
