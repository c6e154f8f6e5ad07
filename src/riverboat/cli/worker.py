"""``riverboat worker MODULE:ATTR``: run a client's workers until signalled.

``ATTR`` names an ``AsyncClient``, a ``Client`` with queues, or a zero-argument callable
returning one (a factory is best with ``--processes``: every process builds its own
client and connections). SIGTERM or SIGINT stops softly: running jobs finish and their
outcomes are written, for at most ``--soft-stop-timeout`` seconds (the client's
``soft_stop_timeout`` unless given). Then, or at a second signal, it stops hard: every
running job is handed back (available again, attempt restored, errors unchanged, a
``job_interrupted`` event), outcomes are written, and the process exits even if a sync
job's thread never returns. ``--exit-when-idle`` drains every configured queue (see
``Runtime.drained``) and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from riverboat._imports import import_attribute
from riverboat.cli._arguments import integer, plain_number
from riverboat.cli._terminal import PrintableFormatter
from riverboat.client import AsyncClient, Client
from riverboat.errors import InvalidInputError
from riverboat.runtime.collector import tune_collector
from riverboat.runtime.events import EventKind
from riverboat.runtime.parent_death import parent_gone, signal_at_parent_death
from riverboat.runtime.runner import check_soft_stop_timeout
from riverboat.runtime.stacks import dump_stacks_on_signal

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext
    from multiprocessing.process import BaseProcess
    from multiprocessing.sharedctypes import Synchronized

    from riverboat.runtime.events import Subscription
    from riverboat.runtime.producer import Producer

__all__ = ["add_arguments", "load_client", "log_level", "run"]

log = logging.getLogger("riverboat.worker")
# A soft stop, and a second one a hard stop (_serve).
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

# --processes at most: far past what one machine's cores can use. A typo (100000) kept
# starting processes (load average 87 on a 2-core machine before it was stopped).
MAX_PROCESSES = 256


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="MODULE:ATTR", help="the client (or its factory)")
    parser.add_argument(
        "--processes",
        type=integer,
        default=1,
        help=f"worker processes to run (default 1, at most {MAX_PROCESSES})",
    )
    parser.add_argument(
        "--exit-when-idle",
        action="store_true",
        help="exit 0 once every configured queue is drained (nothing running, nothing "
        "available or due within 5 s; later work is left and logged)",
    )
    parser.add_argument(
        "--soft-stop-timeout",
        type=plain_number,
        default=None,
        metavar="SECONDS",
        help="on SIGTERM, wait this long for running jobs before handing them back "
        "(default: the client's soft_stop_timeout, 25 s unless set; -1 waits for ever)",
    )
    parser.add_argument(
        "--log-level", default="INFO", type=log_level, help="logging level (default INFO)"
    )
    parser.add_argument(
        "--metrics-port",
        type=integer,
        default=None,
        help="serve Prometheus metrics on this port (process i of --processes uses PORT+i)",
    )


def log_level(text: str) -> str:
    """``--log-level``: a level name logging knows (any case) or a number; anything else
    is argparse's usage error (exit 2) instead of a traceback from logging."""
    level = text.strip().upper()
    if (level.isascii() and level.isdigit()) or isinstance(logging.getLevelName(level), int):
        return level
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a logging level (DEBUG, INFO, WARNING, ERROR or CRITICAL)"
    )


def _queue_label(name: str, producer: Producer) -> str:
    """A queue's name and slots, with its process pool when it has one
    (docs/process-executor.md)."""
    pool = producer.process_pool
    if pool is None:
        return f"{name} ({producer.max_workers} slots)"
    limit = "" if pool.memory_limit is None else f", {pool.memory_limit >> 20} MiB each"
    return f"{name} ({producer.max_workers} slots, process pool of {pool.size}{limit})"


def load_client(target: str) -> AsyncClient:
    """Import ``MODULE:ATTR`` and return an AsyncClient with queues."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidInputError("target", f"{target!r} must look like package.module:attribute")
    if "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`, find modules in the working directory
    obj = import_attribute(
        module_name,
        attr,
        "target",
        f" (from {target}); run the worker from the directory that holds it, or check the name",
    )
    if isinstance(obj, type):
        # Called with no arguments, a class (riverboat.Client itself) raised a TypeError
        # about its own parameters.
        raise InvalidInputError(
            "target", f"{target} is a class; name a client, or a function that returns one"
        )
    if callable(obj) and not isinstance(obj, (AsyncClient, Client)):
        # Checked before the call: a work function named by mistake (myapp.jobs:send)
        # raised a TypeError about its own parameters, printed as a traceback, and an
        # async factory left a coroutine never awaited.
        if inspect.iscoroutinefunction(obj):
            raise InvalidInputError(
                "target",
                f"{target} is an async function; name a client, or a plain function that "
                "returns one",
            )
        try:
            inspect.signature(obj).bind()
        except TypeError:
            raise InvalidInputError(
                "target",
                f"{target} takes arguments; name a client, or a function of no arguments "
                "that returns one",
            ) from None
        except ValueError:  # no signature to read (a builtin): let the call say
            pass
        obj = obj()
    if isinstance(obj, Client):
        embedded = obj._embedded
        if embedded is None:
            raise InvalidInputError("target", f"{target} is a Client without queues")
        return embedded._factory()
    if not isinstance(obj, AsyncClient):
        raise InvalidInputError(
            "target", f"{target} is a {type(obj).__name__}, not a riverboat AsyncClient or Client"
        )
    if obj._runtime is None:
        raise InvalidInputError("target", f"{target} has no queues to work")
    return obj


async def _serve(
    client: AsyncClient, exit_when_idle: bool, stops_before_ready: Callable[[], int] | None = None
) -> int:
    loop = asyncio.get_running_loop()
    signals = 0
    soft = asyncio.Event()
    hard = asyncio.Event()

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            limit = client.runtime.config.soft_stop_timeout
            log.info(
                "stopping: waiting for running jobs (%s; signal again to hand them back now)",
                "without limit" if limit is None else f"up to {limit:g}s",
            )
            soft.set()
        else:
            log.info("stopping now: handing running jobs back")
            hard.set()

    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal)
    if stops_before_ready is not None:
        # A worker process of --processes: the stops its command forwarded while this
        # process started (it ignored the signals until now), acted on now. The signals
        # may come blocked too (multiprocessing's spawn can pass its mask on).
        for _ in range(min(stops_before_ready(), 2)):
            on_signal()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    dump_stacks_on_signal(loop)  # kill -USR1: what every task waits on, to stderr
    # With --exit-when-idle the last line says what the run did: count the outcomes.
    outcomes: Counter[str] = Counter()
    counting: asyncio.Task[None] | None = None
    if exit_when_idle:
        subscription = client.subscribe(
            EventKind.JOB_COMPLETED,
            EventKind.JOB_FAILED,
            EventKind.JOB_CANCELLED,
            EventKind.JOB_SNOOZED,
            maxsize=1_000_000,
        )
        counting = asyncio.ensure_future(_count_outcomes(subscription, outcomes))
    started = time.monotonic()
    await client.start()
    runtime = client.runtime
    log.info(
        "worker %s started: queues %s",
        client.id,
        ", ".join(_queue_label(name, producer) for name, producer in runtime.producers.items()),
    )
    try:
        while not soft.is_set():
            if exit_when_idle:
                if await runtime.drained():
                    break
                runtime.wake_settled()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.05 if exit_when_idle else 1.0):
                    await soft.wait()
        stopping = asyncio.ensure_future(client.stop())
        hard_wait = asyncio.ensure_future(hard.wait())
        done, _ = await asyncio.wait({stopping, hard_wait}, return_when=asyncio.FIRST_COMPLETED)
        if stopping not in done:
            # A second signal: hand back the running jobs; the stop then finishes.
            runtime.interrupt_running()
            await stopping
        hard_wait.cancel()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await client.close()
        if counting is not None:
            await asyncio.sleep(0)  # let the counter take the last outcomes delivered
            counting.cancel()
    if exit_when_idle:
        log.info("worker %s idle: %s", client.id, _summary(outcomes, time.monotonic() - started))
    abandoned = runtime.abandoned_threads
    if abandoned:
        log.info(
            "worker %s stopped; %d sync job threads still running were left behind "
            "(their jobs were handed back) and end with the process",
            client.id,
            abandoned,
        )
    else:
        log.info("worker %s stopped cleanly", client.id)
    return 0


async def _count_outcomes(subscription: Subscription, outcomes: Counter[str]) -> None:
    while True:
        event = await subscription.get()
        if event.kind is EventKind.JOB_FAILED:
            failed_for_good = event.job is not None and event.job.state == "discarded"
            outcomes["discarded" if failed_for_good else "failed, will retry"] += 1
        else:
            outcomes[str(event.kind.value).removeprefix("job_")] += 1


def _summary(outcomes: Counter[str], seconds: float) -> str:
    total = sum(outcomes.values())
    order = ("completed", "failed, will retry", "discarded", "snoozed", "cancelled")
    parts = [f"{outcomes[name]} {name}" for name in order if outcomes[name]]
    detail = f" ({', '.join(parts)})" if parts else ""
    return f"worked {total} job attempt{'s' if total != 1 else ''} in {seconds:.1f}s{detail}"


def _run_one(
    target: str,
    exit_when_idle: bool,
    log_level: str,
    metrics_port: int | None = None,
    soft_stop_timeout: float | None = None,
    stops_before_ready: Callable[[], int] | None = None,
) -> int:
    handler = logging.StreamHandler()
    handler.setFormatter(PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(
        level=int(log_level) if log_level.isascii() and log_level.isdigit() else log_level.upper(),
        handlers=[handler],
    )
    client = load_client(target)
    if soft_stop_timeout is not None:
        config = client.runtime.config
        config.soft_stop_timeout = check_soft_stop_timeout(soft_stop_timeout)
    if metrics_port is not None:
        from riverboat.contrib.prometheus import instrument, start_metrics_server

        instrument(client)
        start_metrics_server(metrics_port)
        log.info("serving Prometheus metrics on port %d", metrics_port)
    return asyncio.run(_serve(client, exit_when_idle, stops_before_ready))


class _Stops:
    """The stop signals the command forwards to one worker process of --processes.

    A worker process starts with SIGINT and SIGTERM ignored (inherited from the command,
    see run()): one signalled while it imports riverboat or starts its client would end
    it with a KeyboardInterrupt, or kill it outright. So until it says it is ready (its
    handlers installed), the command counts the stops instead of sending them, and the
    process acts on the count once ready; after that the command sends them. The count
    is -1 once ready; the lock makes "ready" and "one more stop" exclusive."""

    def __init__(self, ctx: BaseContext) -> None:
        self._count: Synchronized[int] = ctx.Value("i", 0)
        self._command = os.getpid()

    def forward(self, pid: int, signum: int) -> str:
        """In the command: send ``signum`` to the process, or count it until it is
        ready. A second stop for a process not ready yet (stuck in its target's import,
        say) is a hard stop: it is killed, having claimed no job yet. Returns what it
        did: "sent", "counted" or "killed"."""
        if signum == signal.SIGHUP:
            signum = signal.SIGTERM  # a hangup is a soft stop, like SIGTERM
        done = "sent"
        with self._count.get_lock():
            if self._count.value >= 0:
                self._count.value += 1
                if self._count.value < 2:
                    return "counted"
                signum, done = signal.SIGKILL, "killed"
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
        return done

    def watch_the_command(self) -> None:
        """In the worker process, first thing: SIGKILL if the command dies before this
        process is ready (nothing claimed yet, and its stop signals are ignored)."""
        signal_at_parent_death(signal.SIGKILL)

    def ready(self) -> int:
        """In the worker process, its handlers installed: the stops counted until now.
        From here a death of the command (SIGKILLed, say) sends this process SIGTERM, a
        soft stop, instead of leaving it working with nobody to stop it (Linux)."""
        signal_at_parent_death(signal.SIGTERM)
        with self._count.get_lock():
            counted, self._count.value = self._count.value, -1
        return counted + parent_gone(self._command)


def _child(
    target: str,
    exit_when_idle: bool,
    log_level: str,
    metrics_port: int | None,
    soft_stop_timeout: float | None,
    stops: _Stops,
) -> None:
    # Its own process group: Ctrl-C signals the terminal's foreground group, and this
    # process must hear it once, from the command that forwards it (the terminal's and
    # the command's made two signals: a hard stop, which handed running jobs back).
    os.setpgid(0, 0)
    stops.watch_the_command()
    for sig in _STOP_SIGNALS:
        # Still ignored (see _Stops); set again, which drops one the terminal sent
        # before the move, so that only the command's count stands.
        signal.signal(sig, signal.SIG_IGN)
    tune_collector()  # a spawned process starts with Python's settings
    sys.exit(
        _run_one(target, exit_when_idle, log_level, metrics_port, soft_stop_timeout, stops.ready)
    )


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.processes <= MAX_PROCESSES:
        raise InvalidInputError("--processes", f"must be 1 to {MAX_PROCESSES}")
    metrics_port = getattr(args, "metrics_port", None)  # callers may build their own args
    if metrics_port is not None and not 1 <= metrics_port <= 65536 - args.processes:
        # Checked before any process starts: a port out of range was a traceback from
        # the metrics server, in each process.
        raise InvalidInputError(
            "--metrics-port",
            "must be a TCP port, 1 to 65535"
            + ("" if args.processes == 1 else f", with PORT+{args.processes - 1} at most 65535"),
        )
    soft_stop_timeout = getattr(args, "soft_stop_timeout", None)
    if soft_stop_timeout is not None:
        check_soft_stop_timeout(soft_stop_timeout)  # before any process starts
    # This process only works jobs (see riverboat.runtime.collector); a bad
    # RIVERBOAT_GC_THRESHOLD fails here, before any worker process starts.
    tune_collector()
    if args.processes == 1:
        return _run_one(
            args.target, args.exit_when_idle, args.log_level, metrics_port, soft_stop_timeout
        )
    # spawn, not fork: each process imports the target afresh and opens its own
    # connections (a forked connection or event loop is shared state gone wrong).
    ctx = multiprocessing.get_context("spawn")
    stops = [_Stops(ctx) for _ in range(args.processes)]
    procs = [
        ctx.Process(
            target=_child,
            args=(
                args.target,
                args.exit_when_idle,
                args.log_level,
                None if metrics_port is None else metrics_port + i,
                soft_stop_timeout,
                stops[i],
            ),
        )
        for i in range(args.processes)
    ]

    def forward(signum: int, _frame: object) -> None:
        for number, (proc, process_stops) in enumerate(zip(procs, stops, strict=True), 1):
            if proc.pid is not None and proc.is_alive():
                done = process_stops.forward(proc.pid, signum)
                if done != "sent":
                    said = {
                        "counted": "is still starting: it stops once started (signal "
                        "again to kill it now)",
                        "killed": "was still starting: killed",
                    }[done]
                    print(
                        f"riverboat worker: process {number} of {len(procs)} (pid {proc.pid}) "
                        + said,
                        file=sys.stderr,
                        flush=True,
                    )

    # The worker processes start with the stop signals ignored (exec keeps an ignored
    # disposition; see _Stops). One that comes in the few ms these starts take is lost.
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    for proc in procs:
        proc.start()
    # The worker processes are in their own process groups (_child): a terminal's Ctrl-C
    # or hangup reaches this process only, and each of them hears it once, from here.
    # (Under systemd, KillMode=mixed signals this process only; control-group, the
    # default, also signals each worker process itself: two signals, a hard stop.)
    for sig in (*_STOP_SIGNALS, signal.SIGHUP):
        signal.signal(sig, forward)
    return _supervise(procs)


def _supervise(procs: Sequence[BaseProcess]) -> int:
    """Waits for the worker processes, saying as each one ends unexpectedly (the OOM
    killer's SIGKILL, a crash) how and how many are left: the others keep working.
    Returns the worst exit status, a signal's as a shell reports it (128 + its number)."""
    from multiprocessing.connection import wait

    from riverboat.runtime.process_pool import describe_exit

    running = {proc.sentinel: (number, proc) for number, proc in enumerate(procs, 1)}
    worst = 0
    while running:
        for sentinel in wait(list(running)):
            number, proc = running.pop(sentinel)  # type: ignore[arg-type]
            proc.join()
            code = proc.exitcode if proc.exitcode is not None else 1
            worst = max(worst, code if code >= 0 else 128 - code)
            if code != 0:
                print(
                    f"riverboat worker: process {number} of {len(procs)} (pid {proc.pid}) "
                    f"{describe_exit(proc.exitcode)}; {len(running)} still running",
                    file=sys.stderr,
                    flush=True,
                )
    return worst
