"""Work functions the process-executor tests run in child processes.

They live at a module's top level so a child can import them by name. Each records
that it started (``started-<id>-<attempt>`` holding its pid) in the directory its args
name, and holds an exclusive lock on ``job-<id>.lock`` while it runs: a second copy of
the same job running at once could not take it and writes ``overlap-<id>`` instead. The
lock goes with the process, however it dies.
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from riverboat import Job, JobCancel, JobSnooze, Worker, record_output

log = logging.getLogger("tests.process_executor.jobs")

_locks: list[int] = []


def _enter(job: Job[Any]) -> Path:
    where = Path(job.args["dir"])
    fd = os.open(where / f"job-{job.id}.lock", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        (where / f"overlap-{job.id}").write_text(str(os.getpid()))
    _locks.append(fd)
    # Written aside, then renamed: a test that sees the file reads the whole pid, never
    # the empty file write_text creates before it writes.
    started = where / f"started-{job.id}-{job.attempt}"
    partial = started.with_name(f".{started.name}.partial")
    partial.write_text(str(os.getpid()))
    os.replace(partial, started)
    return where


def _leave() -> None:
    while _locks:
        os.close(_locks.pop())


def succeed(job: Job[Any]) -> None:
    _enter(job)
    try:
        log.warning("working job %d in pid %d", job.id, os.getpid())
        print("printed by the job, to stderr")  # must not corrupt the channel
        record_output({"pid": os.getpid(), "value": job.args.get("value")})
        job.set_metadata("seen", True)
    finally:
        _leave()


def fail(job: Job[Any]) -> None:
    raise ValueError(f"bad value {job.args.get('value')!r}")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no words for it")


def fail_unprintably(job: Job[Any]) -> None:
    raise Unprintable()


def fail_hugely(job: Job[Any]) -> None:
    raise ValueError("x" * job.args["size"])


# What a job raises that Python's own exception classes make hard to carry across a
# process: an OSError subclass (its own __new__), a text with a lone surrogate (a file
# name decoded with surrogateescape), an ExceptionGroup (its __new__ needs arguments).
RAISES: dict[str, BaseException] = {
    "missing_file": FileNotFoundError(2, "No such file or directory", "/nonexistent/in.csv"),
    "timeout": TimeoutError("upstream took too long"),
    "surrogate": ValueError("cannot parse report_\udcff.csv"),
    "group": ExceptionGroup("two steps failed", [ValueError("a"), KeyError("b")]),
    "sys_exit": SystemExit(3),
    "keyboard_interrupt": KeyboardInterrupt(),
}


def fail_with(job: Job[Any]) -> None:
    raise RAISES[job.args["raise"]]


def snooze(job: Job[Any]) -> None:
    raise JobSnooze(60)


def cancel(job: Job[Any]) -> None:
    raise JobCancel("no longer wanted")


def crash(job: Job[Any]) -> None:
    """Dies as ``args["how"]`` says on its first attempt, succeeds on the next."""
    _enter(job)
    try:
        if job.attempt == 1:
            how = job.args["how"]
            if how == "segfault":
                ctypes.string_at(0)
            elif how == "exit":
                os._exit(3)
            elif how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
        record_output(os.getpid())
    finally:
        _leave()


def fork(job: Job[Any]) -> None:
    """Forks a process that outlives the job (until the test kills it: its pid is the
    output), as a job starting a daemon of its own with os.fork would."""
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    record_output(pid)


def hang(job: Job[Any]) -> None:
    """Sleeps ``args["seconds"]`` (default: far longer than any test) on its first
    attempt; later attempts succeed at once."""
    _enter(job)
    try:
        if job.attempt == 1 or job.args.get("always"):
            time.sleep(job.args.get("seconds", 600))
        record_output(os.getpid())
    finally:
        _leave()


def end_after(job: Job[Any]) -> None:
    """Ends ``args["seconds"]`` after it started: records an output of ``args["size"]``
    characters (its pid when none), then fails with ``args["fail"]`` if given."""
    _enter(job)
    try:
        time.sleep(job.args["seconds"])
        size = job.args.get("size")
        record_output("x" * size if size else os.getpid())
        if job.args.get("fail"):
            raise ValueError(job.args["fail"])
    finally:
        _leave()


def hog(job: Job[Any]) -> None:
    """Allocates ``args["mib"]`` MiB on its first attempt."""
    _enter(job)
    try:
        if job.attempt == 1:
            block = bytearray(job.args["mib"] * 1024 * 1024)
            del block
        record_output(os.getpid())
    finally:
        _leave()


def spin(job: Job[Any]) -> None:
    """CPU-bound: ``args["n"]`` loop iterations."""
    total = 0
    for i in range(job.args.get("n", 1_000_000)):
        total += i
    record_output(total)


def noop(job: Job[Any]) -> None:
    pass


def steps(job: Job[Any]) -> None:
    """Resumable steps: "one" records its attempt; "two" fails on the first attempt, so
    the second attempt resumes after "one"."""
    where = Path(job.args["dir"])

    def one() -> None:
        (where / f"step-one-{job.attempt}").write_text("done")

    def two() -> None:
        if job.attempt == 1:
            raise RuntimeError("step two fails once")

    job.step("one", one)
    job.step("two", two)


class Reporter(Worker[dict[str, Any]]):
    """A class-based worker sent to a child by its class (made anew there)."""

    kind = "reporter"
    executor = "process"

    def work(self, job: Job[dict[str, Any]]) -> None:
        record_output(os.getpid())


def in_thread(job: Job[Any]) -> None:
    record_output(os.getpid())


def hold_gil(job: Job[Any]) -> None:
    """Sleeps ``args["seconds"]`` in C code that keeps the GIL (libc's sleep through
    ctypes.PyDLL, which does not release it): no other thread of the child runs."""
    import ctypes

    ctypes.PyDLL(None).sleep(int(job.args["seconds"]))
    record_output(os.getpid())


_leftover_go = threading.Event()
_leftover_logged = threading.Event()


def leave_a_logging_thread(job: Job[Any]) -> None:
    """Returns with a thread of its own still running, which logs once the next job in
    the same child lets it (:func:`release_the_leftover_thread`)."""

    def later() -> None:
        _leftover_go.wait()
        log.warning("leftover thread of job %d", job.id)
        _leftover_logged.set()

    threading.Thread(target=later, daemon=True).start()
    log.warning("job %d started a thread", job.id)


def release_the_leftover_thread(job: Job[Any]) -> None:
    """Lets the thread :func:`leave_a_logging_thread` left log, and waits until it has."""
    _leftover_go.set()
    if not _leftover_logged.wait(30):
        raise RuntimeError("no thread left by an earlier job in this child")
    log.warning("job %d ran after it", job.id)


def chatty(job: Job[Any]) -> None:
    """Logs a line of ``args["line"]`` characters without pause for ``args["seconds"]``,
    then records its pid."""
    _enter(job)
    try:
        line = "y" * job.args.get("line", 100)
        until = time.monotonic() + job.args["seconds"]
        while time.monotonic() < until:
            log.warning("%s", line)
        record_output(os.getpid())
    finally:
        _leave()


def mark_then_sleep(job: Job[Any]) -> None:
    """Writes ``ended-<id>`` once its sleep of ``args["seconds"]`` is over."""
    _enter(job)
    try:
        time.sleep(job.args["seconds"])
        (Path(job.args["dir"]) / f"ended-{job.id}").write_text(str(os.getpid()))
        record_output(os.getpid())
    finally:
        _leave()


def c_fork_then_sleep(job: Job[Any]) -> None:
    """Forks through libc (no Python at-fork handlers: the protocol pipes stay open in
    the forked process, as a C extension's fork leaves them), records the forked pid in
    ``forked-<id>`` (whole once it exists: written aside, then renamed), then sleeps.
    The forked process only pauses, and ends on its own after two minutes (SIGALRM's
    default action), so that a test failing before it kills it leaves nothing behind."""
    _enter(job)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pid = libc.fork()
        if pid == 0:
            libc.alarm(120)
            while True:
                libc.pause()
        forked = Path(job.args["dir"]) / f"forked-{job.id}"
        forked.with_suffix(".part").write_text(str(pid))
        forked.with_suffix(".part").replace(forked)
        time.sleep(job.args.get("seconds", 600))
        record_output(os.getpid())
    finally:
        _leave()
