"""A periodic job's definition: its schedule (a cron expression as River's robfig parser
reads it, ``@every <Go duration>`` included, a fixed interval, a custom ``next(after)``
or :data:`NEVER`) and its constructor. No I/O: the leader's enqueuer
(``maintenance.periodic``) runs these, and ``MaintenanceConfig`` reads a reindexer
schedule the same way without importing the service.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from riverboat._insert import validate_kind
from riverboat._periodic import CATCH_UP_POLICIES
from riverboat._seconds import GO_DURATION_MAX, is_seconds
from riverboat.drivers.base import import_optional
from riverboat.errors import InvalidInputError

__all__ = ["ID_MAX", "NEVER", "PeriodicJob"]

ID_MAX = 127
# How many ticks of a custom schedule are walked, at most, to find the missed ones.
_CUSTOM_WALK_MAX = 100_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _import_croniter() -> Any:
    return import_optional("croniter", "cron").croniter


_TZ_PREFIX = re.compile(r"\A(?:CRON_TZ|TZ)=(\S+)\s+(.*)\Z", re.S)


# Names the zone database holds that are not places: "localtime" is each machine's own
# zone (leaders on machines set differently would tick at different times), the others
# are the database's internals.
_NOT_PLACES = frozenset({"localtime", "posixrules", "Factory"})


def _zone(value: object, field: str) -> tzinfo:
    """An IANA time zone: its name, a ZoneInfo, or UTC. The schedule is stored as
    ``CRON_TZ=<name> ...`` for the leader (maybe another process) to read back, so a
    zone without an IANA name (a fixed offset) is refused here, not left for a leader
    that can't run it."""
    if isinstance(value, ZoneInfo) and value.key in _NOT_PLACES:
        value = value.key  # refused below, by name
    if isinstance(value, ZoneInfo):
        if value.key is None:  # ZoneInfo.from_file: a zone with no name to store
            raise InvalidInputError(
                field,
                f"{value!r} has no IANA name to store the schedule under, for a leader to "
                "read back: pass a name such as 'Europe/Paris'",
            )
        return value
    if isinstance(value, tzinfo):
        # A fixed offset (datetime.timezone) of whole hours has an IANA name: Etc/GMT-9
        # is UTC+09:00 (the sign is POSIX's, reversed).
        offset = value.utcoffset(None)
        if (
            isinstance(value, timezone)
            and offset is not None
            and offset % timedelta(hours=1) == timedelta(0)
        ):
            hours = int(offset / timedelta(hours=1))
            if -12 <= hours <= 14:
                return ZoneInfo("UTC" if hours == 0 else f"Etc/GMT{-hours:+d}")
        raise InvalidInputError(
            field,
            f"{value!r} has no IANA name to store the schedule under, for a leader to read "
            "back: pass a name such as 'Asia/Kolkata', or a ZoneInfo",
        )
    if not isinstance(value, str) or not value:
        raise InvalidInputError(field, "must be a time zone name (IANA, e.g. Europe/Paris)")
    if value in _NOT_PLACES:
        raise InvalidInputError(
            field,
            f"{value!r} is not a place's time zone (the leader may be any machine): pass "
            "a name such as 'Europe/Paris', or 'UTC'",
        )
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInputError(field, f"{value!r} is not a known time zone") from None


# What croniter reads and River's robfig parser refuses: L (last), W (weekday), # (nth
# weekday) and R (random: croniter picks a new minute at every question, so an hourly
# job ran dozens of times a day).
_NOT_ROBFIG = re.compile(r"(?:\A|[,/\-])(?:L|LW|R|\d*W)(?:\Z|[,/\-])|#|\A\d*L\Z", re.I)
_RANGE = re.compile(r"\A(\d+)-(\d+)\Z")


def _robfig_refuses(field: str) -> str | None:
    """Why River's robfig parser refuses one cron field croniter accepted, or None."""
    if _NOT_ROBFIG.search(field):
        return f"{field!r} uses syntax River's cron parser refuses (L, W, # or R)"
    for part in field.split(","):
        bounds = _RANGE.match(part.split("/", 1)[0])
        if bounds is not None and int(bounds.group(1)) > int(bounds.group(2)):
            return f"the range {part!r} runs backwards (River's cron parser refuses it)"
    return None


# Go's time.ParseDuration units, in nanoseconds (µ as the micro sign or the Greek mu).
_GO_UNITS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_GO_MAX = 2**63 - 1  # nanoseconds in Go's longest time.Duration
# Go's bound while it reads a duration (1<<63, in its unsigned arithmetic); past it, the
# text is refused as too long.
_GO_READ_MAX = 2**63
_EVERY = "@every "
_DIGITS = "0123456789"


def _every_part(schedule: str) -> str | None:
    """The duration of an ``@every`` schedule (after any time zone prefix, whose zone is
    checked as a cron schedule's is, though an interval does not use it), else None.
    Whitespace around the schedule and the duration is tolerated, as it is around a
    cron expression (robfig refuses it)."""
    expression = schedule.strip()
    prefix = _TZ_PREFIX.match(expression)
    if prefix is not None:
        expression = prefix.group(2).strip()
    if expression == _EVERY.strip() or expression.startswith(_EVERY):
        if prefix is not None:
            _zone(prefix.group(1), "schedule")
        return expression[len(_EVERY) :]
    if expression.lower().startswith("@every"):
        # Not a cron expression either (and no croniter needed to say so).
        raise InvalidInputError(
            "schedule",
            f"{_shown(schedule)}: write @every, a space and a duration (@every 1h30m)",
        )
    return None


def _shown(text: str, most: int = 60) -> str:
    """``text`` quoted for an error message, cut short past ``most`` characters."""
    return repr(text if len(text) <= most else text[: most - 3] + "...")


def _go_duration_nanos(text: str, written: str) -> int:
    """``text`` as Go's ``time.ParseDuration`` reads it, in nanoseconds: its grammar (ASCII
    digits, a fraction per part, the units of _GO_UNITS, an optional sign, "0" alone),
    its overflow rules, and its float64 arithmetic for fractions (a fraction of 16
    digits and more rounds as Go's does). Refused input raises InvalidInputError."""

    def refuse(problem: str) -> InvalidInputError:
        return InvalidInputError("schedule", f"{_shown(written)}: {_shown(text)} {problem}")

    too_long = "is longer than Go's longest duration (about 292 years)"

    end = len(text)
    i = 0
    negative = False
    if i < end and text[i] in "+-":
        negative = text[i] == "-"
        i += 1
    if text[i:] == "0":
        return 0
    if i == end:
        raise refuse("is not a Go duration (e.g. 1h30m)")
    total = 0
    while i < end:
        # The whole part: Go's leadingInt, refused past _GO_READ_MAX.
        start, whole = i, 0
        while i < end and text[i] in _DIGITS:
            whole = whole * 10 + ord(text[i]) - 48
            if whole > _GO_READ_MAX:
                raise refuse(too_long)
            i += 1
        had_whole = i > start
        # The fraction: Go's leadingFraction, digits past what fits ignored. (Go also
        # checks x > (1<<63-1)/10 first, against its uint64 wrapping; with Python's
        # integers the check of the result below says the same.)
        fraction, scale, had_fraction = 0, 1.0, False
        if i < end and text[i] == ".":
            i += 1
            start = i
            overflow = False
            while i < end and text[i] in _DIGITS:
                if not overflow:
                    more = fraction * 10 + ord(text[i]) - 48
                    if more > _GO_READ_MAX:
                        overflow = True
                    else:
                        fraction, scale = more, scale * 10
                i += 1
            had_fraction = i > start
        if not had_whole and not had_fraction:
            raise refuse("is not a Go duration (e.g. 1h30m)")
        start = i
        while i < end and text[i] != "." and text[i] not in _DIGITS:
            i += 1
        unit = text[start:i]
        if unit not in _GO_UNITS:
            raise refuse(
                ("has no unit" if not unit else f"has the unknown unit {unit!r}")
                + " (ns, us, ms, s, m or h, as Go's)"
            )
        scale_ns = _GO_UNITS[unit]
        if whole > _GO_READ_MAX // scale_ns:
            raise refuse(too_long)
        value = whole * scale_ns
        if fraction > 0:
            value += int(float(fraction) * (float(scale_ns) / scale))
            if value > _GO_READ_MAX:
                raise refuse(too_long)
        total += value
        if total > _GO_READ_MAX:
            raise refuse(too_long)
    if not negative and total > _GO_MAX:
        raise refuse(too_long)
    return -total if negative else total


def _every(text: str, written: str) -> timedelta:
    """The interval of robfig's ``@every <duration>`` (``text``: the duration, as Go's
    ``time.ParseDuration`` reads it: ``90m``, ``1h30m``, ``1.5h``, ``500ms``), as robfig's
    ``Every`` makes it: truncated to whole seconds, and one second at least. Zero and
    negative durations, which robfig runs every second, are refused (``written``: the
    schedule as given, for the error)."""
    text = text.strip()
    if not text:
        raise InvalidInputError("schedule", f"{_shown(written)}: no duration after @every")
    nanos = _go_duration_nanos(text, written)
    if nanos <= 0:
        raise InvalidInputError(
            "schedule",
            f"{_shown(written)}: an interval must be positive (River would run it every second)",
        )
    return timedelta(seconds=max(nanos // 1_000_000_000, 1))


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
    if not expression.startswith("@"):
        for field in expression.split(" "):
            if (problem := _robfig_refuses(field)) is not None:
                raise InvalidInputError("schedule", f"{text!r}: {problem}")
    try:
        croniter(expression, datetime.now(UTC), second_at_beginning=seconds_first).get_next(
            datetime
        )
    except Exception:  # croniter's CroniterBadDateError: it searched years and found none
        # Valid fields that never meet (February 30th, April 31st): the leader would log
        # an error at every run of the service instead.
        raise InvalidInputError(
            "schedule", f"{text!r} never comes (no such date in any year)"
        ) from None
    return expression, seconds_first, zone


# Vixie cron's descriptors, as five fields (the minute and hour fields decide DST).
_DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _fixed_time(expression: str, seconds_first: bool) -> bool:
    """Whether the expression names fixed times of day: neither its minute nor its hour
    field starts with ``*``. Vixie cron's rule for the hour a DST change repeats: such a
    job runs once (its first occurrence); one with a wildcard there (``*/5 * * * *``,
    ``0 * * * *``) keeps running by the clock through both passes."""
    fields = _DESCRIPTORS.get(expression.lower(), expression).split(" ")
    minute, hour = fields[1:3] if seconds_first else fields[0:2]
    return not minute.startswith("*") and not hour.startswith("*")


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
        "_fixed_time",
        "_interval",
        "_seconds_first",
        "catch_up",
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
        catch_up: str = "all",
    ) -> None:
        if not callable(constructor):
            raise InvalidInputError("constructor", "must be callable")
        if catch_up not in CATCH_UP_POLICIES:
            raise InvalidInputError(
                "catch_up", f"{catch_up!r} is not a catch-up policy; known: none, one, all"
            )
        if catch_up != "all" and id is None:
            raise InvalidInputError(
                "catch_up", "needs an id: only a periodic job with an id is stored and catches up"
            )
        self.catch_up = catch_up
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
        self._fixed_time = False
        self.tz: tzinfo | None = _zone(tz, "tz") if tz is not None else None
        if not isinstance(schedule, (str, int, float, timedelta)) and callable(
            getattr(schedule, "next", None)
        ):
            return  # a custom schedule: asked for each tick
        every = _every_part(schedule) if isinstance(schedule, str) else None
        if every is not None:
            # River's cron parser reads "@every 1h30m" as an interval; so does this,
            # counted from the Unix epoch as every interval here (a time zone is moot).
            self._interval = _every(every, schedule)
        elif isinstance(schedule, str):
            self._cron, self._seconds_first, zone = _parse_cron(schedule)
            self._fixed_time = _fixed_time(self._cron, self._seconds_first)
            if zone is not None:
                # By name: ZoneInfo.no_cache gives an equal zone that is another object,
                # and ZoneInfo compares by identity.
                if self.tz is not None and getattr(self.tz, "key", self.tz) != getattr(
                    zone, "key", zone
                ):
                    raise InvalidInputError(
                        "tz", f"{tz!r} differs from the schedule's own CRON_TZ/TZ prefix"
                    )
                self.tz = zone
        elif isinstance(schedule, timedelta) or (
            isinstance(schedule, (int, float)) and not isinstance(schedule, bool)
        ):
            seconds = schedule.total_seconds() if isinstance(schedule, timedelta) else schedule
            # NaN, infinity and 1e300 once escaped as ValueError or OverflowError.
            if not is_seconds(seconds, at_least=0.001) or seconds > GO_DURATION_MAX:
                raise InvalidInputError(
                    "schedule", "an interval must be from 1 ms to 292 years (a Go time.Duration)"
                )
            interval = timedelta(seconds=seconds)
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

    @property
    def schedule_text(self) -> str:
        """The schedule as stored with the job's times: a changed schedule makes them
        stale. Cron as written (with its time zone), ``@every <seconds>s`` for an
        interval, ``@never``, or a custom schedule's class name."""
        if self._cron is not None:
            zone = self.tz
            if zone is None:
                return self._cron  # type: ignore[no-any-return]
            return f"CRON_TZ={getattr(zone, 'key', None) or zone} {self._cron}"
        if self._interval is not None:
            seconds = self._interval.total_seconds()
            text = f"{seconds:g}"
            if float(text) != seconds:
                # More than six significant digits (12 days and a second): :g rounded
                # them away, and a leader without the job's code ran it on the rounded
                # interval. The shortest exact text instead; :g's stays where it is
                # exact, so what earlier releases stored still reads as unchanged.
                text = repr(seconds)
            return f"@every {text}s"
        if isinstance(self.schedule, _Never):
            return "@never"
        kind = type(self.schedule)
        return f"custom {kind.__module__}.{kind.__qualname__}"

    def last_ticks(self, start: datetime, end: datetime, limit: int) -> tuple[list[datetime], bool]:
        """Up to ``limit`` ticks from ``start`` (included, itself a tick) to ``end``
        (excluded), the latest ones, in order; and whether older ones were left out."""
        if self._interval is not None:
            step = self._interval
            last = self.next_after(end - step - timedelta(microseconds=1))
            assert last is not None
            if last >= end:
                last -= step
            ticks: list[datetime] = []
            tick = last
            while tick >= start and len(ticks) <= limit:
                ticks.append(tick)
                tick -= step
            return self._cut(ticks[::-1], limit)
        if self._cron is not None:
            ticks = self._cron_prev(start, end, limit + 1)
            return self._cut(ticks, limit)
        # Walked from ``start``; when that is more than _CUSTOM_WALK_MAX ticks, walked
        # again from a later point (half the way to ``end`` each time) until the walk
        # reaches ``end``: the ticks found must be the latest. (The first walk's last
        # ticks stood for them: the job's next run was set that many ticks after the
        # stored time, and every tick from there to now was inserted, 100 per pass,
        # tens of thousands after a long downtime of a schedule of seconds.)
        lo, hi = start, end  # a walk from lo overflows; one from hi holds <= limit ticks
        origin = start
        overflowed: list[datetime] = []
        while True:
            kept: deque[datetime] = deque(maxlen=limit + 1)
            tick_or_none: datetime | None = (
                start if origin == start else self.next_after(origin - timedelta(microseconds=1))
            )
            after = origin - timedelta(microseconds=1)
            for _ in range(_CUSTOM_WALK_MAX):
                if tick_or_none is not None and tick_or_none <= after:
                    # As _next refuses it: a walk that never advances never ends.
                    raise ValueError(
                        f"next({after.isoformat()}) returned {tick_or_none.isoformat()}, "
                        "not a later time"
                    )
                if tick_or_none is None or tick_or_none >= end:
                    break
                kept.append(tick_or_none)
                after = tick_or_none
                tick_or_none = self.next_after(after)
            else:
                lo, overflowed = origin, list(kept)
                if hi - lo <= timedelta(microseconds=1):
                    return overflowed[-limit:], True  # likewise
                origin = lo + (hi - lo) / 2
                continue
            if origin == start:
                return self._cut(list(kept), limit)
            if len(kept) > limit:
                return list(kept)[-limit:], True
            if hi - lo <= timedelta(microseconds=1):  # can't happen with advancing ticks
                return ([t for t in overflowed if t < origin] + list(kept))[-limit:], True
            # Too few past ``origin`` (a schedule that stops, or sparse there): the latest
            # ticks begin before it; look between the walk that overflowed and this one.
            hi = origin
            origin = lo + (hi - lo) / 2

    @staticmethod
    def _cut(ticks: list[datetime], limit: int) -> tuple[list[datetime], bool]:
        return ticks[-limit:], len(ticks) > limit

    def _cron_prev(self, start: datetime, end: datetime, count: int) -> list[datetime]:
        """At most ``count`` cron ticks in ``[start, end)``, the latest, in order."""
        zone = self.tz or UTC
        croniter = _import_croniter()
        schedule = croniter(
            self._cron, end.astimezone(zone), second_at_beginning=self._seconds_first
        )
        found: list[datetime] = []
        while len(found) < count:
            tick: datetime = schedule.get_prev(datetime)
            tick_utc = tick.astimezone(UTC)
            if tick_utc < start:
                break
            if tick_utc < end and not self._skipped(tick, zone):
                found.append(tick_utc)
        return found[::-1]

    def _cron_next(self, moment: datetime) -> datetime:
        """The cron expression's next tick, read in the job's time zone (UTC by default).
        A wall-clock time that a DST change skips runs once at the next valid time. In
        the hour it repeats (autumn), a fixed-time job runs once, at the first
        occurrence, and one with a wildcard minute or hour runs through both, as Vixie
        cron does (:func:`_fixed_time`)."""
        zone = self.tz or UTC
        croniter = _import_croniter()
        schedule = croniter(
            self._cron, moment.astimezone(zone), second_at_beginning=self._seconds_first
        )
        while True:
            tick: datetime = schedule.get_next(datetime)
            if not self._skipped(tick, zone):
                return tick.astimezone(UTC)

    def _skipped(self, tick: datetime, zone: tzinfo) -> bool:
        """A fixed-time job's second occurrence of a wall-clock time a DST change
        repeats."""
        return self._fixed_time and _repeated_wall_time(tick, zone)

    def __repr__(self) -> str:
        return f"PeriodicJob({self.schedule!r}, id={self.id!r})"
