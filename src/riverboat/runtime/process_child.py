"""The entry point of a process-executor child: ``python -m riverboat.runtime.process_child``.

A fresh interpreter (never a fork of the asyncio process) started by
:mod:`riverboat.runtime.process_pool`. It reads jobs from its stdin and writes their
outcomes and log records to its stdout, one length-prefixed JSON message at a time
(``_wire``); the job's own ``print`` goes to stderr, so nothing it prints can corrupt the
channel. It works one job at a time, in its main thread, and serves jobs until its
parent closes the pipe.

It must not outlive its parent: on Linux the kernel sends it SIGKILL when the parent
dies (``PR_SET_PDEATHSIG``, which works even while a job holds the GIL in C code), and
everywhere a reader thread exits the process when the pipe from the parent reaches EOF.
"""

from __future__ import annotations

import contextvars
import faulthandler
import importlib
import json
import logging

# Imported before the parent's __main__ is: its first import points
# sys.modules["__mp_main__"] at this process's __main__ (once), and a later one, by
# the script or a job, no longer takes the name from the script's module.
import multiprocessing  # noqa: F401
import os
import queue
import select
import signal
import struct
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable
from datetime import datetime
from typing import IO, Any

from riverboat._job import AttemptError, JobRow, JobState
from riverboat._json import go_json_storable
from riverboat.runtime.outcomes import (
    ERROR_MESSAGE_MAX,
    JobCancel,
    JobSnooze,
    capped_error_text,
    error_message,
)
from riverboat.runtime.parent_death import parent_gone, signal_at_parent_death
from riverboat.runtime.worker import Job, Worker, _decoder_for, _work_context, _WorkContext

__all__ = ["main", "read_message", "write_message"]

_HEADER = struct.Struct(">I")
MAIN_MODULE = "__mp_main__"  # the name a parent's __main__ runs under here (multiprocessing's)


def write_message(stream: IO[bytes], message: dict[str, Any]) -> None:
    # What a job writes about itself (its error's text, log lines, metadata) with the
    # thread executor's rule: a lone surrogate (a file name decoded with
    # surrogateescape) or a NUL becomes U+FFFD, instead of failing the encoding, which
    # ended the child and lost the job's error.
    data = go_json_storable(message).encode()
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_message(stream: IO[bytes]) -> dict[str, Any] | None:
    """The next message, or None at EOF."""
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    body = _read_exactly(stream, _HEADER.unpack(header)[0])
    if body is None:
        return None
    message: dict[str, Any] = json.loads(body)
    return message


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    chunks: list[bytes] = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _die_with_parent(parent_pid: int) -> None:
    signal_at_parent_death(signal.SIGKILL)  # elsewhere: the pipe EOF rule
    if parent_gone(parent_pid):
        os._exit(0)


# The id of the job whose work function runs in this context (set in _work, in the
# fresh context each job runs in): a record is the job's only when made in it.
_current_job: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "riverboat_child_job", default=None
)


class _ForwardLogs(logging.Handler):
    """Sends every record made in this child to the parent, which logs it there (so its
    handlers print it and riverlog's RiverLog stores it with the attempt). Each names
    the job it was made by, or none: a thread the job started, still logging after
    the job returned, would otherwise put its lines into the next job's log (the
    parent logs what arrives while a job runs in that job's context). As with the
    thread executor, only records made in the job's own context count as the job's."""

    def __init__(self, send: Callable[[dict[str, Any]], None]) -> None:
        super().__init__(logging.NOTSET)
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            exc_text = record.exc_text
            if record.exc_info and not exc_text:
                exc_text = logging.Formatter().formatException(record.exc_info)
            self._send(
                {
                    "log": {
                        "name": record.name,
                        "levelno": record.levelno,
                        "levelname": record.levelname,
                        "msg": record.getMessage(),
                        "pathname": record.pathname,
                        "filename": record.filename,
                        "module": record.module,
                        "lineno": record.lineno,
                        "funcName": record.funcName,
                        "created": record.created,
                        "msecs": record.msecs,
                        "exc_text": exc_text,
                        "process": record.process,
                        "threadName": record.threadName,
                    },
                    "job": _current_job.get(),
                }
            )
        except Exception:
            self.handleError(record)


class _Resolver:
    """Turns the references the parent sends ("module:qualname") back into objects."""

    def __init__(self, main_path: str | None, main_module: str | None) -> None:
        self._main_path = main_path
        self._main_module = main_module
        self._functions: dict[str, Callable[[Job[Any]], Any]] = {}
        # The parent's __main__ once loaded, held here: sys.modules["__mp_main__"] is
        # not ours to keep (importing multiprocessing points it at this process's own
        # __main__, riverboat.runtime.process_child).
        self.main: types.ModuleType | None = None
        self._decoders: dict[str | None, Callable[[JobRow], Any]] = {}

    def module(self, name: str) -> Any:
        if name != "__main__":
            return importlib.import_module(name)
        if self.main is not None:
            # Again: a job may have imported multiprocessing since.
            sys.modules[MAIN_MODULE] = self.main
            return self.main
        if self._main_module is not None and self._main_module != "__main__":
            # `python -m package.module`: imported by its name, so its relative imports
            # work and its main block (under __name__ == "__main__") doesn't run.
            loaded = sys.modules[MAIN_MODULE] = importlib.import_module(self._main_module)
            self.main = loaded
            return loaded
        if self._main_path is None:
            raise ImportError("the parent's __main__ has no file to import")
        # Run the parent's script under another name, as multiprocessing's spawn does:
        # its `if __name__ == "__main__":` block (which starts the client) is skipped.
        module = types.ModuleType(MAIN_MODULE)
        module.__file__ = self._main_path
        sys.modules[MAIN_MODULE] = module
        with open(self._main_path, "rb") as source:
            code = compile(source.read(), self._main_path, "exec")
        try:
            exec(code, module.__dict__)
        except SystemExit as exc:
            # A script that reads its command line at import (argparse's parse_args at
            # the top level): the child has no such arguments. It stopped the child's
            # start (preload let it through); each job now fails saying why.
            sys.modules.pop(MAIN_MODULE, None)
            raise ImportError(
                f"the worker's script {self._main_path} exited (SystemExit: {exc.code}) "
                "while a child process ran it to find the job's function: read the "
                'command line under `if __name__ == "__main__":`, which a child skips'
            ) from None
        except BaseException:
            sys.modules.pop(MAIN_MODULE, None)
            raise
        # Again: the script may have imported multiprocessing, which repoints the name.
        sys.modules[MAIN_MODULE] = self.main = module
        return module

    def _object(self, reference: str) -> Any:
        module_name, _, qualname = reference.partition(":")
        target = self.module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
        return target

    def function(self, reference: str) -> Callable[[Job[Any]], Any]:
        fn = self._functions.get(reference)
        if fn is None:
            if reference.startswith("class:"):
                cls = self._object(reference.removeprefix("class:"))
                instance: Worker[Any] = cls()
                fn = instance.work
            else:
                fn = self._object(reference)
            self._functions[reference] = fn
        return fn

    def decoder(self, reference: str | None) -> Callable[[JobRow], Any]:
        decode = self._decoders.get(reference)
        if decode is None:
            args_type = None if reference is None else self._object(reference)
            decode = self._decoders[reference] = _decoder_for(args_type)
        return decode


def _optional_time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _row(data: dict[str, Any]) -> JobRow:
    return JobRow(
        id=data["id"],
        encoded_args=data["encoded_args"],
        attempt=data["attempt"],
        attempted_at=_optional_time(data["attempted_at"]),
        attempted_by=data["attempted_by"],
        created_at=datetime.fromisoformat(data["created_at"]),
        errors=[AttemptError.from_value(item) for item in data["errors"]],
        finalized_at=None,
        kind=data["kind"],
        max_attempts=data["max_attempts"],
        metadata=data["metadata"],
        priority=data["priority"],
        queue=data["queue"],
        state=JobState(data["state"]),
        scheduled_at=datetime.fromisoformat(data["scheduled_at"]),
        tags=data["tags"],
        unique_key=None,
        unique_states=None,
    )


# The parent stores "Type: message" cut at ERROR_MESSAGE_MAX: the child's cut leaves room
# for the type's name, so that the note of what was cut is the one stored.
_MESSAGE_SENT_MAX = ERROR_MESSAGE_MAX - 512


def _class_names(cls: type) -> dict[str, Any]:
    """How the parent finds ``cls`` again: its name, its module as the parent names it
    (the parent's script runs here as __mp_main__, or by its ``-m`` name, and is
    ``__main__`` there), its qualname, and for the ``-m`` module its own name too
    (``main_alias``): the parent may hold that module twice (as __main__ and, imported by
    another module, by its name), and the child's one class stands for both."""
    module = getattr(cls, "__module__", None)
    main = _RESOLVER.main if _RESOLVER is not None else None
    alias = None
    if not isinstance(module, str):
        module = ""
    elif main is not None and module == main.__name__:
        alias = module if module != MAIN_MODULE else None
        module = "__main__"
    elif module == MAIN_MODULE:
        module = "__main__"
    return {
        "type": cls.__name__,
        "module": module,
        "main_alias": alias,
        "qualname": cls.__qualname__,
    }


_RESOLVER: _Resolver | None = None


def _describe_error(exc: BaseException) -> dict[str, Any]:
    tb = exc.__traceback__
    # Leave out this module's own frame above the work function.
    if tb is not None and tb.tb_frame.f_code.co_filename == __file__ and tb.tb_next is not None:
        tb = tb.tb_next
    # Capped here as the parent stores them: a 50 MB message (and its traceback, which
    # repeats it) crossed the pipe whole, 100 MB of JSON taking seconds, enough to pass
    # the job's timeout and be recorded as a JobTimeoutError.
    message, trace = capped_error_text(
        error_message(exc),
        "".join(traceback.format_exception(type(exc), exc, tb)),
        _MESSAGE_SENT_MAX,
    )
    described: dict[str, Any] = {
        **_class_names(type(exc)),
        "message": message,
        "traceback": trace,
    }
    if isinstance(exc, JobSnooze):
        described["snooze"] = exc.seconds
    elif isinstance(exc, JobCancel):
        reason = exc.reason
        cause = reason if isinstance(reason, BaseException) else exc
        described["cancel"] = True
        described.update(_class_names(type(cause)))
        described["message"] = capped_error_text(error_message(cause), "", _MESSAGE_SENT_MAX)[0]
    elif isinstance(exc, MemoryError):
        described["memory"] = True
    return described


def _work(resolver: _Resolver, message: dict[str, Any]) -> dict[str, Any]:
    ctx = _WorkContext()
    error: BaseException | None = None
    try:
        fn = resolver.function(message["fn"])
        row = _row(message["row"])
        _current_job.set(row.id)
        job = Job(row, resolver.decoder(message["args_type"])(row), ctx)
        token = _work_context.set(ctx)
        try:
            result = fn(job)
        finally:
            _work_context.reset(token)
        if hasattr(result, "__await__"):
            close = getattr(result, "close", None)
            if callable(close):
                close()
            raise TypeError("the process executor runs plain def workers; this one is async")
    except BaseException as exc:
        # SystemExit and KeyboardInterrupt raised by the job's code too, as the thread
        # executor records them: re-raised, they ended the child, and the attempt failed
        # as "exited with code 3" with the job's own error lost. (The child ignores the
        # signals; only the job raises these.)
        error = exc
    if ctx.resumable is not None:  # what the parent would do, done where the state is
        error = ctx.resumable.finish(error, False, ctx.metadata_updates)
    outcome: dict[str, Any] = {"metadata": ctx.metadata_updates}
    if error is not None:
        outcome["error"] = _describe_error(error)
    return {"done": outcome}


def _drop_pipes(*fds: int) -> None:
    """In a process a job forks (``os.fork``, multiprocessing's fork): the protocol pipes'
    fds point to /dev/null instead. Inherited, they kept the parent's end open after
    this child died (no EOF), so its death went unseen until the job's timeout (never
    without one), and the parent could not reap it while the forked process lived."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        os.dup2(null, fd)
    os.close(null)


def main() -> None:
    parent_pid = int(sys.argv[1])
    # Ctrl-C reaches the terminal's whole process group, and systemd (KillMode=
    # control-group) sends SIGTERM to every process of the service: a soft stop of the
    # parent must not kill the jobs it is letting finish. The parent ends a child by
    # closing its pipe or with SIGKILL.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # The pool started this process with them blocked (process_pool._start_child): one
    # that came while riverboat was imported is pending, and dropped now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    _die_with_parent(parent_pid)
    # A crash in C code prints the Python stack it happened under to stderr.
    faulthandler.enable()
    # The protocol runs on private copies of stdin/stdout; the job's own stdout goes to
    # stderr and its stdin is empty.
    inbox = os.fdopen(os.dup(0), "rb", buffering=0)
    outbox = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    os.register_at_fork(after_in_child=lambda: _drop_pipes(inbox.fileno(), outbox.fileno()))
    hello = read_message(inbox)
    if hello is None:
        return
    # The parent's import path, in its order (what shadows what must not change).
    parent_path: list[str] = hello["sys_path"]
    sys.path[:] = parent_path + [entry for entry in sys.path if entry not in parent_path]
    limit = hello.get("memory_limit")
    if limit is not None:
        import resource

        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError) as exc:  # a platform without it (macOS refuses)
            print(f"riverboat: no memory limit in this child: {exc}", file=sys.stderr)
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with lock:
            write_message(outbox, message)

    root = logging.getLogger()
    root.handlers[:] = [_ForwardLogs(send)]
    root.setLevel(hello.get("log_level", logging.WARNING))
    jobs: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
    lease: float | None = hello.get("lease")
    heard_at = [time.monotonic()]  # the parent's last message
    working = threading.Event()  # set while a job runs

    def read_jobs() -> None:
        while True:
            message = read_message(inbox)
            if message is None:  # the parent closed the pipe or died: go too
                os._exit(0)
            heard_at[0] = time.monotonic()
            if "ping" not in message:
                jobs.put(message)

    threading.Thread(target=read_jobs, name="riverboat-child-reader", daemon=True).start()
    if lease is not None:
        threading.Thread(
            target=_outlive_no_frozen_parent,
            args=(lease, heard_at, working, inbox.fileno()),
            name="riverboat-child-lease",
            daemon=True,
        ).start()
    global _RESOLVER
    resolver = _RESOLVER = _Resolver(hello.get("main_path"), hello.get("main_module"))
    for module in hello.get("preload", ()):
        try:
            resolver.module(module)
        except Exception:  # the first job that needs it reports the error
            logging.getLogger("riverboat.process_child").exception("preloading %s", module)
    send({"ready": os.getpid()})
    while True:
        message = jobs.get()
        heard_at[0] = time.monotonic()
        working.set()
        # A fresh context per job, as a thread pool's copy_context gives each job.
        outcome = contextvars.Context().run(_work, resolver, message)
        working.clear()
        send(outcome)


# The exit status of a child that left its job because its parent stopped answering
# (process_pool.LEASE_EXPIRED_EXIT).
LEASE_EXPIRED_EXIT = 75


def _outlive_no_frozen_parent(
    lease: float, heard_at: list[float], working: threading.Event, inbox: int
) -> None:
    """Exit when a job runs and the parent said nothing for ``lease`` seconds.

    PR_SET_PDEATHSIG and the pipe's EOF cover a parent that died; not one that is
    frozen (SIGSTOP, a VM paused, swapped out), whose pipe stays open. Its registry row
    goes stale, the leader rescues its jobs after dead_after, and another worker runs
    them: this child, not frozen, ran its attempt beside the new one for as long as the
    parent stayed frozen.

    A job that holds the GIL (C code that doesn't release it) keeps the reader thread
    from reading the parent's messages, and this one from running: when it lets go,
    messages still waiting in the pipe say the parent is there."""
    while True:
        time.sleep(min(1.0, lease / 4))
        silent = time.monotonic() - heard_at[0]
        if working.is_set() and silent > lease and not select.select([inbox], [], [], 0)[0]:
            print(
                f"riverboat: this child's worker process said nothing for {silent:.0f}s "
                "(frozen?): leaving the job, which is rescued and run again elsewhere",
                file=sys.stderr,
                flush=True,
            )
            os._exit(LEASE_EXPIRED_EXIT)


if __name__ == "__main__":
    main()
