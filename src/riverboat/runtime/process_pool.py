"""The process executor: sync jobs run in a pool of child processes.

A thread can't be stopped, computes under the GIL, and a crash in it (a segfault in a C
extension, ``os._exit``) ends the whole worker. A child process can be killed, runs on
its own core, and dies alone. Each child is a fresh interpreter
(``python -m riverboat.runtime.process_child``, spawned, never forked from the asyncio
process), kept warm and reused for one job after another; the pool starts one when a job
finds none idle, up to ``size``.

A job reaches its child by reference: its args as JSON (the row) and the import paths of
the work function and args type, which the child imports. So the function must be
importable: defined at a module's top level (a script's ``__main__`` works, re-run in
the child under another name as multiprocessing does), not a closure, lambda or callable
instance. :mod:`riverboat.runtime.process_reference` says so at registration or start.

A job whose task is cancelled (its timeout, a remote cancel, a hard stop) has its child
SIGKILLed, and the cancellation goes on only once the child is reaped: the row is never
made available while a child still runs it. A hard stop that finds the child's outcome
already sent, not yet read (the child ended the job a moment before), keeps it, and a
job that ran to its end is not handed back to run again (``keep_sent``): a child
sending nothing is killed first and what its pipe holds read to its end; one in the
middle of a message (an outcome larger than the pipe holds is written only as it is
read) is read alive, within bounds, then killed (``_sent_before_kill``). A child that
dies mid-job fails that job with how it died (exit code or signal) and is replaced by
the next job that needs one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import select
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from riverboat._job import JobRow
from riverboat._json import go_json_dumps, json_loads
from riverboat.runtime.outcomes import JobCancel, JobSnooze
from riverboat.runtime.worker import Job, RegisteredWorker, _WorkContext

__all__ = [
    "ChildJobError",
    "ChildProcessDied",
    "MemoryLimitExceeded",
    "ProcessPool",
    "usable_cores",
]

log = logging.getLogger("riverboat.process_pool")
# Signals a child ignores (runtime.process_child): blocked while it starts, so that one
# arriving before it can ignore them (Ctrl-C to the terminal's process group while it
# imports riverboat) waits, and is then dropped, instead of killing it.
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}

_HEADER = struct.Struct(">I")
CHILD_MODULE = "riverboat.runtime.process_child"
# runtime.process_child's exit status when it left a job its parent stopped answering
# for. Written here again, not imported: the child runs as ``python -m`` that module,
# and a module runpy finds imported already (by this one, through the runtime package)
# is run in a state Python warns about (tests/process_executor checks the two agree).
LEASE_EXPIRED_EXIT = 75
# A child's first message; its interpreter and riverboat import take ~0.1 s.
CHILD_START_TIMEOUT = 60.0
# Seconds after a hard stop within which a child's message must have begun for the stop
# to read it (a killed child's pipe ends at once, unless something the job started holds
# it open; a live child may be logging, its job still running).
SENT_READ_TIMEOUT = 0.5
# Seconds after a hard stop within which a message begun by then must have been read to
# its end, else the job is handed back. An outcome larger than the pipe holds (an output
# of up to 32 MB, its metadata, an error's trace) is written only as it is read: ~0.1 s
# for 30 MB on an idle machine, more on a loaded one. It bounds what a stop waits for a
# child that stalls mid-message, and stays under runner.STOP_GRACE (4 s), after which a
# stop with a soft_stop_timeout gives up on its producers, leaving time to write it.
SENT_READ_LIMIT = 2.0


class ChildJobError(Exception):
    """An exception raised by a job in a child process, carried back as text.

    Its class is made per original type: named like it, so the recorded error reads as
    it would from a thread, and a subclass of it too when the parent has that type
    already imported (a built-in such as ``ValueError``, or your own exception class), so
    ``isinstance`` works in error handlers and middleware. ``str()`` is the child's
    message and ``remote_traceback`` its traceback; the original's own attributes are
    not carried."""

    remote_traceback = ""
    _classes: dict[tuple[str, str, str, str | None], type[ChildJobError]] = {}

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    @classmethod
    def named(
        cls,
        name: str,
        message: str,
        remote_traceback: str,
        module: str = "",
        qualname: str = "",
        alias: str | None = None,
    ) -> ChildJobError:
        key = (name, module, qualname, alias)
        sub = cls._classes.get(key)
        if sub is None:
            sub = cls._classes[key] = _error_class(cls, name, module, qualname, alias)
        error = _bare_instance(sub)
        error.args = (message,)
        error.remote_traceback = remote_traceback
        return error


def _bare_instance(sub: type[ChildJobError]) -> ChildJobError:
    """An instance of ``sub`` made without its ``__init__``, whose arguments we don't
    have: by the ``__new__`` of its nearest built-in base that has one (Python refuses
    ``Exception.__new__`` for a subclass of ``OSError``: FileNotFoundError, TimeoutError,
    ConnectionError...)."""
    for klass in sub.__mro__:
        if klass.__module__ == "builtins" and "__new__" in vars(klass):
            made: ChildJobError = klass.__new__(sub)  # type: ignore[call-overload]
            return made
    raise AssertionError("every exception class has BaseException's __new__")


def _loaded_class(module: str | None, qualname: str) -> Any:
    loaded = sys.modules.get(module) if module else None
    if loaded is None or not qualname or "<" in qualname:
        return None
    original: Any = loaded
    for part in qualname.split("."):
        original = getattr(original, part, None)
    return original if isinstance(original, type) and issubclass(original, Exception) else None


def _error_class(
    base: type[ChildJobError], name: str, module: str, qualname: str, alias: str | None = None
) -> type[ChildJobError]:
    # ``alias``: the -m module's own name, which the parent may also hold, a second copy
    # of __main__ (imported by name from another module): the error is of both classes.
    originals: list[type] = []
    for candidate in (module, alias):
        found = _loaded_class(candidate, qualname)
        if found is not None and found not in originals:
            originals.append(found)
    for bases in ([base, *originals], [base, *originals[:1]]):
        if len(bases) == 1:
            break
        try:
            made: type[ChildJobError] = type(name, tuple(bases), {"__module__": module})
            # It must also be made without arguments: a built-in base whose __new__
            # needs them (ExceptionGroup's) can't be, and the error keeps only its name.
            _bare_instance(made)
            return made
        except TypeError:  # an incompatible layout (a C type's), or such a base
            pass
    return type(name, (base,), {"__module__": module or "riverboat.child"})


class ChildProcessDied(Exception):
    """The child process working a job died before reporting its outcome."""


class MemoryLimitExceeded(Exception):
    """A job ran its child process past the pool's memory limit."""

    remote_traceback = ""


def _signal_name(number: int) -> str:
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    description = signal.strsignal(number)
    return f"{name} ({description})" if description else name


def describe_exit(returncode: int | None) -> str:
    """How a child ended, in words: ``killed by signal SIGSEGV (Segmentation fault)``."""
    if returncode is None:
        return "ended without an exit status"
    if returncode < 0:
        return f"killed by signal {_signal_name(-returncode)}"
    if returncode == LEASE_EXPIRED_EXIT:
        return (
            f"exited with code {returncode}: this worker process said nothing to it for "
            "half of dead_after (frozen?), so it left the job"
        )
    return f"exited with code {returncode}"


# -- the pool -----------------------------------------------------------------------------
def _encode_row(row: JobRow) -> dict[str, Any]:
    def moment(value: Any) -> str | None:
        return None if value is None else value.isoformat()

    return {
        "id": row.id,
        "encoded_args": row.encoded_args,
        "attempt": row.attempt,
        "attempted_at": moment(row.attempted_at),
        "attempted_by": row.attempted_by,
        "created_at": moment(row.created_at),
        "errors": [json_loads(error.to_json()) for error in row.errors],
        "kind": row.kind,
        "max_attempts": row.max_attempts,
        "metadata": row.metadata,
        "priority": row.priority,
        "queue": row.queue,
        "state": str(row.state),
        "scheduled_at": moment(row.scheduled_at),
        "tags": row.tags,
    }


class _Child:
    __slots__ = ("_body_size", "_out", "pid", "process", "reader", "writer")

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.pid = process.pid
        assert process.stdout is not None and process.stdin is not None
        self.reader = process.stdout
        self.writer = process.stdin
        # A message's size once its header is read: a receive cancelled while its body
        # arrives leaves it here, and the next receive reads that body.
        self._body_size: int | None = None
        # The transport reading the child's stdout into ``reader``, taken from asyncio's
        # (no public way to it): polled by a hard stop (sending), closed before reaping
        # (kill). Without it a hard stop never reads a live child (the earlier rule).
        transport = getattr(process, "_transport", None)
        self._out: Any = transport.get_pipe_transport(1) if transport is not None else None

    def send(self, message: dict[str, Any]) -> None:
        data = go_json_dumps(message).encode()
        self.writer.write(_HEADER.pack(len(data)) + data)

    def in_message(self) -> bool:
        """Whether a message's header was read and its body not yet."""
        return self._body_size is not None

    async def begin(self) -> None:
        """Read the next message's header, unless one was read already."""
        if self._body_size is None:
            header = await self.reader.readexactly(_HEADER.size)
            self._body_size = _HEADER.unpack(header)[0]

    async def receive(self) -> dict[str, Any]:
        await self.begin()
        assert self._body_size is not None
        body = await self.reader.readexactly(self._body_size)
        self._body_size = None
        message: dict[str, Any] = json_loads(body)
        return message

    def sending(self) -> bool:
        """Whether the child has begun a message this process has not read to its end:
        its header read, bytes read from the pipe and not taken yet (a receive cancelled
        as they came), or bytes waiting in the pipe. False when the pipe's transport is
        unknown (then nothing can tell, nor can kill() close it)."""
        out = self._out
        if out is None or out.is_closing():  # its end was read: nothing more comes
            return False
        # The reader's buffer, private too: a header there, not taken, is a message
        # begun though the pipe may be empty a moment (the child refilling it).
        if self.in_message() or getattr(self.reader, "_buffer", None):
            return True
        try:
            # poll, not select: select() refuses a descriptor past FD_SETSIZE (1024),
            # which a worker with many connections and children reaches.
            poller = select.poll()
            poller.register(out.get_extra_info("pipe"), select.POLLIN)
            return bool(poller.poll(0))  # POLLIN, or POLLHUP: a read would not wait
        except (OSError, ValueError, AttributeError, TypeError):  # closed; no poll(), no pipe
            return False

    async def kill(self) -> None:
        """SIGKILL and reap; returns only once the process is gone, even if cancelled."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.writer.close()
        self._close_out()
        await _reap(self.process)

    def _close_out(self) -> None:
        # Nothing more is read from the child: its pipe is closed now. asyncio's wait(),
        # begun before the exit is seen (just after a SIGKILL), returns only once every
        # pipe of the process is closed too; a reader left with a full buffer (a message
        # cut short: a hard stop that gave up on it) has stopped reading the pipe, and
        # would never see the EOF that closes it: the stop, and close(), hung for good.
        if self._out is not None:
            self._out.close()

    async def close(self, grace: float) -> None:
        """Close its pipe (an idle child exits at EOF); SIGKILL after ``grace`` s."""
        self.writer.close()
        try:
            async with asyncio.timeout(grace):
                await asyncio.shield(self.process.wait())
        except TimeoutError:
            await self.kill()
        except asyncio.CancelledError:
            await self.kill()
            raise


_masking = threading.local()


@contextlib.contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked in this thread, whose mask a child inherits across
    exec. A signal sent to this process meanwhile goes to another thread, or waits the
    few ms until the mask is restored. Spawns overlap (a warm-up beside a job's own, each
    awaiting its process): the mask is restored when the last of them is done, else the
    first would restore what the second saved, both signals blocked, and this process
    would never hear Ctrl-C or SIGTERM again."""
    depth: int = getattr(_masking, "depth", 0)
    if depth == 0:
        _masking.saved = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    _masking.depth = depth + 1
    try:
        yield
    finally:
        _masking.depth -= 1
        if _masking.depth == 0:
            signal.pthread_sigmask(signal.SIG_SETMASK, _masking.saved)


async def _reap(process: asyncio.subprocess.Process) -> None:
    waiting = asyncio.ensure_future(process.wait())
    cancelled = False
    while not waiting.done():
        try:
            await asyncio.shield(waiting)
        except asyncio.CancelledError:
            cancelled = True  # keep waiting: the child must be gone before we go on
    if cancelled:
        raise asyncio.CancelledError


class ProcessPool:
    """Up to ``size`` warm child processes for one queue's process jobs.

    ``memory_limit`` (bytes) caps each child's address space (``RLIMIT_AS``): an
    allocation past it fails in the child, the job fails with
    :class:`MemoryLimitExceeded`, and the child is replaced."""

    def __init__(
        self,
        size: int,
        *,
        memory_limit: int | None = None,
        name: str = "",
        preload: tuple[str, ...] = (),
        lease: float | None = None,
    ) -> None:
        self.size = size
        # While a child works a job the pool tells it every lease / 4 seconds that this
        # process still runs; a child told nothing for ``lease`` seconds exits (a frozen
        # worker's job is rescued and run elsewhere after the registry's dead_after: its
        # child must not go on running it beside the new attempt). None: no lease.
        self.lease = lease
        # Modules a child imports before it says it is ready (the process workers'), so
        # a job's timeout doesn't pay for its module's first import.
        self.preload = preload
        self.memory_limit = memory_limit
        self.name = name
        self._idle: list[_Child] = []
        self._busy: set[_Child] = set()
        self._slots = asyncio.Semaphore(size)
        self._closed = False
        self._warming: asyncio.Task[None] | None = None
        self._spawning = 0  # children started but not yet ready
        # Counters for tests, the CLI and bench: children started, and replaced after
        # dying, timing out, being cancelled or passing the memory limit.
        self.started = 0
        self.replaced = 0

    @property
    def pids(self) -> list[int]:
        """The pids of the live children, idle and busy."""
        return sorted(child.pid for child in (*self._idle, *self._busy))

    async def _spawn(self) -> _Child:
        self._spawning += 1
        try:
            return await self._start_child()
        finally:
            self._spawning -= 1

    async def _start_child(self) -> _Child:
        with _stop_signals_blocked():
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                *_interpreter_flags(),
                "-m",
                CHILD_MODULE,
                str(os.getpid()),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        child = _Child(process)
        try:
            main = sys.modules.get("__main__")
            main_file = getattr(main, "__file__", None)
            spec = getattr(main, "__spec__", None)
            child.send(
                {
                    "sys_path": [entry or os.getcwd() for entry in sys.path],
                    "main_path": os.path.abspath(main_file) if main_file else None,
                    # `python -m package.module`: the child imports it by that name.
                    "main_module": spec.name if spec is not None else None,
                    "memory_limit": self.memory_limit,
                    "log_level": logging.getLogger().getEffectiveLevel(),
                    "preload": list(self.preload),
                    "lease": self.lease,
                }
            )
            async with asyncio.timeout(CHILD_START_TIMEOUT):
                await self._ready(child)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            await child.kill()
            raise ChildProcessDied(
                f"a child process could not start: {describe_exit(process.returncode)}"
            ) from None
        except BaseException:
            await child.kill()
            raise
        self.started += 1
        return child

    async def _ready(self, child: _Child) -> None:
        """Wait for the child's ready message, logging what it logs before (a worker
        module that fails to import, say)."""
        while True:
            message = await child.receive()
            if "ready" in message:
                return
            self._log(message)

    def _log(self, message: dict[str, Any], job_id: int | None = None) -> None:
        """Log a record the child sent. One made by job ``job_id`` is logged here, in
        the job's context (handlers print it, RiverLog keeps it with the attempt); any
        other (made between jobs, or by a thread an earlier job left running) outside
        every job's context: printed, kept by no attempt."""
        record = message.get("log")
        if record is None:
            return
        logger = logging.getLogger(record["name"])
        if not logger.isEnabledFor(record["levelno"]):
            return
        made = logging.makeLogRecord(record)
        if job_id is not None and message.get("job") == job_id:
            logger.handle(made)
        else:
            contextvars.Context().run(logger.handle, made)

    def warm(self, count: int) -> None:
        """Start ``count`` children in the background (at most ``size`` in all), so the
        first jobs find a child ready rather than waiting ~0.1 s for an interpreter."""
        if count > 0 and self._warming is None:
            self._warming = asyncio.create_task(
                self._warm(min(count, self.size)), name=f"riverboat-process-pool-{self.name}"
            )

    async def _warm(self, count: int) -> None:
        for _ in range(count):
            if self._closed or self._children() >= self.size:
                return
            try:
                child = await self._spawn()
            except ChildProcessDied as exc:
                log.warning("process pool %s: %s", self.name, exc)
                return
            if self._closed or self._children() >= self.size:  # jobs started their own
                await child.close(0)
                return
            self._idle.append(child)

    def _children(self) -> int:
        return len(self._idle) + len(self._busy) + self._spawning

    async def run(
        self,
        worker: RegisteredWorker,
        job: Job[Any],
        ctx: _WorkContext,
        reference: str,
        on_start: Callable[[], None] | None = None,
        keep_sent: Callable[[], bool] | None = None,
        on_kept: Callable[[], None] | None = None,
    ) -> None:
        """Work ``job`` in a child; return as the work function did or raise what it
        raised (JobSnooze, JobCancel, or a :class:`ChildJobError` named after the
        original), :class:`ChildProcessDied` or :class:`MemoryLimitExceeded`.

        Cancelled while it waits for the child, it raises the cancellation, unless
        ``keep_sent()`` says to keep an outcome the child sent already (a hard stop) and
        the child had: then ``on_kept()`` is called and it goes on with that outcome as
        if the cancel had come a moment later (the caller sees to the cancellation: it
        is not re-raised)."""
        if self._closed:
            raise RuntimeError("the process pool was closed")
        message = {
            "fn": reference,
            "args_type": worker.process_args_type,
            "row": _encode_row(job.row),
        }
        async with self._slots:
            child = self._idle_child() or await self._spawn()
            self._busy.add(child)
            keep = killed = False
            try:
                if on_start is not None:  # the job's timeout counts from here
                    on_start()
                child.send(message)
                renewing = (
                    asyncio.create_task(self._renew(child)) if self.lease is not None else None
                )
                try:
                    outcome = await self._outcome(child, job.id)
                except asyncio.CancelledError:
                    sent = None
                    if keep_sent is not None and keep_sent():
                        killed = True
                        sent = await self._sent_before_kill(child, job.id)
                    if sent is None:
                        raise
                    outcome = sent
                    if on_kept is not None:
                        on_kept()
                finally:
                    if renewing is not None:
                        renewing.cancel()
                keep = not killed and "memory" not in outcome.get("error", {})
            except (asyncio.IncompleteReadError, ConnectionError):
                await _reap(child.process)
                raise self._died(child, job) from None
            finally:
                self._busy.discard(child)
                if keep and not self._closed:
                    self._idle.append(child)
                else:
                    self.replaced += 1
                    await child.kill()
        ctx.metadata_updates.update(outcome.get("metadata") or {})
        error = outcome.get("error")
        if error is not None:
            raise self._error(error)

    async def _renew(self, child: _Child) -> None:
        """Tell ``child`` this process still runs, every lease / 4 seconds."""
        assert self.lease is not None
        while True:
            await asyncio.sleep(self.lease / 4)
            with contextlib.suppress(ConnectionError, RuntimeError):  # dying: seen by run()
                child.send({"ping": True})

    def _idle_child(self) -> _Child | None:
        while self._idle:
            child = self._idle.pop()
            if child.process.returncode is None:
                return child
            # Died while idle (killed from outside): never hand it a job.
            log.warning(
                "process pool %s: idle child %d %s; replacing it",
                self.name,
                child.pid,
                describe_exit(child.process.returncode),
            )
            child.writer.close()
            self.replaced += 1
        return None

    async def _outcome(self, child: _Child, job_id: int) -> dict[str, Any]:
        while True:
            outcome = self._outcome_or_log(await child.receive(), job_id)
            if outcome is not None:
                return outcome

    def _outcome_or_log(self, message: dict[str, Any], job_id: int) -> dict[str, Any] | None:
        """The job's outcome when ``message`` is it; else the message is a log record of
        the job's, logged here, and None."""
        done = message.get("done")
        if done is not None:
            outcome: dict[str, Any] = done
            return outcome
        self._log(message, job_id)
        return None

    async def _sent_before_kill(self, child: _Child, job_id: int) -> dict[str, Any] | None:
        """The outcome ``child`` had sent for ``job_id`` and this process not read yet,
        or None. A child sending nothing is killed first, so that what its pipe holds is
        all it will ever send, read to its end. One in the middle of a message is read
        alive (a message larger than the pipe holds is written only as it is read), and
        killed by run() afterwards. Either way a message must begin within
        SENT_READ_TIMEOUT of the stop, and end within SENT_READ_LIMIT: a child logging as
        the stop comes, its job still running, costs the stop that half second; one
        that stalls mid-message costs it the limit, and its job is handed back."""
        if not child.sending():
            with contextlib.suppress(ProcessLookupError):
                child.process.kill()
        now = asyncio.get_running_loop().time()
        begun_by, read_by = now + SENT_READ_TIMEOUT, now + SENT_READ_LIMIT
        try:
            while True:
                if not child.in_message():
                    async with asyncio.timeout_at(begun_by):
                        await child.begin()
                async with asyncio.timeout_at(read_by):
                    message = await child.receive()
                outcome = self._outcome_or_log(message, job_id)
                if outcome is not None:
                    return outcome
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            return None

    def _died(self, child: _Child, job: Job[Any]) -> ChildProcessDied:
        how = describe_exit(child.process.returncode)
        hint = ""
        if self.memory_limit is not None and child.process.returncode == -signal.SIGKILL:
            hint = f" (its memory limit is {_mib(self.memory_limit)}; an OOM kill looks like this)"
        return ChildProcessDied(f"child process {child.pid} working job {job.id} {how}{hint}")

    def _error(self, error: dict[str, Any]) -> BaseException:
        if "snooze" in error:
            return JobSnooze(error["snooze"])
        cause = ChildJobError.named(
            error["type"],
            error["message"],
            error["traceback"],
            error.get("module", ""),
            error.get("qualname", ""),
            error.get("main_alias"),
        )
        if "cancel" in error:
            return JobCancel(cause)
        if "memory" in error and self.memory_limit is not None:
            exceeded = MemoryLimitExceeded(
                f"job exceeded its child process's memory limit of {_mib(self.memory_limit)} "
                f"(RLIMIT_AS): {error['type']}: {error['message']}".rstrip(": ")
            )
            exceeded.remote_traceback = error["traceback"]
            return exceeded
        if isinstance(cause, StopIteration) or (
            # Not an Exception: its ChildJobError is not one, so known by its name.
            error.get("module") == "builtins" and error.get("qualname") == "GeneratorExit"
        ):
            # A coroutine may not raise StopIteration (PEP 479): raised as is, it became
            # "RuntimeError: coroutine raised StopIteration", the child's trace lost. As
            # the thread executor does (threads.awaitable_error), a RuntimeError caused by
            # it; GeneratorExit too, as there.
            wrapped = ChildJobError.named(
                "RuntimeError",
                f"the job raised {error['type']}({error['message']!r})"
                if error["message"]
                else f"the job raised {error['type']}()",
                error["traceback"],
                "builtins",
                "RuntimeError",
            )
            wrapped.__cause__ = cause
            return wrapped
        return cause

    async def close(self, grace: float = 5.0) -> None:
        """Idle children exit now (pipe closed); busy ones were handed back or finished by
        the producer's stop, so any left are killed."""
        # A spawn cancelled mid-way kills its own child (_spawn).
        self._closed = True
        if self._warming is not None:
            self._warming.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warming
        children, self._idle = self._idle, []
        busy = list(self._busy)
        await asyncio.gather(
            *(child.close(grace) for child in children), *(child.kill() for child in busy)
        )


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container's cpuset
    narrows; ``os.cpu_count()`` counts the host's)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return len(affinity(0)) or 1
    return os.cpu_count() or 1


def _interpreter_flags() -> list[str]:
    """This interpreter's -W, -X, -O... flags, for the children (as multiprocessing's
    spawn passes them)."""
    flags: Callable[[], list[str]] | None = getattr(
        subprocess, "_args_from_interpreter_flags", None
    )
    return flags() if flags is not None else []


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB"
