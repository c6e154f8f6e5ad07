"""Waking ``job_wait`` and ``workflow_wait`` when what they wait for is finalized.

A waiter polls the job (or workflow) with a pause that grows; these signals cut the
pause short, so a wait ends within milliseconds of the outcome being written:

* **in the same process**: a waiter registers in :data:`LOCAL`; the completer of any
  runtime in the process wakes it after writing the outcome (no statement at all);
* **from another process, on Postgres**: the waiter LISTENs on the
  ``<schema>.riverboat_finalized`` channel and announces what it waits for on
  ``<schema>.riverboat_wait``. Every runtime hears the announcements (its notifier
  listens) and keeps them until the waiter's timeout; a completer that finalized an
  announced job (or a task of an announced workflow) sends one ``pg_notify`` with the
  ids. Completions nobody waits for cost nothing: no statement, no payload, one check
  of two empty dicts per completer flush.

What the signals can miss is caught by the poll: an announcement a runtime heard only
after it wrote the outcome, a job finished by a Go River worker or by the rescuer, tasks
cancelled by the sweep. With a LISTEN connection the poll backs off to once a second;
without one (SQLite, the sync client, a driver that can't LISTEN) to ten times a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from riverboat.errors import DriverError, InvalidInputError

__all__ = [
    "FINALIZED_TOPIC",
    "LOCAL",
    "WAIT_TOPIC",
    "AsyncFinalizedWaiter",
    "FinalizedSignals",
    "FinalizedWaiter",
    "LocalWaits",
    "check_timeout",
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
NOTIFY_IDS_MAX = 500  # ids per notification (a payload must stay under 8,000 bytes)


def check_timeout(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise InvalidInputError("timeout", "must be a number of seconds, at least 0")
    return float(timeout)


def _pauses(timeout: float, first: float, most: float) -> Iterator[float]:
    deadline = time.monotonic() + timeout
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
        self._expire(now)
        for start in range(0, max(len(jobs), len(workflows)), NOTIFY_IDS_MAX):
            stmt = self._dialect.job_finalized_notify(
                json.dumps(
                    {
                        "job_ids": jobs[start : start + NOTIFY_IDS_MAX],
                        "workflow_ids": workflows[start : start + NOTIFY_IDS_MAX],
                    }
                )
            )
            if stmt is not None:
                await self._driver.fetch(stmt)
                self.notified += 1

    def _expire(self, now: float) -> None:
        _expire(self._jobs, now)
        _expire(self._workflows, now)


def _expire(table: dict[Any, float], now: float) -> None:
    if table and next(iter(table.values())) < now:
        for key in [k for k, until in table.items() if until < now]:
            del table[key]


# The schema name a waiter's channel is in, once per driver (current_schema() when the
# client was given none).
_SCHEMAS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _matches(note: Any, job_id: int | None, workflow_id: str | None) -> bool:
    try:
        payload = json.loads(note.payload)
    except ValueError:
        return False
    if not isinstance(payload, dict):
        return False
    if job_id is not None and job_id in (payload.get("job_ids") or ()):
        return True
    return workflow_id is not None and workflow_id in (payload.get("workflow_ids") or ())


class AsyncFinalizedWaiter:
    """A waiter's side, for the async client: ``async with`` it before the first read,
    then alternate reads with :meth:`pause`. On Postgres it LISTENs (when the driver
    can) and announces itself; anywhere it is registered in :data:`LOCAL`."""

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
        self._job_id = job_id
        self._workflow_id = workflow_id
        self._event = asyncio.Event()
        self._listener: Any = None
        self._reader: asyncio.Task[None] | None = None
        self.listening = False

    async def __aenter__(self) -> AsyncFinalizedWaiter:
        loop = asyncio.get_running_loop()
        event = self._event

        def wake() -> None:
            loop.call_soon_threadsafe(event.set)

        self._wake = wake
        LOCAL.add(self._job_id, self._workflow_id, wake)
        try:
            await self._listen()
        except (DriverError, OSError) as exc:
            log.debug("job_wait: no LISTEN connection, polling only: %s", exc)
            await self._close_listener()
        return self

    async def _listen(self) -> None:
        dialect = self._driver.dialect
        capabilities = getattr(self._driver, "capabilities", None)
        if not getattr(capabilities, "listen", False) or not dialect.waits_notified:
            return
        schema = dialect.schema or _SCHEMAS.get(self._driver)
        if schema is None:
            rows = await self._driver.fetch(dialect.stmt("current_schema"))
            schema = str(rows[0][0]) if rows else "public"
            _SCHEMAS[self._driver] = schema
        self._listener = await self._driver.listener()
        await self._listener.listen(f"{schema}.{FINALIZED_TOPIC}")
        announcement: dict[str, Any] = {"timeout": self._timeout}
        if self._job_id is not None:
            announcement["job_id"] = self._job_id
        else:
            announcement["workflow_id"] = self._workflow_id
        await self._driver.fetch(dialect.job_wait_announce(json.dumps(announcement)))
        self._reader = asyncio.create_task(self._read(), name="riverboat-job-wait")
        self.listening = True

    async def _read(self) -> None:
        try:
            async for note in self._listener.notifications():
                if _matches(note, self._job_id, self._workflow_id):
                    self._event.set()
        except (DriverError, OSError) as exc:
            log.debug("job_wait: LISTEN connection lost, polling only: %s", exc)
            self.listening = False

    def pauses(self, timeout: float) -> Iterator[float]:
        if self.listening:
            return _pauses(timeout, LISTENING_PAUSE_FIRST, LISTENING_PAUSE_MAX)
        return _pauses(timeout, PAUSE_FIRST, PAUSE_MAX)

    async def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if a signal came (then clear it)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), seconds)
        self._event.clear()

    async def __aexit__(self, *exc: object) -> None:
        LOCAL.remove(self._job_id, self._workflow_id, self._wake)
        await self._close_listener()

    async def _close_listener(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, DriverError, OSError):
                await reader
        listener, self._listener = self._listener, None
        self.listening = False
        if listener is not None:
            with contextlib.suppress(DriverError, OSError):
                await listener.close()


class FinalizedWaiter:
    """The sync client's waiter: woken in-process (:data:`LOCAL`), else a bounded poll
    (sync drivers have no LISTEN connection)."""

    def __init__(
        self,
        driver: Any,
        timeout: float,
        *,
        job_id: int | None = None,
        workflow_id: str | None = None,
    ) -> None:
        self._job_id = job_id
        self._workflow_id = workflow_id
        self._event = threading.Event()
        self.listening = False

    def __enter__(self) -> FinalizedWaiter:
        LOCAL.add(self._job_id, self._workflow_id, self._event.set)
        return self

    def pauses(self, timeout: float) -> Iterator[float]:
        return _pauses(timeout, PAUSE_FIRST, PAUSE_MAX)

    def pause(self, seconds: float) -> None:
        self._event.wait(seconds)
        self._event.clear()

    def __exit__(self, *exc: object) -> None:
        LOCAL.remove(self._job_id, self._workflow_id, self._event.set)
