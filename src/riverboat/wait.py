"""Waking ``job_wait`` and ``workflow_wait`` when what they wait for is finalized.

A waiter polls the job (or workflow) with a pause that grows; these signals cut the
pause short, so a wait ends within milliseconds of the outcome being written:

* **in the same process**: a waiter registers in :data:`LOCAL`; the completer of any
  runtime in the process wakes it after writing the outcome (no statement at all);
* **from another process, on Postgres**: the waiter listens on the
  ``<schema>.riverboat_finalized`` channel (``riverboat_fin`` past 43 characters of
  schema: riverboat/_channels.py) (through one LISTEN connection per client,
  shared by all its waiters) and announces what it waits for on
  ``<schema>.riverboat_wait``. Every runtime hears the announcements (its notifier
  listens) and keeps them until the waiter's timeout; a completer that finalized an
  announced job (or a task of an announced workflow) sends one ``pg_notify`` with the
  ids. Completions nobody waits for cost nothing: no statement, no payload, one check
  of two empty dicts per completer flush.

What the signals can miss is caught by the poll: an announcement a runtime heard only
after it wrote the outcome, a job finished by a Go River worker or by the rescuer, tasks
cancelled by the sweep. With a LISTEN connection the poll backs off to once a second;
without one (SQLite, a driver that can't LISTEN) to ten times a second. The sync client
listens too: its drivers have no LISTEN of their own, so an async twin of the driver
does it on a background event loop (one daemon thread per process).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from riverboat._channels import channel_name
from riverboat._seconds import is_seconds
from riverboat._sql import Statement
from riverboat.errors import DriverError, InvalidInputError, NotMigratedError

__all__ = [
    "FAILING_PAUSE",
    "FINALIZED_TOPIC",
    "LOCAL",
    "WAIT_TOPIC",
    "AsyncFinalizedWaiter",
    "FinalizedSignals",
    "FinalizedWaiter",
    "LocalWaits",
    "check_timeout",
    "read_failed_while_waiting",
]

log = logging.getLogger("riverboat.wait")

WAIT_TOPIC = "riverboat_wait"  # waiter -> runtimes: {"job_id": 1} or {"workflow_id": "wf_.."}
FINALIZED_TOPIC = (
    "riverboat_finalized"  # runtime -> waiters: {"job_ids": [..], "workflow_ids": [..]}
)

# Polls between signals: the pause doubles from FIRST to MAX. Without a LISTEN connection
# the poll is the only news from other processes, so it stays short.
PAUSE_FIRST = 0.002
PAUSE_MAX = 0.1
LISTENING_PAUSE_FIRST = 0.05
LISTENING_PAUSE_MAX = 1.0
# A runtime keeps an announced wait this long past the waiter's timeout, and at most
# this many of them (the oldest go first; their waiters fall back to polling).
INTEREST_SLACK = 5.0
INTEREST_MAX = 10_000
# Bytes of one notification's payload: Postgres refuses 8,000 or more ("payload string
# too long"), and the whole batch's waiters then fell back to polling. Counted in bytes,
# not ids: 500 generated workflow ids took about 15,500.
NOTIFY_PAYLOAD_MAX = 7900


def check_timeout(timeout: object) -> float:
    # NaN passed the old test (every comparison with it is false) and waited forever;
    # infinity would be written into the wait's announcement, which is JSON.
    if not is_seconds(timeout):
        raise InvalidInputError("timeout", "must be a finite number of seconds, at least 0")
    return float(timeout)


# Seconds at least between a wait's reads while they fail: a server restarting is not
# asked every PAUSE_MAX by each waiter.
FAILING_PAUSE = 1.0


def read_failed_while_waiting(exc: DriverError, failed: DriverError | None) -> DriverError:
    """A wait's read failed with ``exc`` (``failed``: its previous read's failure, if it
    failed too): said once per run of failures, and returned, for the wait to raise if
    no read answers by its deadline. A schema that is not migrated is no passing
    failure: raised."""
    if isinstance(exc, NotMigratedError):
        raise exc
    if failed is None:
        log.warning("waiting: reading from the database failed (asking again): %s", exc)
    return exc


def _pauses(deadline: float, first: float, most: float) -> Iterator[float]:
    pause = first
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        yield min(pause, left)
        pause = min(pause * 2, most)


class LocalWaits:
    """The waiters of this process, by job id and workflow id (thread-safe: a sync
    client's runtime completes jobs on its own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[int, list[Callable[[], None]]] = {}
        self._workflows: dict[str, list[Callable[[], None]]] = {}

    def __bool__(self) -> bool:
        return bool(self._jobs or self._workflows)

    def add(self, job_id: int | None, workflow_id: str | None, wake: Callable[[], None]) -> None:
        with self._lock:
            if job_id is not None:
                self._jobs.setdefault(job_id, []).append(wake)
            if workflow_id is not None:
                self._workflows.setdefault(workflow_id, []).append(wake)

    def remove(self, job_id: int | None, workflow_id: str | None, wake: Callable[[], None]) -> None:
        with self._lock:
            if job_id is not None:
                _discard(self._jobs, job_id, wake)
            if workflow_id is not None:
                _discard(self._workflows, workflow_id, wake)

    def finalized(self, job_ids: Iterable[int], workflow_ids: Iterable[str]) -> None:
        with self._lock:
            wakes = [w for i in job_ids for w in self._jobs.get(i, ())]
            wakes += [w for i in workflow_ids for w in self._workflows.get(i, ())]
        for wake in wakes:
            wake()


def _discard(
    table: dict[Any, list[Callable[[], None]]], key: Any, wake: Callable[[], None]
) -> None:
    wakes = table.get(key)
    if wakes is not None and wake in wakes:
        wakes.remove(wake)
        if not wakes:
            del table[key]


LOCAL = LocalWaits()


class FinalizedSignals:
    """A runtime's side: what waiters elsewhere announced, and the signals its
    completer sends after writing outcomes (see the module docstring)."""

    def __init__(self, driver: Any) -> None:
        self._driver = driver
        self._dialect = driver.dialect
        self._jobs: dict[int, float] = {}
        self._workflows: dict[str, float] = {}
        self.notified = 0  # notifications sent (tests count them)

    def watching(self) -> bool:
        """Whether anyone waits at all: the completer's only cost when nobody does."""
        return bool(LOCAL or self._jobs or self._workflows)

    def awaits(self, job_id: int | None = None, workflow_id: str | None = None) -> bool:
        """Whether a waiter elsewhere announced it waits for this job or workflow."""
        if job_id is not None:
            return job_id in self._jobs
        return workflow_id in self._workflows

    def heard(self, payload: dict[str, Any]) -> None:
        """A waiter's announcement (the notifier's handler for :data:`WAIT_TOPIC`)."""
        wait_for = payload.get("timeout")
        seconds = wait_for if isinstance(wait_for, (int, float)) and wait_for >= 0 else 60.0
        until = time.monotonic() + min(float(seconds), 86_400.0) + INTEREST_SLACK
        job_id = payload.get("job_id")
        workflow_id = payload.get("workflow_id")
        if isinstance(job_id, int) and not isinstance(job_id, bool):
            self._remember(self._jobs, job_id, until)
        elif isinstance(workflow_id, str):
            self._remember(self._workflows, workflow_id, until)

    @staticmethod
    def _remember(table: dict[Any, float], key: Any, until: float) -> None:
        table.pop(key, None)
        table[key] = until
        if len(table) > INTEREST_MAX:
            del table[next(iter(table))]

    async def after_finalized(self, done: Sequence[tuple[int, str | None]]) -> None:
        """Wake the waiters of the jobs ``done`` just finalized: ``(job id, workflow id
        or None)`` pairs."""
        job_ids = [job_id for job_id, _ in done]
        workflow_ids = {wf for _, wf in done if wf is not None}
        if LOCAL:
            LOCAL.finalized(job_ids, workflow_ids)
        if not (self._jobs or self._workflows):
            return
        now = time.monotonic()
        jobs = [i for i in job_ids if self._jobs.get(i, 0.0) >= now]
        workflows = sorted(w for w in workflow_ids if self._workflows.get(w, 0.0) >= now)
        for job_id in jobs:  # answered: every waiter of it hears this one notification
            del self._jobs[job_id]
        self._expire(now)
        for payload in finalized_payloads(jobs, workflows):
            stmt = self._dialect.job_finalized_notify(payload)
            if stmt is not None:
                await self._driver.fetch(stmt)
                self.notified += 1

    def _expire(self, now: float) -> None:
        _expire(self._jobs, now)
        _expire(self._workflows, now)


def finalized_payloads(
    job_ids: Sequence[int], workflow_ids: Sequence[str], limit: int = NOTIFY_PAYLOAD_MAX
) -> list[str]:
    """The notifications that name ``job_ids`` and ``workflow_ids`` as finalized, each
    payload under ``limit`` bytes. An id that can't fit even alone (a workflow id of
    thousands of characters, written by hand) is left out: its waiters poll."""
    empty = len(json.dumps({"job_ids": [], "workflow_ids": []}))
    payloads: list[str] = []
    jobs: list[int] = []
    workflows: list[str] = []
    size = empty
    values: list[int | str] = [*job_ids, *workflow_ids]
    for value in values:
        piece = len(json.dumps(value)) + 2  # ", " before it (ASCII: json escapes the rest)
        if empty + piece >= limit:
            continue
        if size + piece >= limit:
            payloads.append(json.dumps({"job_ids": jobs, "workflow_ids": workflows}))
            jobs, workflows, size = [], [], empty
        if isinstance(value, str):
            workflows.append(value)
        else:
            jobs.append(value)
        size += piece
    if jobs or workflows:
        payloads.append(json.dumps({"job_ids": jobs, "workflow_ids": workflows}))
    return payloads


def _expire(table: dict[Any, float], now: float) -> None:
    if table and next(iter(table.values())) < now:
        for key in [k for k, until in table.items() if until < now]:
            del table[key]


def _matches(payload: dict[str, Any], job_id: int | None, workflow_id: str | None) -> bool:
    if job_id is not None and job_id in (payload.get("job_ids") or ()):
        return True
    return workflow_id is not None and workflow_id in (payload.get("workflow_ids") or ())


class _Waiter(Protocol):
    job_id: int | None
    workflow_id: str | None
    listening: bool

    def wake_now(self) -> None: ...


class _SharedListener:
    """One LISTEN connection per driver (and event loop) for all of its waiters, so a
    web process with a hundred requests waiting holds one connection, not a hundred. It
    opens with the first waiter and closes once none has used it for ``IDLE_CLOSE``
    seconds (so waits one after another don't reconnect each time)."""

    IDLE_CLOSE = 10.0

    def __init__(self, driver: Any, schema: str | None = None) -> None:
        self._driver = driver
        self._schema = schema
        self.loop = asyncio.get_running_loop()
        self._waiters: set[_Waiter] = set()
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._idle: asyncio.TimerHandle | None = None

    async def join(self, waiter: _Waiter) -> None:
        """Add ``waiter``; returns once the channel is listened to (raises DriverError
        or OSError if it can't be)."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        self._waiters.add(waiter)
        if self._task is None or self._task.done():
            self._ready = self.loop.create_future()
            self._task = asyncio.create_task(self._run(self._ready), name="riverboat-job-wait")
        assert self._ready is not None
        try:
            await asyncio.shield(self._ready)
        except BaseException:
            self.leave(waiter)
            raise

    def leave(self, waiter: _Waiter) -> None:
        self._waiters.discard(waiter)
        if not self._waiters and self._task is not None and self._idle is None:
            self._idle = self.loop.call_later(self.IDLE_CLOSE, self._close_if_idle)

    def _close_if_idle(self) -> None:
        self._idle = None
        if not self._waiters and self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self, ready: asyncio.Future[None]) -> None:
        dialect = self._driver.dialect
        listener: Any = None
        try:
            schema = dialect.schema or self._schema
            if not schema:
                rows = await self._driver.fetch(dialect.stmt("current_schema"))
                schema = str(rows[0][0]) if rows else "public"
            listener = await self._driver.listener()
            await listener.listen(channel_name(schema, FINALIZED_TOPIC))
        except (DriverError, OSError) as exc:
            ready.set_exception(exc)
            ready.exception()  # retrieved: a waiter may have left already
            if listener is not None:
                with contextlib.suppress(DriverError, OSError):
                    await listener.close()
            return
        ready.set_result(None)
        try:
            async for note in listener.notifications():
                self._dispatch(note.payload)
        except (DriverError, OSError) as exc:
            log.debug("job_wait: LISTEN connection lost, waiters poll: %s", exc)
        finally:
            # The waiters left poll on; the next one to come reconnects.
            for waiter in list(self._waiters):
                waiter.listening = False
            with contextlib.suppress(DriverError, OSError):
                await listener.close()

    def _dispatch(self, raw: str) -> None:
        try:
            payload = json.loads(raw)
        except ValueError:
            return
        if not isinstance(payload, dict):
            return
        for waiter in list(self._waiters):
            if _matches(payload, waiter.job_id, waiter.workflow_id):
                waiter.wake_now()


# The shared listener of each driver (a driver lives in one event loop; another loop
# gets its own).
_LISTENERS: weakref.WeakKeyDictionary[Any, _SharedListener] = weakref.WeakKeyDictionary()


def _shared_listener(driver: Any, schema: str | None = None) -> _SharedListener:
    shared = _LISTENERS.get(driver)
    if shared is None or shared.loop is not asyncio.get_running_loop():
        shared = _LISTENERS[driver] = _SharedListener(driver, schema)
    return shared


def _no_listen(exc: Exception) -> None:
    if isinstance(exc, (DriverError, OSError, TimeoutError)):
        log.debug("job_wait: no LISTEN connection, polling only: %s", exc)
    else:  # a driver that can't make its async twin, or a bug: say so, and poll
        log.warning("job_wait: listening failed, polling only", exc_info=exc)


class _WaiterBase:
    """What both waiters share: what they wait for, the signal that cuts a pause short,
    and how long they pause (shorter while not listening)."""

    _event: asyncio.Event | threading.Event

    def __init__(
        self,
        driver: Any,
        timeout: float,
        *,
        job_id: int | None = None,
        workflow_id: str | None = None,
    ) -> None:
        self._driver = driver
        self._timeout = timeout
        # The caller's timeout counts from here: setting up the LISTEN connection is
        # part of the wait (a slow connect made job_wait(timeout=0.5) take 6.5 s).
        self._deadline = time.monotonic() + timeout
        self.job_id = job_id
        self.workflow_id = workflow_id
        self._event = self._new_event()
        self._shared: _SharedListener | None = None
        self.listening = False

    def _new_event(self) -> asyncio.Event | threading.Event:
        raise NotImplementedError

    def wake_now(self) -> None:
        self._event.set()

    def pauses(self) -> Iterator[float]:
        """The pauses between reads until the waiter's deadline (its timeout from when
        it was made)."""
        if self.listening:
            return _pauses(self._deadline, LISTENING_PAUSE_FIRST, LISTENING_PAUSE_MAX)
        return _pauses(self._deadline, PAUSE_FIRST, PAUSE_MAX)

    def _left(self) -> float:
        return max(self._deadline - time.monotonic(), 0.0)

    def _announcement(self) -> Statement:
        """The word to every runtime that this waiter listens (sent once it does, so a
        notification sent for it can't be missed)."""
        announcement: dict[str, Any] = {"timeout": self._timeout}
        if self.job_id is not None:
            announcement["job_id"] = self.job_id
        else:
            announcement["workflow_id"] = self.workflow_id
        stmt: Statement = self._driver.dialect.job_wait_announce(json.dumps(announcement))
        return stmt


class AsyncFinalizedWaiter(_WaiterBase):
    """A waiter's side, for the async client: ``async with`` it before the first read,
    then alternate reads with :meth:`pause`. On Postgres it listens (through the
    driver's shared LISTEN connection, when the driver can) and announces itself;
    anywhere it is registered in :data:`LOCAL`."""

    _event: asyncio.Event

    def _new_event(self) -> asyncio.Event:
        return asyncio.Event()

    async def __aenter__(self) -> AsyncFinalizedWaiter:
        loop = asyncio.get_running_loop()
        event = self._event

        def wake() -> None:
            loop.call_soon_threadsafe(event.set)

        self._wake = wake
        LOCAL.add(self.job_id, self.workflow_id, wake)
        try:
            await self._listen()
        except Exception as exc:  # listening only shortens the wait: poll instead
            _no_listen(exc)
            self._leave()
        return self

    async def _listen(self) -> None:
        dialect = self._driver.dialect
        capabilities = getattr(self._driver, "capabilities", None)
        if not getattr(capabilities, "listen", False) or not dialect.waits_notified:
            return
        shared = _shared_listener(self._driver)
        async with asyncio.timeout(self._left()):  # then it polls until the deadline
            await shared.join(self)
        self._shared = shared
        self.listening = True
        await self._driver.fetch(self._announcement())

    async def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if a signal came (then clear it)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._event.wait()
        self._event.clear()

    async def __aexit__(self, *exc: object) -> None:
        LOCAL.remove(self.job_id, self.workflow_id, self._wake)
        self._leave()

    def _leave(self) -> None:
        shared, self._shared = self._shared, None
        self.listening = False
        if shared is not None:
            shared.leave(self)


class _ListenThread:
    """The event loop, on a daemon thread of its own, that hosts the shared LISTEN
    connections of sync clients (whose drivers have none): started by the first sync
    waiter on Postgres, idle (no connection) once every listener closed."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def loop(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="riverboat-job-wait", daemon=True
                ).start()
                cls._loop = loop
            return cls._loop


# A sync driver's async twin (it LISTENs for the sync waiters) and its schema name.
_TWINS: weakref.WeakKeyDictionary[Any, tuple[Any, str]] = weakref.WeakKeyDictionary()
JOIN_TIMEOUT = 10.0  # seconds a sync waiter waits for the LISTEN connection, then polls


def _forget_after_fork() -> None:
    """In a child made by fork() (gunicorn --preload, multiprocessing's fork): the
    parent's listen thread did not come along, nor may its LISTEN connections' sockets
    be read here, and a lock another thread held at the fork would stay held. Every
    wait in the child started with the parent's loop, which never ran what it was given:
    each waited out JOIN_TIMEOUT (10 s) before its first poll."""
    global LOCAL
    _ListenThread._lock = threading.Lock()
    _ListenThread._loop = None
    _LISTENERS.clear()
    _TWINS.clear()
    LOCAL = LocalWaits()


os.register_at_fork(after_in_child=_forget_after_fork)


class FinalizedWaiter(_WaiterBase):
    """The sync client's waiter: registered in :data:`LOCAL`, and on Postgres (a driver
    that can make an async twin: psycopg, SQLAlchemy) listening through a shared LISTEN
    connection hosted on a background event loop, announced as the async one is."""

    _event: threading.Event

    def _new_event(self) -> threading.Event:
        return threading.Event()

    def __enter__(self) -> FinalizedWaiter:
        LOCAL.add(self.job_id, self.workflow_id, self._event.set)
        try:
            self._listen()
        except Exception as exc:  # listening only shortens the wait: poll instead
            _no_listen(exc)
            self._leave()
        return self

    def _listen(self) -> None:
        dialect = self._driver.dialect
        if not dialect.waits_notified or not hasattr(self._driver, "async_driver"):
            return
        twin = _TWINS.get(self._driver)
        if twin is None:
            schema = dialect.schema
            if not schema:
                rows = self._driver.fetch(dialect.stmt("current_schema"))
                schema = str(rows[0][0]) if rows else "public"
            twin = _TWINS[self._driver] = (self._driver.async_driver(), schema)
        async_driver, schema = twin
        if not getattr(getattr(async_driver, "capabilities", None), "listen", False):
            return

        async def join() -> _SharedListener:
            shared = _shared_listener(async_driver, schema)
            await shared.join(self)
            return shared

        future = asyncio.run_coroutine_threadsafe(join(), _ListenThread.loop())
        try:
            self._shared = future.result(min(JOIN_TIMEOUT, self._left()))
        except BaseException:
            future.cancel()
            raise
        self.listening = True
        self._driver.fetch(self._announcement())

    def pause(self, seconds: float) -> None:
        self._event.wait(seconds)
        self._event.clear()

    def __exit__(self, *exc: object) -> None:
        LOCAL.remove(self.job_id, self.workflow_id, self._event.set)
        self._leave()

    def _leave(self) -> None:
        shared, self._shared = self._shared, None
        self.listening = False
        if shared is not None:
            shared.loop.call_soon_threadsafe(shared.leave, self)
