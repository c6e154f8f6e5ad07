"""Cron schedules of periodic jobs as River's robfig parser reads them: time zones (a
``CRON_TZ=`` prefix or ``tz=``), both DST transitions, six fields with the seconds first,
descriptors, and bad input refused when the job is declared."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from riverboat import InvalidInputError, PeriodicJob


def _ticks(job: PeriodicJob, start: datetime, count: int) -> list[datetime]:
    out = []
    moment = start
    for _ in range(count):
        tick = job.next_after(moment)
        assert tick is not None
        out.append(tick)
        moment = tick
    return out


def _utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize(
    "job",
    [
        PeriodicJob("CRON_TZ=Europe/Paris 30 2 * * *", lambda: None),
        PeriodicJob("TZ=Europe/Paris 30 2 * * *", lambda: None),
        PeriodicJob("30 2 * * *", lambda: None, tz="Europe/Paris"),
    ],
)
def test_a_daily_job_in_paris_across_both_dst_changes(job: PeriodicJob) -> None:
    # Spring: 2026-03-29 02:30 does not exist in Paris; the run moves to 03:00 CEST,
    # once. Every other day is 02:30 local (01:30 UTC in winter, 00:30 in summer).
    assert _ticks(job, _utc(2026, 3, 27, 12), 4) == [
        _utc(2026, 3, 28, 1, 30),
        _utc(2026, 3, 29, 1, 0),
        _utc(2026, 3, 30, 0, 30),
        _utc(2026, 3, 31, 0, 30),
    ]
    # Autumn: 2026-10-25 02:30 happens twice; the job runs at the first one only.
    assert _ticks(job, _utc(2026, 10, 23, 12), 3) == [
        _utc(2026, 10, 24, 0, 30),
        _utc(2026, 10, 25, 0, 30),
        _utc(2026, 10, 26, 1, 30),
    ]


@pytest.mark.parametrize("schedule", ["0 * * * *", "@hourly", "0 0 * * * *"])
def test_an_hourly_job_runs_each_real_hour_through_a_repeated_one(schedule: str) -> None:
    """A wildcard in the hour (or minute) field runs by the clock through both passes of
    the hour autumn repeats, as Vixie cron does; only fixed-time jobs run once there."""
    job = PeriodicJob(schedule, lambda: None, tz="Europe/Paris")
    # Local 01:00 CEST, 02:00 CEST, 02:00 CET (the repeated hour), 03:00 CET.
    assert _ticks(job, _utc(2026, 10, 24, 22, 30), 4) == [
        _utc(2026, 10, 24, 23, 0),
        _utc(2026, 10, 25, 0, 0),
        _utc(2026, 10, 25, 1, 0),
        _utc(2026, 10, 25, 2, 0),
    ]


def test_a_job_every_few_minutes_keeps_running_through_the_repeated_hour() -> None:
    """It paused for 65 minutes: every tick of the repeated hour was dropped."""
    job = PeriodicJob("*/20 * * * *", lambda: None, tz="Europe/Paris")
    ticks = _ticks(job, _utc(2026, 10, 24, 23, 50), 8)
    assert ticks == [_utc(2026, 10, 25, h, m) for h in (0, 1) for m in (0, 20, 40)] + [
        _utc(2026, 10, 25, 2, 0),
        _utc(2026, 10, 25, 2, 20),
    ]
    # The catch-up after downtime reads the same ticks backwards.
    assert job.last_ticks(_utc(2026, 10, 25, 0, 0), _utc(2026, 10, 25, 2, 30), 100) == (
        ticks,
        False,
    )


def test_six_fields_put_the_seconds_first_as_robfig_does() -> None:
    job = PeriodicJob("15 */2 * * * *", lambda: None)  # second 15 of every other minute
    assert _ticks(job, _utc(2026, 1, 1), 3) == [
        _utc(2026, 1, 1, 0, 0, 15),
        _utc(2026, 1, 1, 0, 2, 15),
        _utc(2026, 1, 1, 0, 4, 15),
    ]


def test_descriptors_and_fixed_offsets() -> None:
    daily = PeriodicJob("@daily", lambda: None, tz="America/New_York")
    assert daily.next_after(_utc(2026, 1, 1)) == _utc(2026, 1, 1, 5)
    offset = PeriodicJob("0 9 * * 1-5", lambda: None, tz=timezone(timedelta(hours=9)))
    assert offset.next_after(_utc(2026, 1, 2)) == _utc(2026, 1, 5, 0)  # Monday 09:00 +09
    # Stored under its IANA name (POSIX's reversed sign), which a leader reads back.
    assert offset.schedule_text == "CRON_TZ=Etc/GMT-9 0 9 * * 1-5"
    assert PeriodicJob("0 9 * * *", lambda: None, tz=UTC).schedule_text.startswith("CRON_TZ=UTC ")


@pytest.mark.parametrize(
    ("schedule", "tz", "message"),
    [
        ("61 * * * *", None, "not a cron expression"),
        ("* * *", None, "not a cron expression"),
        ("1 2 3 4 5 6 7", None, "not a cron expression"),
        ("CRON_TZ=Mars/Olympus 0 * * * *", None, "not a known time zone"),
        ("0 * * * *", "Nowhere/Atlantis", "not a known time zone"),
        ("CRON_TZ=Europe/Paris 0 * * * *", "Asia/Tokyo", "differs"),
        ("0 * * * *", "", "time zone name"),
        # Valid fields that never meet were accepted; the leader logged an error each run.
        ("0 0 30 2 *", None, "never comes"),
        ("0 0 31 4 *", None, "never comes"),
        # croniter reads these, River's robfig parser refuses them; R picked a new
        # random minute at each question (an hourly job ran dozens of times a day).
        ("R * * * *", None, "syntax River's cron parser refuses"),
        ("0 0 L * *", None, "syntax River's cron parser refuses"),
        ("0 0 15W * *", None, "syntax River's cron parser refuses"),
        ("0 0 * * MON#2", None, "syntax River's cron parser refuses"),
        ("59-1 * * * *", None, "runs backwards"),
        # Stored as CRON_TZ=<name> for a leader to read back: a zone with no IANA name
        # was stored as text no leader could read.
        ("0 * * * *", timezone(timedelta(hours=5, minutes=30)), "no IANA name"),
    ],
)
def test_bad_schedules_are_refused_when_declared(
    schedule: str, tz: str | timezone | None, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        PeriodicJob(schedule, lambda: None, tz=tz)


@pytest.mark.parametrize(
    "interval", [0, -1, float("nan"), float("inf"), 1e300, timedelta(days=999_999)]
)
def test_bad_intervals_are_refused_when_declared(interval: float | timedelta) -> None:
    """NaN, infinity and 1e300 seconds used to escape as ValueError or OverflowError."""
    with pytest.raises(InvalidInputError, match="interval must be from 1 ms to 292 years"):
        PeriodicJob(interval, lambda: None)


@pytest.mark.parametrize(
    ("interval", "text"),
    [
        (timedelta(seconds=60), "@every 60s"),
        (0.5, "@every 0.5s"),
        (timedelta(days=14), "@every 1.2096e+06s"),  # as earlier releases stored it
        (timedelta(days=12, seconds=1), "@every 1036801.0s"),
        (timedelta(seconds=1234567.891), "@every 1234567.891s"),
    ],
)
def test_an_interval_is_stored_as_exactly_its_seconds(
    interval: float | timedelta, text: str
) -> None:
    """Six significant digits (:g) stored 12 days and a second as 12 days: a leader
    without the job's code ran it on that interval, and the change went unseen."""
    from riverboat.runtime.maintenance.periodic import parse_schedule

    job = PeriodicJob(interval, lambda: None)
    assert job.schedule_text == text
    seconds = interval.total_seconds() if isinstance(interval, timedelta) else interval
    assert parse_schedule(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("schedule", "seconds"),
    [
        ("@every 90m", 5400),
        ("@every 1h30m", 5400),
        ("@every 1.5h", 5400),
        ("@every .5h", 1800),
        ("@every 2h45m30.5s", 9930),  # robfig's Every drops what is under a second
        ("@every 1500ms", 1),
        ("@every 10us", 1),  # under a second: one, as robfig's Every makes it
        ("@every 1\u00b5s", 1),
        ("@every 5400s", 5400),  # what schedule_text stores reads back as written
        ("CRON_TZ=Europe/Paris @every 1h", 3600),
        ("  @every 10m  ", 600),
        ("@every 1h1h", 7200),
        ("@every +5s", 5),
        # Go adds a fraction in float64: 16 digits and more round up where exact
        # arithmetic truncated (3599 s, one less than robfig's).
        ("@every 0.9999999999999999h", 3600),
        ("@every 59.9999999999999999999s", 60),
        ("@every " + "0" * 4400 + "1s", 1),  # past Python's int() digit limit
        ("@every 1." + "9" * 4400 + "s", 2),
        ("@every 2562047h47m16.854775807s", 9223372036),  # Go's longest duration
    ],
)
def test_every_reads_a_go_duration_as_robfig_does(schedule: str, seconds: int) -> None:
    """River's robfig parser reads ``@every <time.ParseDuration>``; it was refused here
    as "not a cron expression". It is an interval, counted from the Unix epoch as every
    interval is (and needs no croniter)."""
    from riverboat.runtime.maintenance.periodic import parse_schedule

    job = PeriodicJob(schedule, lambda: None)
    same = PeriodicJob(timedelta(seconds=seconds), lambda: None)
    assert job.schedule_text == same.schedule_text
    assert parse_schedule(job.schedule_text) == timedelta(seconds=seconds)
    start = _utc(2026, 12, 7, 22, 59, 59)
    assert _ticks(job, start, 3) == _ticks(same, start, 3)


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("@every", "no duration after @every"),
        ("@every 0", "must be positive"),
        ("@every 0s", "must be positive"),
        ("@every -5m", "must be positive"),  # robfig would run it every second
        ("@every 5", "has no unit"),
        ("@every 1d", "unknown unit 'd'"),
        ("@every 1h30", "has no unit"),
        ("@every .s", "not a Go duration"),
        ("@every 2562048h", "longer than Go's longest duration"),
        ("@every 2562047h47m16.854775808s", "longer than Go's longest duration"),
        ("@every " + "1" * 5000 + "s", "longer than Go's longest duration"),
        ("@every -9223372036854775808ns", "must be positive"),
        ("@every \uff15s", "not a Go duration"),  # a fullwidth 5: Go reads ASCII digits
        ("@every 1e3s", "unknown unit 'e'"),
        ("@every 5 m", "unknown unit ' m'"),
        ("CRON_TZ=Nowhere/Bogus @every 5m", "not a known time zone"),
        ("@every5m", "a space and a duration"),
        ("@EVERY 5m", "a space and a duration"),  # robfig's descriptors are lower case
    ],
)
def test_bad_every_durations_are_refused_when_declared(
    schedule: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused as Go refuses them (or where robfig would run them every second), with
    InvalidInputError: 5,000 digits raised ValueError (Python's int() limit), and
    "@every5m" asked for croniter, which a bad @every needs no more than a good one."""
    import sys

    monkeypatch.setitem(sys.modules, "croniter", None)
    with pytest.raises(InvalidInputError, match=message):
        PeriodicJob(schedule, lambda: None)


class _EverySecond:
    def next(self, after: datetime) -> datetime:
        return after.replace(microsecond=0) + timedelta(seconds=1)


@pytest.mark.parametrize("limit", [1, 100])
def test_a_custom_schedule_past_the_walk_gives_the_latest_missed_ticks(
    monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    """More missed ticks than one walk takes (_CUSTOM_WALK_MAX, 1,000 here): the walk
    gave the first walk's last ticks, so the job's next run was set that many ticks
    after the stored time and every tick from there to now was inserted (tens of
    thousands after two days of a schedule of seconds)."""
    from riverboat.runtime.maintenance import periodic_job

    monkeypatch.setattr(periodic_job, "_CUSTOM_WALK_MAX", 1000)
    job = PeriodicJob(_EverySecond(), lambda: None)
    start = _utc(2026, 12, 1)
    end = start + timedelta(seconds=5000)
    ticks, left_out = job.last_ticks(start, end, limit)
    assert left_out
    assert ticks == [end - timedelta(seconds=n) for n in range(limit, 0, -1)]
    # Within one walk, as before.
    assert job.last_ticks(start, start + timedelta(seconds=10), 100) == (
        [start + timedelta(seconds=n) for n in range(10)],
        False,
    )


def test_a_zone_without_a_name_is_refused_and_an_equal_one_is_the_same() -> None:
    """A ZoneInfo read from a file has no IANA key: it was stored as its repr, which
    no leader could read back (the job never ran, a warning every second). A zone
    equal by name but another object (ZoneInfo.no_cache) was refused as differing from
    the schedule's own CRON_TZ prefix."""
    from zoneinfo import ZoneInfo

    with open("/usr/share/zoneinfo/Europe/Paris", "rb") as file:
        keyless = ZoneInfo.from_file(file)
    with pytest.raises(InvalidInputError, match="no IANA name"):
        PeriodicJob("0 9 * * *", lambda: None, tz=keyless)
    job = PeriodicJob(
        "CRON_TZ=Europe/Paris 0 9 * * *", lambda: None, tz=ZoneInfo.no_cache("Europe/Paris")
    )
    assert job.next_after(_utc(2026, 12, 1)) == _utc(2026, 12, 1, 8)


class _UntilDeadline:
    """Every second until a deadline, then never again."""

    def __init__(self, deadline: datetime) -> None:
        self.deadline = deadline

    def next(self, after: datetime) -> datetime | None:
        tick = after.replace(microsecond=0) + timedelta(seconds=1)
        return tick if tick < self.deadline else None


class _Bursts:
    """Every second in the first 2,000 s of each 10,000 s."""

    def next(self, after: datetime) -> datetime:
        second = int(after.timestamp()) + 1
        if second % 10_000 >= 2000:
            second += 10_000 - second % 10_000
        return datetime.fromtimestamp(second, UTC)


class _Stuck:
    def next(self, after: datetime) -> datetime:
        return after


def test_a_long_custom_walk_finds_the_latest_ticks_where_they_are_sparse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past one walk, the latest ticks may lie well before the end (a schedule that
    stopped, or ticks in bursts): a walk from half way that found too few came back
    with none, and the job's next run stayed at the stored time (every tick since
    inserted). A schedule that does not move forward is refused, not walked for ever."""
    from riverboat.runtime.maintenance import periodic_job

    monkeypatch.setattr(periodic_job, "_CUSTOM_WALK_MAX", 1000)
    start = datetime.fromtimestamp(0, UTC)
    stopped = PeriodicJob(_UntilDeadline(start + timedelta(seconds=3000)), lambda: None)
    ticks, left_out = stopped.last_ticks(start, start + timedelta(seconds=5000), 100)
    assert left_out and ticks == [start + timedelta(seconds=s) for s in range(2900, 3000)]
    bursts = PeriodicJob(_Bursts(), lambda: None)
    ticks, left_out = bursts.last_ticks(start, start + timedelta(seconds=8000), 100)
    assert left_out and ticks == [start + timedelta(seconds=s) for s in range(1900, 2000)]
    stuck = PeriodicJob(_Stuck(), lambda: None)
    with pytest.raises(ValueError, match="not a later time"):
        stuck.last_ticks(start, start + timedelta(seconds=5000), 100)


@pytest.mark.parametrize("name", ["localtime", "posixrules", "Factory"])
def test_zone_names_that_are_not_places_are_refused(name: str) -> None:
    """A zone named "localtime" is the zone of whichever machine leads: two leaders set differently
    ticked at different times."""
    from zoneinfo import ZoneInfo

    for schedule, tz in (("0 9 * * *", name), (f"CRON_TZ={name} 0 9 * * *", None)):
        with pytest.raises(InvalidInputError, match="not a place"):
            PeriodicJob(schedule, lambda: None, tz=tz)
    with pytest.raises(InvalidInputError, match="not a place"):
        PeriodicJob("0 9 * * *", lambda: None, tz=ZoneInfo(name))
