"""Periodic jobs, enqueued by the leader (River §7.4).

``PeriodicJob(schedule, constructor, run_on_start=False, id=None, *, tz=None)``:
``schedule`` is a cron expression as River's robfig parser reads it (five fields, or six
with the seconds first, descriptors such as ``@daily``, an optional ``CRON_TZ=Zone``
prefix; evaluated in ``tz`` or the prefix's zone, else UTC; needs ``riverboat[cron]``), a
fixed interval (a ``timedelta`` or seconds), any object with ``next(after: datetime) ->
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
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import inspect
import logging
import re
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from riverboat._insert import InsertDefaults, InsertParams, resolve_insert, validate_kind
from riverboat._job import InsertManyParams, InsertOpts, InsertResult, JobState, format_rfc3339_nano
from riverboat._unique import unique_states_bitmask
from riverboat.drivers.base import import_optional
from riverboat.errors import InvalidInputError
from riverboat.runtime.maintenance._service import MaintenanceContext, Service

__all__ = ["NEVER", "PeriodicJob", "PeriodicJobEnqueuer", "PeriodicJobs"]

log = logging.getLogger("riverboat.maintenance")

# A run is due when its tick is less than this far away (River's margin).
DUE_MARGIN = timedelta(milliseconds=100)
ID_MAX = 127
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _import_croniter() -> Any:
    return import_optional("croniter", "cron").croniter


_TZ_PREFIX = re.compile(r"\A(?:CRON_TZ|TZ)=(\S+)\s+(.*)\Z", re.S)


def _zone(value: object, field: str) -> tzinfo:
    if isinstance(value, tzinfo):
        return value
    if not isinstance(value, str) or not value:
        raise InvalidInputError(field, "must be a time zone name (IANA, e.g. Europe/Paris)")
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInputError(field, f"{value!r} is not a known time zone") from None


def _parse_cron(text: str) -> tuple[str, bool, tzinfo | None]:
    """``(expression, seconds first, time zone)`` of a cron schedule as River's robfig
    parser reads it: an optional ``CRON_TZ=Zone`` (or ``TZ=Zone``) prefix, five fields, or
    six with the seconds first; descriptors such as ``@daily``."""
    zone = None
    prefix = _TZ_PREFIX.match(text.strip())
    if prefix is not None:
        zone = _zone(prefix.group(1), "schedule")
        text = prefix.group(2)
    expression = " ".join(text.split())
    seconds_first = not expression.startswith("@") and len(expression.split(" ")) == 6
    croniter = _import_croniter()
    try:
        valid = croniter.is_valid(expression, second_at_beginning=seconds_first)
    except TypeError:  # croniter without second_at_beginning
        valid = False
    if not valid or len(expression.split(" ")) not in (1, 5, 6):
        raise InvalidInputError("schedule", f"{text!r} is not a cron expression")
    return expression, seconds_first, zone


def _repeated_wall_time(tick: datetime, zone: tzinfo) -> bool:
    """True for the second occurrence of a wall-clock time that a DST change repeats."""
    naive = tick.astimezone(zone).replace(tzinfo=None)
    first = naive.replace(tzinfo=zone, fold=0)
    second = naive.replace(tzinfo=zone, fold=1)
    return first.utcoffset() != second.utcoffset() and tick.astimezone(zone).utcoffset() == (
        second.utcoffset()
    )


class _Never:
    """The schedule that never comes (River's ``NeverSchedule``)."""

    def next(self, after: datetime) -> datetime | None:
        return None

    def __repr__(self) -> str:
        return "NEVER"


NEVER: Any = _Never()


class PeriodicJob:
    """A job the leader inserts on a schedule."""

    __slots__ = (
        "_cron",
        "_interval",
        "_seconds_first",
        "constructor",
        "id",
        "run_on_start",
        "schedule",
        "tz",
    )

    def __init__(
        self,
        schedule: Any,  # cron str, timedelta/seconds, NEVER, or an object with next()
        constructor: Callable[[], Any],
        run_on_start: bool = False,
        id: str | None = None,
        *,
        tz: str | tzinfo | None = None,
    ) -> None:
        if not callable(constructor):
            raise InvalidInputError("constructor", "must be callable")
        if id is not None:
            validate_kind(id, "id")
            if len(id) > ID_MAX:
                raise InvalidInputError("id", f"must be at most {ID_MAX} characters")
        self.schedule = schedule
        self.constructor = constructor
        self.run_on_start = bool(run_on_start)
        self.id = id
        self._cron: Any = None
        self._interval: timedelta | None = None
        self._seconds_first = False
        self.tz: tzinfo | None = _zone(tz, "tz") if tz is not None else None
        if not isinstance(schedule, (str, int, float, timedelta)) and callable(
            getattr(schedule, "next", None)
        ):
            return  # a custom schedule: asked for each tick
        if isinstance(schedule, str):
            self._cron, self._seconds_first, zone = _parse_cron(schedule)
            if zone is not None:
                if self.tz is not None and self.tz != zone:
                    raise InvalidInputError(
                        "tz", f"{tz!r} differs from the schedule's own CRON_TZ/TZ prefix"
                    )
                self.tz = zone
        elif isinstance(schedule, timedelta) or (
            isinstance(schedule, (int, float)) and not isinstance(schedule, bool)
        ):
            interval = schedule if isinstance(schedule, timedelta) else timedelta(seconds=schedule)
            if interval < timedelta(milliseconds=1):
                raise InvalidInputError("schedule", "an interval must be at least 1 ms")
            self._interval = interval
        else:
            raise InvalidInputError(
                "schedule",
                "must be a cron expression (str), an interval (timedelta/seconds), NEVER, "
                "or an object with next(after) -> datetime",
            )

    def next_after(self, moment: datetime) -> datetime | None:
        """The first tick strictly after ``moment``; None: never again."""
        moment = moment.astimezone(UTC)
        if self._interval is None and self._cron is None:
            tick = self.schedule.next(moment)
            if tick is None:
                return None
            if not isinstance(tick, datetime) or tick.tzinfo is None:
                raise InvalidInputError(
                    "schedule", f"{self.schedule!r}.next() must return an aware datetime"
                )
            return tick.astimezone(UTC)
        if self._interval is not None:
            step = self._interval // timedelta(microseconds=1)
            since = (moment - _EPOCH) // timedelta(microseconds=1)
            return _EPOCH + timedelta(microseconds=(since // step + 1) * step)
        return self._cron_next(moment)

    def _cron_next(self, moment: datetime) -> datetime:
        """The cron expression's next tick, read in the job's time zone (UTC by default).
        A wall-clock time that a DST change skips runs once at the next valid time; one
        it repeats (autumn) runs once, at its first occurrence, as Vixie cron does."""
        zone = self.tz or UTC
        croniter = _import_croniter()
        schedule = croniter(
            self._cron, moment.astimezone(zone), second_at_beginning=self._seconds_first
        )
        while True:
            tick: datetime = schedule.get_next(datetime)
            if not _repeated_wall_time(tick, zone):
                return tick.astimezone(UTC)

    def __repr__(self) -> str:
        return f"PeriodicJob({self.schedule!r}, id={self.id!r})"


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
    ``run_on_start`` is inserted as soon as the leader sees it. Safe from any thread."""

    def __init__(self, jobs: Sequence[PeriodicJob] = ()) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[int, PeriodicJob] = {}
        self._next_handle = 1
        self.version = 0
        self._listener: Callable[[], None] | None = None
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
                self._jobs[self._next_handle] = job
                handles.append(self._next_handle)
                self._next_handle += 1
        self._changed()
        return handles

    def remove(self, handle: int) -> None:
        """Remove the job ``add`` returned ``handle`` for; unknown handles are ignored."""
        with self._lock:
            self._jobs.pop(handle, None)
        self._changed()

    def remove_by_id(self, id: str) -> bool:
        """Remove the job with this ``id``; False when there was none."""
        with self._lock:
            found = [h for h, job in self._jobs.items() if job.id == id]
            for handle in found:
                del self._jobs[handle]
        self._changed()
        return bool(found)

    def remove_many(self, handles: Sequence[int]) -> None:
        """Remove the jobs of several handles at once (River's ``RemoveMany``)."""
        _check_many(handles, "handles")
        with self._lock:
            for handle in handles:
                self._jobs.pop(handle, None)
        self._changed()

    def remove_many_by_id(self, ids: Sequence[str]) -> None:
        """Remove the jobs with these ids at once (River's ``RemoveManyByID``)."""
        _check_many(ids, "ids")
        wanted = set(ids)
        with self._lock:
            for handle in [h for h, job in self._jobs.items() if job.id in wanted]:
                del self._jobs[handle]
        self._changed()

    def clear(self) -> None:
        """Remove every periodic job."""
        with self._lock:
            self._jobs.clear()
        self._changed()

    def snapshot(self) -> dict[int, PeriodicJob]:
        with self._lock:
            return dict(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def _changed(self) -> None:
        with self._lock:
            self.version += 1
            listener = self._listener
        if listener is not None:
            listener()


def periodic_unique_key(ident: str, tick: datetime) -> bytes:
    """The unique key of one run: the periodic job's identity and its tick."""
    text = f"&river:periodic={ident}&at={format_rfc3339_nano(tick)}"
    return hashlib.sha256(text.encode()).digest()


class _Entry:
    __slots__ = ("handle", "job", "next_run_at", "run_on_start_pending")

    def __init__(self, job: PeriodicJob, handle: int = 0) -> None:
        self.handle = handle
        self.job = job
        self.next_run_at: datetime | None = None
        self.run_on_start_pending = False


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
                entry.next_run_at = job.next_after(now)
                # Added to a running leader: run_on_start means now.
                entry.run_on_start_pending = job.run_on_start and self._started
            entries.append(entry)
        self._entries = entries

    async def on_start(self) -> None:
        # A new leader computes the schedule afresh (schedules live only in memory).
        now = datetime.now(UTC)
        loop = asyncio.get_running_loop()

        def changed() -> None:
            loop.call_soon_threadsafe(self.wake)

        self.jobs._listener = changed
        self._version = self.jobs.version
        self._entries = [_Entry(job, handle) for handle, job in self.jobs.snapshot().items()]
        for entry in self._entries:
            entry.next_run_at = entry.job.next_after(now)
            entry.run_on_start_pending = entry.job.run_on_start
        self._started = True

    def next_delay(self) -> float:
        self._sync(datetime.now(UTC))
        if any(e.run_on_start_pending for e in self._entries):
            return 0.0
        upcoming = [e.next_run_at for e in self._entries if e.next_run_at is not None]
        if not upcoming:
            return 3600.0
        return max((min(upcoming) - datetime.now(UTC)).total_seconds(), 0.0)

    async def run_once(self) -> None:
        now = datetime.now(UTC)
        self._sync(now)
        due: list[tuple[_Entry, datetime, bool]] = []
        due.extend((e, now, True) for e in self._entries if e.run_on_start_pending)
        for entry in self._entries:
            if entry.next_run_at is not None and entry.next_run_at < now + DUE_MARGIN:
                due.append((entry, entry.next_run_at, False))
        if not due:
            return
        params: list[InsertParams] = []
        made_args: list[object] = []
        for entry, tick, on_start in due:
            built = await self._build(entry.job, tick, unique=not on_start)
            if built is not None:
                params.append(built[0])
                made_args.append(built[1])
        stack = self.ctx.middleware
        if params:
            dialect = self.ctx.dialect

            async def insert() -> list[InsertResult]:
                if stack is not None:
                    # The client's insert hooks and the args types' own, as for any insert.
                    stack.apply_insert(params, made_args)
                queues = sorted({p.queue for p in params if p.state == JobState.AVAILABLE})
                rows = await self.ctx.driver.fetch(dialect.job_insert_many(params, queues))
                return dialect.decode_insert(rows)

            if stack is not None and stack.insert_layers:
                # River's periodic inserts pass through its JobInsertMiddleware too.
                results = await stack.wrap_insert_async(params, made_args, insert)
            else:
                results = await insert()
            queues = sorted({p.queue for p in params if p.state == JobState.AVAILABLE})
            skipped = sum(1 for r in results if r.unique_skipped_as_duplicate)
            self.skipped_duplicates += skipped
            self.inserted += len(results) - skipped
            if queues:
                self.ctx.wake_queues(queues)
        # Advance only once the runs are written, so a failed insert is retried (after
        # the error backoff) for the same ticks; the unique key keeps that idempotent.
        for entry, tick, on_start in due:
            if on_start:
                entry.run_on_start_pending = False
            else:
                entry.next_run_at = entry.job.next_after(tick)

    async def _build(
        self, job: PeriodicJob, tick: datetime, *, unique: bool
    ) -> tuple[InsertParams, object] | None:
        try:
            made = job.constructor()
            if inspect.isawaitable(made):
                made = await made
        except Exception:
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
        kind: str | None = None
        opts: InsertOpts | None = None
        if isinstance(made, InsertManyParams):
            args, opts, kind = made.args, made.opts, made.kind
        elif (
            isinstance(made, tuple)
            and len(made) == 2
            and (made[1] is None or isinstance(made[1], InsertOpts))
        ):
            args, opts = made
        else:
            args = made
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
        return params, args
