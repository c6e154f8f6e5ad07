"""Periodic jobs, enqueued by the leader (River §7.4).

``PeriodicJob(schedule, constructor, run_on_start=False, id=None, *, tz=None,
catch_up="all")``:
``schedule`` is a cron expression as River's robfig parser reads it (five fields, or six
with the seconds first, descriptors such as ``@daily``, an optional ``CRON_TZ=Zone``
prefix; evaluated in ``tz`` or the prefix's zone, else UTC; needs ``riverboat[cron]``), a
fixed interval (a ``timedelta`` or seconds, or robfig's ``@every <Go duration>``, which
needs no croniter), any object with ``next(after: datetime) ->
datetime`` (River's ``PeriodicSchedule``), or :data:`NEVER` (River's ``NeverSchedule()``:
never on a schedule, only ``run_on_start``). ``constructor()`` returns the job's args,
``(args, InsertOpts)``, an :class:`~riverboat.InsertManyParams`, or ``None`` to skip this
run; it may be a coroutine function.

Each run is inserted with ``scheduled_at`` = its tick and metadata ``"periodic": true``
(plus ``"river:periodic_job_id"`` when an id is set), through the normal insert path,
the client's insert hooks included.
Unless the constructor brings its own unique options, the job is unique over the periodic
job (its id, else its kind and args) and the tick, so a run is inserted at most once
however many clients there are and even when leadership changes mid-tick. Interval
ticks are aligned to the Unix epoch so every client computes the same ticks.

A periodic job with an ``id`` is durable (with riverboat's migration line at version 2):
after inserting its runs the leader stores the last tick inserted and the next one in
``riverboat_periodic_job``, and a new leader (after a restart, a crash or a deploy)
carries on from the stored next tick instead of from its own clock. The ticks that passed
while no leader ran it are handled by the job's ``catch_up`` policy: ``"all"`` (the
default; at most :data:`~riverboat._periodic.CATCH_UP_LIMIT`, the latest), ``"one"`` (one
run, for the latest) or ``"none"``. The stored times are written after the runs are
inserted, so a leader that dies in between leaves the tick to its successor, whose insert
of it is skipped as a duplicate (the unique key above). Jobs without an id keep their
schedule in memory only, as River's do.

Every client declares its periodic jobs with an id in the same table
(:class:`PeriodicPublisher`): its own set when it starts, and each one added or removed
at runtime, an added one with the template of its runs. The leader reads the
declarations every ``REFRESH_INTERVAL``: it runs what another client added (from the
template, unless its own job of that id has the same schedule) and stops what another
client removed. See docs/periodic-jobs.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import hashlib
import inspect
import json
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from riverboat._insert import InsertDefaults, InsertParams, chosen_unique_opts, resolve_insert
from riverboat._insert_async import run_insert
from riverboat._insert_plan import InsertPlan
from riverboat._job import (
    InsertManyParams,
    InsertOpts,
    JobState,
    RawArgs,
    UniqueOpts,
    format_rfc3339_nano,
)
from riverboat._json import json_loads
from riverboat._periodic import CATCH_UP_LIMIT, CATCH_UP_POLICIES, PeriodicJobRecord
from riverboat._unique import (
    KeyedRawArgs,
    args_unique_part,
    unique_states_bitmask,
    validate_unique_opts,
)
from riverboat.dialect._periodic_common import PeriodicJobDeclaration, PeriodicJobWrite
from riverboat.errors import (
    CALLBACK_FAILURES,
    DriverError,
    InvalidInputError,
    MissingDependencyError,
)
from riverboat.flow import check_args_keys
from riverboat.runtime._waiting import cancel_and_wait
from riverboat.runtime.maintenance._service import MaintenanceContext, Service
from riverboat.runtime.maintenance.periodic_job import NEVER, PeriodicJob
from riverboat.runtime.threads import DaemonThreadPool, call_then_release

__all__ = ["NEVER", "PeriodicJob", "PeriodicJobEnqueuer", "PeriodicJobs", "PeriodicPublisher"]

log = logging.getLogger("riverboat.maintenance")

# A run is due when its tick is less than this far away (River's margin).
DUE_MARGIN = timedelta(milliseconds=100)
# The riverboat migration line version that has riverboat_periodic_job.
DURABLE_LINE_VERSION = 2
# How often a durable leader reads the declarations again (seconds): the longest a
# periodic job added or removed at runtime on another client waits to be seen.
REFRESH_INTERVAL = 1.0
# How long a stopping client may take to declare its last runtime changes (seconds).
STOP_PUBLISH_TIMEOUT = 5.0
# How long after a custom schedule's next() failed it is asked again.
SCHEDULE_RETRY = timedelta(seconds=30)
# How long one constructor call may take (seconds): under the enqueuer's run limit
# (MaintenanceConfig.run_timeout, 30 s), so one slow constructor skips its own run only.
CONSTRUCTOR_TIMEOUT = 10.0


def _name(job: PeriodicJob) -> str:
    """How the log names a periodic job: its id, else its constructor and schedule."""
    if job.id is not None:
        return repr(job.id)
    constructor = getattr(job.constructor, "__qualname__", None) or repr(job.constructor)
    return f"{constructor} ({job.schedule!r})"


def _check_many(values: object, field: str) -> None:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidInputError(field, "must be a list")


class PeriodicJobs:
    """A client's periodic jobs, changeable while it runs (River's
    ``client.PeriodicJobs()``): each added job gets a handle for :meth:`remove`. Changes
    take effect on the leader at once, without a restart; an added job with
    ``run_on_start`` is inserted as soon as the leader sees it. Changes of jobs with an id
    are also declared to the leader of the fleet by the client's
    :class:`PeriodicPublisher`. Safe from any thread."""

    def __init__(self, jobs: Sequence[PeriodicJob] = ()) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[int, PeriodicJob] = {}
        self._next_handle = 1
        self.version = 0
        # Who hears of changes: the leader's enqueuer, the client's publisher.
        self._listeners: dict[str, Callable[[], None]] = {}
        # Runtime changes of jobs with an id, for the publisher to declare to the fleet:
        # the job as added, or None once removed (the last change of an id wins).
        self._pending: dict[str, PeriodicJob | None] = {}
        self.add_many(jobs)

    def add(self, job: PeriodicJob) -> int:
        """Add one periodic job; returns its handle."""
        return self.add_many([job])[0]

    def add_many(self, jobs: Sequence[PeriodicJob]) -> list[int]:
        """Add several at once (all or none); returns their handles."""
        jobs = list(jobs)
        for job in jobs:
            if not isinstance(job, PeriodicJob):
                raise InvalidInputError("periodic_jobs", "must be riverboat.PeriodicJob values")
        with self._lock:
            seen = {job.id for job in self._jobs.values() if job.id is not None}
            for job in jobs:
                if job.id is not None:
                    if job.id in seen:
                        raise InvalidInputError(
                            "periodic_jobs", f"duplicate periodic job id {job.id!r}"
                        )
                    seen.add(job.id)
            handles = []
            for job in jobs:
                if job.id is not None:
                    self._pending[job.id] = job
                self._jobs[self._next_handle] = job
                handles.append(self._next_handle)
                self._next_handle += 1
        self._changed()
        return handles

    def remove(self, handle: int) -> None:
        """Remove the job ``add`` returned ``handle`` for; unknown handles are ignored."""
        with self._lock:
            self._forget([handle])
        self._changed()

    def remove_by_id(self, id: str) -> bool:
        """Remove the job with this ``id``; False when there was none."""
        if not isinstance(id, str):
            # None matched every job added without an id, and removed them all.
            raise InvalidInputError("id", f"must be a str, not {type(id).__name__}")
        with self._lock:
            found = [h for h, job in self._jobs.items() if job.id == id]
            self._forget(found)
        self._changed()
        return bool(found)

    def remove_many(self, handles: Sequence[int]) -> None:
        """Remove the jobs of several handles at once (River's ``RemoveMany``)."""
        _check_many(handles, "handles")
        with self._lock:
            self._forget(handles)
        self._changed()

    def remove_many_by_id(self, ids: Sequence[str]) -> None:
        """Remove the jobs with these ids at once (River's ``RemoveManyByID``)."""
        _check_many(ids, "ids")
        if not all(isinstance(i, str) for i in ids):
            raise InvalidInputError("ids", "must be strs (None matched every job without an id)")
        wanted = set(ids)
        with self._lock:
            self._forget([h for h, job in self._jobs.items() if job.id in wanted])
        self._changed()

    def clear(self) -> None:
        """Remove every periodic job."""
        with self._lock:
            self._forget(list(self._jobs))
        self._changed()

    def _forget(self, handles: Sequence[int]) -> None:
        # Under the lock.
        for handle in handles:
            job = self._jobs.pop(handle, None)
            if job is not None and job.id is not None:
                self._pending[job.id] = None

    def listen(self, role: str, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from any thread) after every change; one per role."""
        with self._lock:
            self._listeners[role] = callback

    def take_pending(self) -> dict[str, PeriodicJob | None]:
        """The runtime changes of jobs with an id since the last call, by id."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending

    def snapshot(self) -> dict[int, PeriodicJob]:
        with self._lock:
            return dict(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def _changed(self) -> None:
        with self._lock:
            self.version += 1
            listeners = list(self._listeners.values())
        for listener in listeners:
            listener()


def periodic_unique_key(ident: str, tick: datetime) -> bytes:
    """The unique key of one run: the periodic job's identity and its tick."""
    text = f"&river:periodic={ident}&at={format_rfc3339_nano(tick)}"
    return hashlib.sha256(text.encode()).digest()


def parse_schedule(text: str) -> Any:
    """A stored schedule (:attr:`PeriodicJob.schedule_text`) as a schedule again; None for a
    custom schedule object, which only its own code can rebuild."""
    if text == "@never":
        return NEVER
    if text.startswith("@every ") and text.endswith("s"):
        return timedelta(seconds=float(text[len("@every ") : -1]))
    if text.startswith("custom "):
        return None
    return text


def _unpack(made: Any) -> tuple[Any, InsertOpts | None, str | None]:
    """A constructor's result as ``(args, opts, kind)``."""
    if isinstance(made, InsertManyParams):
        return made.args, made.opts, made.kind
    if (
        isinstance(made, tuple)
        and len(made) == 2
        and (made[1] is None or isinstance(made[1], InsertOpts))
    ):
        return made[0], made[1], None
    return made, None, None


class ConstructorStillRunning(Exception):
    """A periodic job's constructor from an earlier run has not returned yet."""


class ConstructorTimeout(Exception):
    """A periodic job's constructor did not return within CONSTRUCTOR_TIMEOUT."""


def _too_slow() -> ConstructorTimeout:
    # Read when raised: the limit is a module setting (tests lower it).
    return ConstructorTimeout(f"its constructor did not return within {CONSTRUCTOR_TIMEOUT:g}s")


async def _construct(
    job: PeriodicJob, in_flight: dict[int, asyncio.Future[Any]] | None = None
) -> object:
    """``job.constructor()``: a coroutine function on the loop, anything else on a daemon
    thread, as a sync job runs. On the loop a sync constructor that blocked (a query, a
    request) stalled the whole runtime, and one using Django's ORM raised
    SynchronousOnlyOperation (Django refuses to run on an event loop's thread), so that
    periodic job never ran. The thread's resources are handed back after it, as after a
    sync job (``threads.AFTER_SYNC_JOB``). A thread of its own, ended after the call:
    constructors run once per tick, and a pool kept by a service would outlive it.

    Each call has CONSTRUCTOR_TIMEOUT seconds (a TimeoutError then, which skips that
    job's run and no other's: the run's own limit failed every job's run with it).
    A thread can't be stopped, so with ``in_flight`` (the enqueuer's, by job) a
    constructor still running from an earlier run is not called again: that run is
    skipped too (ConstructorStillRunning), where each tick started one more stuck
    thread."""
    constructor = job.constructor
    if inspect.iscoroutinefunction(constructor):
        made = await _within(constructor())
    else:
        key = id(job)
        running = in_flight.get(key) if in_flight is not None else None
        if running is not None and not running.done():
            raise ConstructorStillRunning("its constructor from an earlier run has not returned")
        context = contextvars.copy_context()
        thread = DaemonThreadPool("riverboat-periodic-constructor")
        try:
            future = thread.run(context.run, call_then_release, constructor)
        finally:
            thread.shutdown(wait=False)  # its one thread ends after the call
        if in_flight is not None:
            in_flight[key] = future
            future.add_done_callback(lambda done: _forget(in_flight, key, done))
        # Shielded: past the limit the thread runs on, its future kept in in_flight.
        made = await _within(asyncio.shield(future))
    if inspect.isawaitable(made):
        made = await _within(made)
    return made


async def _within(awaitable: Any) -> Any:
    """``awaitable`` within CONSTRUCTOR_TIMEOUT (ConstructorTimeout past it)."""
    limit = asyncio.timeout(CONSTRUCTOR_TIMEOUT)
    try:
        async with limit:
            return await awaitable
    except TimeoutError:
        if limit.expired():
            raise _too_slow() from None
        raise  # the constructor's own


def _forget(in_flight: dict[int, asyncio.Future[Any]], key: int, done: asyncio.Future[Any]) -> None:
    if in_flight.get(key) is done:
        del in_flight[key]
    if not done.cancelled():
        done.exception()  # retrieved: a late failure was logged as a timeout already


async def _template_of(job: PeriodicJob, defaults: InsertDefaults) -> dict[str, Any] | None:
    """The insert a leader without ``job``'s code makes for it: its constructor's result
    now, resolved (kind, args, queue, priority, max_attempts, tags, metadata). None when
    it can't be rebuilt elsewhere (a custom schedule) or the constructor gives nothing."""
    if parse_schedule(job.schedule_text) is None:
        return None
    args, opts, kind = _unpack(await _construct(job))
    if args is None:
        return None
    params = resolve_insert(args, opts or InsertOpts(), kind, defaults)
    template: dict[str, Any] = {
        "kind": params.kind,
        "args": json.loads(params.encoded_args),
        "queue": params.queue,
        "priority": params.priority,
        "max_attempts": params.max_attempts,
        "tags": list(params.tags),
        "metadata": json.loads(params.encoded_metadata),
    }
    # The args as encoded, in a JSON string, for the runs: Postgres's jsonb keeps no
    # number as written (1e21 came back as an integer past int64, and every run built
    # from the parsed "args" above was refused).
    template["args_text"] = params.encoded_args
    own = getattr(args, "insert_opts", None)
    own_opts = own() if callable(own) else None
    unique = chosen_unique_opts(opts, own_opts if isinstance(own_opts, InsertOpts) else None)
    if isinstance(unique, UniqueOpts) and not unique.is_empty():
        # Without them a leader lacking the job's code made its runs unique by the
        # periodic job's id and tick only, where the client that added it used these.
        template["unique_opts"] = _unique_template(unique)
        if unique.by_args:
            # The args' part of the key, worked out here where the args object is (how
            # Go orders and encodes an object's values): the text alone can't say.
            template["unique_args"] = args_unique_part(
                params.encoded_args, getattr(args, "unique_fields", None), args
            )
    return template


def _unique_template(unique: UniqueOpts) -> dict[str, Any]:
    period = unique.by_period
    return {
        "by_args": unique.by_args,
        "by_period": period.total_seconds() if isinstance(period, timedelta) else period,
        "by_queue": unique.by_queue,
        "by_state": None
        if unique.by_state is None
        else [str(getattr(state, "value", state)) for state in unique.by_state],
        "exclude_kind": unique.exclude_kind,
    }


def _unique_of(record_id: str, template: dict[str, Any]) -> UniqueOpts | None:
    """The unique options stored with a template (None: none, or not valid here, said
    once: the runs are then unique by the periodic job's id and tick, as a template
    without them, rather than refused at every tick)."""
    stored = template.get("unique_opts")
    if not isinstance(stored, dict):
        return None
    by_state = stored.get("by_state")
    period = stored.get("by_period")
    try:
        unique = UniqueOpts(
            by_args=stored.get("by_args") is True,
            by_period=period
            if isinstance(period, int | float) and not isinstance(period, bool)
            else None,
            by_queue=stored.get("by_queue") is True,
            by_state=by_state if isinstance(by_state, list) else None,
            exclude_kind=stored.get("exclude_kind") is True,
        )
        validate_unique_opts(unique, "template.unique_opts")
        if unique.by_args and not isinstance(template.get("unique_args"), str):
            raise InvalidInputError("template.unique_args", "missing")
    except InvalidInputError as exc:
        log.warning(
            "periodic job %r: its template's unique options can't be used here (%s); its "
            "runs are unique per tick only",
            record_id,
            exc,
        )
        return None
    return unique


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json_loads(text), dict)
    except ValueError:
        return False


def _job_of(record: PeriodicJobRecord) -> PeriodicJob | None:
    """A periodic job another client added at runtime, rebuilt from its stored row."""
    template = record.template
    schedule = parse_schedule(record.schedule)
    if template is None or schedule is None:
        return None
    args: Any = template.get("args") or {}
    unique = _unique_of(record.id, template)
    text = template.get("args_text")
    if isinstance(text, str) and _is_json_object(text):
        # As the client that added it encoded them, byte for byte, and keyed as its own
        # insert of them was.
        part = template.get("unique_args")
        if unique is not None and unique.by_args and isinstance(part, str):
            args = KeyedRawArgs(text, unique_part=part)
        else:
            args = RawArgs(text)
    insert = InsertManyParams(
        args,
        InsertOpts(
            queue=template.get("queue"),
            priority=template.get("priority"),
            max_attempts=template.get("max_attempts"),
            tags=template.get("tags"),
            metadata=template.get("metadata"),
            unique_opts=unique,
        ),
        kind=template.get("kind"),
    )
    catch_up = record.catch_up if record.catch_up in CATCH_UP_POLICIES else "all"
    try:
        return PeriodicJob(schedule, lambda: insert, id=record.id, catch_up=catch_up)
    except (InvalidInputError, MissingDependencyError) as exc:
        log.warning("periodic job %r: its stored schedule can't be run here: %s", record.id, exc)
        return None


class _Entry:
    __slots__ = (
        "dirty",
        "handle",
        "job",
        "last_run_at",
        "next_run_at",
        "run_on_start_pending",
        "schedule_retry_at",
        "source",
    )

    def __init__(self, job: PeriodicJob, handle: int = 0) -> None:
        self.handle = handle
        self.job = job
        self.next_run_at: datetime | None = None
        self.last_run_at: datetime | None = None
        self.run_on_start_pending = False
        # Its times changed since they were last stored (durable jobs only).
        self.dirty = False
        # For a job rebuilt from another client's declaration: what it was built from.
        self.source: tuple[str, str, str] | None = None
        # When its custom schedule, whose next() failed, is asked again (else None).
        self.schedule_retry_at: datetime | None = None


class PeriodicJobEnqueuer(Service):
    name = "periodic"

    def __init__(
        self,
        ctx: MaintenanceContext,
        jobs: list[PeriodicJob] | PeriodicJobs,
        defaults: InsertDefaults | None = None,
    ) -> None:
        super().__init__(ctx, 1.0)
        self.jobs = jobs if isinstance(jobs, PeriodicJobs) else PeriodicJobs(jobs)
        self._entries: list[_Entry] = []
        self._version = -1
        self._started = False
        self._defaults = defaults or InsertDefaults()
        self.inserted = 0
        self.skipped_duplicates = 0
        # Sync constructors whose thread has not returned, by id(job) (see _construct).
        self._constructing: dict[int, asyncio.Future[Any]] = {}
        # None until this term's first run has read the stored times; then whether
        # riverboat_periodic_job exists, and its rows by id as last read or written.
        self.durable: bool | None = None
        self._stored: dict[str, PeriodicJobRecord] = {}
        # Jobs other clients added at runtime (by id), and ids removed at runtime.
        self._remote: dict[str, _Entry] = {}
        self._removed: set[str] = set()

    def _sync(self, now: datetime) -> None:
        """Pick up jobs added or removed since the last look (the bundle's version)."""
        if self._version == self.jobs.version:
            return
        self._version = self.jobs.version
        current = {entry.handle: entry for entry in self._entries}
        entries = []
        for handle, job in self.jobs.snapshot().items():
            entry = current.get(handle)
            if entry is None:
                entry = _Entry(job, handle)
                entry.next_run_at = self._next(entry, now)
                if self.durable:
                    self._resume(entry, now)
                # Added to a running leader: run_on_start means now.
                entry.run_on_start_pending = job.run_on_start and self._started
            entries.append(entry)
        self._entries = entries

    def _now(self) -> datetime:
        """The client's clock when stubbed (``use_test_config``, River's
        ``TestConfig.Time``), otherwise this process's."""
        stubbed = self.ctx.clock.now()
        return datetime.now(UTC) if stubbed is None else stubbed

    async def on_start(self) -> None:
        # Until the stored times are read (the first run), the schedule starts from now.
        now = self._now()
        loop = asyncio.get_running_loop()

        def changed() -> None:
            loop.call_soon_threadsafe(self.wake)

        self.jobs.listen("enqueuer", changed)
        self._version = self.jobs.version
        self._entries = [_Entry(job, handle) for handle, job in self.jobs.snapshot().items()]
        for entry in self._entries:
            entry.next_run_at = self._next(entry, now)
            entry.run_on_start_pending = entry.job.run_on_start
        self.durable = None
        self._stored = {}
        self._remote = {}
        self._removed = set()
        self._started = True

    async def _load(self, now: datetime) -> None:
        """Read the stored times once per term and carry on from them."""
        from riverboat.migrations import applied_version_async

        version = await applied_version_async(self.ctx.driver, "riverboat")
        self.durable = version >= DURABLE_LINE_VERSION
        if not self.durable:
            if any(entry.job.id is not None for entry in self._entries):
                log.warning(
                    "periodic jobs: riverboat's migration line is not at version %d (run "
                    "`riverboat migrate up`): their next runs are kept in memory only, so a "
                    "restart or a leader change may skip ticks",
                    DURABLE_LINE_VERSION,
                )
            return
        await self._read()
        for entry in self._entries:
            self._resume(entry, now)

    async def _read(self) -> None:
        dialect = self.ctx.dialect
        rows = await self.ctx.driver.fetch(dialect.periodic_job_list())
        self._stored = {r.id: r for r in map(dialect.decode_periodic_job, rows)}
        self._removed = {r.id for r in self._stored.values() if r.removed_at is not None}

    def _follow_declarations(self, now: datetime) -> None:
        """Run what other clients declared at runtime: a job one of them added (from its
        template) unless this client's own job of that id has the same schedule, and
        none that one of them removed."""
        local = {e.job.id: e for e in self._entries if e.job.id is not None}
        remote: dict[str, _Entry] = {}
        for record in self._stored.values():
            if record.removed_at is not None or record.template is None:
                continue
            mine = local.get(record.id)
            if mine is not None and mine.job.schedule_text == record.schedule:
                continue  # this client's own code runs it
            source = (record.schedule, record.catch_up, json.dumps(record.template, sort_keys=True))
            entry = self._remote.get(record.id)
            if entry is None or entry.source != source:
                job = _job_of(record)
                if job is None:
                    continue
                entry = _Entry(job)
                entry.source = source
                entry.next_run_at = self._next(entry, now)
                self._resume(entry, now)
            remote[record.id] = entry
        self._remote = remote

    def _active(self) -> list[_Entry]:
        """The entries this leader runs: its own, less those removed or redefined at
        runtime elsewhere, and those other clients added at runtime."""
        own = [
            e
            for e in self._entries
            if e.job.id is None or (e.job.id not in self._removed and e.job.id not in self._remote)
        ]
        return own + list(self._remote.values())

    def _resume(self, entry: _Entry, now: datetime) -> None:
        """Take a durable job's stored times, with its catch-up policy applied to the
        ticks that passed while no leader ran it; a new job's row is written at once."""
        job = entry.job
        if job.id is None:
            return
        entry.dirty = True
        stored = self._stored.get(job.id)
        if stored is None or stored.schedule != job.schedule_text or stored.next_run_at is None:
            # New, or its schedule changed (a deploy): its ticks start from now.
            entry.last_run_at = stored.last_run_at if stored is not None else None
            return
        entry.last_run_at = stored.last_run_at
        entry.next_run_at = stored.next_run_at
        horizon = now + DUE_MARGIN
        if stored.next_run_at >= horizon:
            return
        if job.catch_up == "none":
            entry.next_run_at = self._next(entry, now)
            log.info(
                "periodic job %s: missed runs since %s skipped (catch_up none)",
                _name(job),
                format_rfc3339_nano(stored.next_run_at),
            )
            return
        limit = 1 if job.catch_up == "one" else CATCH_UP_LIMIT
        try:
            ticks, left_out = job.last_ticks(stored.next_run_at, horizon, limit)
        except CALLBACK_FAILURES as exc:
            entry.next_run_at = None
            self._schedule_failed(entry, exc)
            return
        if ticks:
            entry.next_run_at = ticks[0]
        if left_out and job.catch_up == "all":
            log.warning(
                "periodic job %s: more than %d runs were missed since %s; only the latest "
                "%d are inserted",
                _name(job),
                CATCH_UP_LIMIT,
                format_rfc3339_nano(stored.next_run_at),
                CATCH_UP_LIMIT,
            )

    def next_delay(self) -> float:
        self._sync(self._now())
        active = self._active()
        if any(e.run_on_start_pending or e.dirty for e in active):
            return 0.0
        # Durable: read the declarations again soon, so that what other clients add or
        # remove at runtime is seen within REFRESH_INTERVAL.
        longest = REFRESH_INTERVAL if self.durable else 3600.0
        # A failed custom schedule is asked again at its retry time.
        upcoming = [
            tick for e in active if (tick := e.next_run_at or e.schedule_retry_at) is not None
        ]
        if not upcoming:
            return longest
        return min(max((min(upcoming) - self._now()).total_seconds(), 0.0), longest)

    def _due(self, entry: _Entry, horizon: datetime) -> list[datetime]:
        """The entry's ticks before ``horizon``: one as a rule, several when catching up
        (at most CATCH_UP_LIMIT per run)."""
        ticks: list[datetime] = []
        tick = entry.next_run_at
        while tick is not None and tick < horizon and len(ticks) < CATCH_UP_LIMIT:
            ticks.append(tick)
            tick = self._next(entry, tick)
        return ticks

    def _next(self, entry: _Entry, after: datetime) -> datetime | None:
        """The entry's first tick after ``after``. A custom schedule whose next() fails
        (raises, even SystemExit, returns what is not an aware datetime, or a time not
        after ``after``) has no tick
        until it is asked again SCHEDULE_RETRY later: the other periodic jobs run on, as
        they do past a constructor that fails."""
        try:
            tick = entry.job.next_after(after)
        except CALLBACK_FAILURES as exc:
            self._schedule_failed(entry, exc)
            return None
        if tick is not None and tick <= after:
            # A tick that does not advance (">=" where next() must be ">") was asked
            # for again at once, forever: thousands of runs a second, nothing logged.
            self._schedule_failed(
                entry,
                ValueError(
                    f"next({after.isoformat()}) returned {tick.isoformat()}, not a later time"
                ),
            )
            return None
        entry.schedule_retry_at = None
        return tick

    def _schedule_failed(self, entry: _Entry, exc: BaseException) -> None:
        entry.schedule_retry_at = self._now() + SCHEDULE_RETRY
        log.error(
            "periodic job %s: its schedule failed (%s: %s); no runs until it is asked again in %ds",
            _name(entry.job),
            type(exc).__name__,
            exc,
            SCHEDULE_RETRY.total_seconds(),
            exc_info=exc,
        )

    def _retry_schedules(self, active: list[_Entry], now: datetime) -> None:
        """Ask the failed custom schedules whose retry time came again."""
        for entry in active:
            retry_at = entry.schedule_retry_at
            if retry_at is not None and retry_at <= now and entry.next_run_at is None:
                entry.next_run_at = self._next(entry, now)

    async def run_once(self) -> None:
        now = self._now()
        if self.durable is None:
            await self._load(now)
        elif self.durable:
            await self._read()
        self._sync(now)
        if self.durable:
            self._follow_declarations(now)
        active = self._active()
        self._retry_schedules(active, now)
        due: list[tuple[_Entry, datetime, bool]] = []
        due.extend((e, now, True) for e in active if e.run_on_start_pending)
        horizon = now + DUE_MARGIN
        for entry in active:
            due.extend((entry, tick, False) for tick in self._due(entry, horizon))
        params: list[InsertParams] = []
        made_args: list[object] = []
        for entry, tick, on_start in due:
            built = await self._build(entry.job, tick, unique=not on_start)
            if built is not None:
                params.append(built[0])
                made_args.append(built[1])
                if not on_start and (entry.last_run_at is None or tick > entry.last_run_at):
                    entry.last_run_at = tick
        if params:
            # The client's one insert path: its insert hooks and insert_many middleware
            # (River's periodic inserts pass through its JobInsertMiddleware too), its
            # notify limiter, batches of 5,000, unique twins collapsed.
            ctx = self.ctx
            plan = InsertPlan(
                ctx.dialect, params, made_args, ctx.notify_limiter, middleware=ctx.middleware
            )
            results = await run_insert(plan, ctx.driver, ctx.driver.transaction)
            skipped = sum(1 for r in results if r.unique_skipped_as_duplicate)
            self.skipped_duplicates += skipped
            self.inserted += len(results) - skipped
            queues = plan.available_queues()
            if queues:
                ctx.wake_queues(queues)
        # Advance only once the runs are written, so a failed insert is retried (after
        # the error backoff) for the same ticks; the unique key keeps that idempotent.
        for entry, tick, on_start in due:
            if on_start:
                entry.run_on_start_pending = False
            else:
                entry.next_run_at = self._next(entry, tick)
                entry.dirty = entry.job.id is not None
        await self._store()

    async def _store(self) -> None:
        """Write the durable jobs' new times (one statement). A leader that dies before
        this leaves the ticks to the next, whose inserts of them are duplicates."""
        if not self.durable:
            return
        changed = [e for e in self._active() if e.dirty and e.job.id is not None]
        if not changed:
            return
        writes = [
            PeriodicJobWrite(
                id=e.job.id,  # type: ignore[arg-type]  # filtered above
                schedule=e.job.schedule_text,
                catch_up=e.job.catch_up,
                next_run_at=e.next_run_at,
                last_run_at=e.last_run_at,
            )
            for e in changed
        ]
        await self.ctx.driver.execute(self.ctx.dialect.periodic_job_save(writes))
        for entry in changed:
            entry.dirty = False

    async def _build(
        self, job: PeriodicJob, tick: datetime, *, unique: bool
    ) -> tuple[InsertParams, object] | None:
        try:
            made = await _construct(job, self._constructing)
        except (ConstructorTimeout, ConstructorStillRunning) as exc:
            log.error("periodic job %s: %s; skipping this run", _name(job), exc)
            return None
        except CALLBACK_FAILURES:
            log.exception("periodic job %s: constructor failed; skipping this run", _name(job))
            return None
        if made is None:
            return None
        try:
            return self._params(job, made, tick, unique=unique)
        except Exception as exc:
            # One bad entry (args without a kind, an invalid option) skips its own run,
            # once per tick, never the other periodic jobs' runs in the same insert.
            log.error(
                "periodic job %s: its run at %s is skipped: %s: %s",
                _name(job),
                format_rfc3339_nano(tick),
                type(exc).__name__,
                exc,
                exc_info=not isinstance(exc, InvalidInputError),
            )
            return None

    def _params(
        self, job: PeriodicJob, made: Any, tick: datetime, *, unique: bool
    ) -> tuple[InsertParams, object] | None:
        args, opts, kind = _unpack(made)
        if args is None:
            return None
        base = opts or InsertOpts()
        metadata = dict(base.metadata or {})
        metadata["periodic"] = True
        if job.id is not None:
            metadata["river:periodic_job_id"] = job.id
        opts = dataclasses.replace(base, metadata=metadata)
        params = resolve_insert(args, opts, kind, self._defaults, now=tick)
        if base.scheduled_at is None and params.state != JobState.PENDING:
            # River sets scheduled_at to the tick and keeps the job available.
            params.scheduled_at = tick
        if unique and params.unique_key is None:
            ident = job.id if job.id is not None else f"{params.kind}&{params.encoded_args}"
            params.unique_key = periodic_unique_key(ident, tick)
            params.unique_states = unique_states_bitmask(None)
        # As the client's inserts: a run whose args lack a key its queue's limits are
        # partitioned by is refused (it went into the partition of null, shared with
        # every other such job, without a word).
        check_args_keys(self.ctx.args_keys(), [params], many=False)
        return params, args


class PeriodicPublisher:
    """Declares a client's periodic jobs that have an id to the whole fleet, in
    ``riverboat_periodic_job``: its own set when it starts, then each one added or removed
    at runtime (``client.periodic_jobs``), so that the leader, whichever client it is, runs
    what was added and stops what was removed. A job added at runtime is declared with its
    template: its constructor's result at that moment, which a leader without the job's
    code inserts at each tick. Runs on every client, leader or not."""

    def __init__(self, driver: Any, jobs: PeriodicJobs, defaults: InsertDefaults) -> None:
        self.driver = driver
        self.jobs = jobs
        self.defaults = defaults
        self.published = 0
        self.enabled = False  # riverboat_periodic_job exists
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def start(self) -> None:
        loop = asyncio.get_running_loop()

        def changed() -> None:
            loop.call_soon_threadsafe(self._wake.set)

        self.jobs.listen("publisher", changed)
        # The set at start is the client's own (from its code, or changed before start);
        # what changes from now on is a runtime change, declared with its template.
        self.jobs.take_pending()
        initial: dict[str, tuple[PeriodicJob, bool] | None] = {
            job.id: (job, False) for job in self.jobs.snapshot().values() if job.id is not None
        }
        self._task = asyncio.create_task(self._run(initial), name="riverboat-periodic-publisher")

    async def stop(self) -> None:
        self.jobs.listen("publisher", lambda: None)
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        # A change made just before the stop is declared still (bounded).
        last = {
            ident: None if change is None else (change, True)
            for ident, change in self.jobs.take_pending().items()
        }
        if last and self.enabled:
            try:
                async with asyncio.timeout(STOP_PUBLISH_TIMEOUT):
                    await self._publish(last)
            except (DriverError, TimeoutError) as exc:
                log.warning("periodic jobs: the last runtime changes were not declared (%s)", exc)

    async def _run(self, pending: dict[str, tuple[PeriodicJob, bool] | None]) -> None:
        from riverboat.migrations import applied_version_async

        try:
            version = await applied_version_async(self.driver, "riverboat")
        except DriverError as exc:
            log.warning("periodic jobs: not declared to the fleet (%s)", exc)
            return
        if version < DURABLE_LINE_VERSION:
            return
        self.enabled = True
        # pending: (job, added at runtime) by id; None: removed at runtime.
        while True:
            for ident, change in self.jobs.take_pending().items():
                pending[ident] = None if change is None else (change, True)
            if pending:
                try:
                    await self._publish(pending)
                    pending = {}
                except (DriverError, TimeoutError) as exc:
                    log.warning("periodic jobs: declaring to the fleet failed (%s); retrying", exc)
                    await asyncio.sleep(1.0)
                    continue
            await self._wake.wait()
            self._wake.clear()

    async def _publish(self, pending: dict[str, tuple[PeriodicJob, bool] | None]) -> None:
        declarations = []
        for ident, change in pending.items():
            if change is None:
                continue
            job, at_runtime = change
            template = None
            if at_runtime:
                try:
                    template = await _template_of(job, self.defaults)
                except CALLBACK_FAILURES as exc:
                    log.warning(
                        "periodic job %r: its constructor failed (%s: %s); declared without "
                        "a template, so only clients with its code run it",
                        ident,
                        type(exc).__name__,
                        exc,
                    )
                else:
                    if template is None:
                        # Said, or a leader without the code never ran it, without a word.
                        log.warning(
                            "periodic job %r: declared without a template (%s), so only "
                            "clients with its code run it",
                            ident,
                            "a custom schedule, which only its code can compute"
                            if parse_schedule(job.schedule_text) is None
                            else "its constructor returned None, skipping the run, when "
                            "it was added",
                        )
            declarations.append(
                PeriodicJobDeclaration(ident, job.schedule_text, job.catch_up, template)
            )
        removed = [ident for ident, change in pending.items() if change is None]
        dialect = self.driver.dialect
        if declarations:
            await self.driver.execute(dialect.periodic_job_declare(declarations))
        if removed:
            await self.driver.execute(dialect.periodic_job_remove(removed))
        self.published += len(pending)
