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


def test_an_hourly_job_runs_each_real_hour_but_not_a_repeated_wall_clock_hour() -> None:
    job = PeriodicJob("0 * * * *", lambda: None, tz="Europe/Paris")
    # Local 01:00 CEST, 02:00 CEST, (02:00 CET repeated: skipped, as Vixie cron), 03:00 CET.
    assert _ticks(job, _utc(2026, 10, 24, 22, 30), 3) == [
        _utc(2026, 10, 24, 23, 0),
        _utc(2026, 10, 25, 0, 0),
        _utc(2026, 10, 25, 2, 0),
    ]


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
    ],
)
def test_bad_schedules_are_refused_when_declared(
    schedule: str, tz: str | None, message: str
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
