"""``use_test_config``: a settable clock for inserts and unique periods, and unique
enforcement switched off (River's ``TestConfig``); on Postgres and SQLite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import riverboat
from riverboat import InsertManyParams, InsertOpts, JobState, UniqueOpts
from riverboat.testing import TestClock, use_test_config
from tests.runtime.dbs import Db, any_db  # noqa: F401

HOURLY = InsertOpts(unique_opts=UniqueOpts(by_period=timedelta(hours=1)))


def test_clock_drives_scheduled_at_and_unique_periods(any_db: Db) -> None:  # noqa: F811
    db = any_db
    clock = TestClock(datetime(2031, 5, 4, 10, 15, tzinfo=UTC))
    with riverboat.Client(db.url, schema=db.schema) as client:
        use_test_config(client, clock=clock)
        first = client.insert({"n": 1}, HOURLY, kind="digest")
        assert first.job.scheduled_at == clock.now()
        assert first.job.state is JobState.AVAILABLE  # stubbed "now" keeps it available
        # Same hour on the test clock: a duplicate, whatever the wall clock says.
        clock.advance(timedelta(minutes=30))
        assert client.insert({"n": 1}, HOURLY, kind="digest").unique_skipped_as_duplicate
        clock.advance(timedelta(minutes=30))  # 11:15: the next period
        later = client.insert_many([InsertManyParams({"n": 1}, HOURLY, kind="digest")])
        assert not later[0].unique_skipped_as_duplicate
        assert later[0].job.scheduled_at == datetime(2031, 5, 4, 11, 15, tzinfo=UTC)
        # Explicit times still win and still mean scheduled.
        explicit = datetime(2031, 6, 1, tzinfo=UTC)
        job = client.insert({}, InsertOpts(scheduled_at=explicit), kind="other").job
        assert (job.scheduled_at, job.state) == (explicit, JobState.SCHEDULED)


def test_unique_enforcement_off(any_db: Db) -> None:  # noqa: F811
    db = any_db
    with riverboat.Client(db.url, schema=db.schema) as client:
        use_test_config(client, disable_unique_enforcement=True)
        a = client.insert({"n": 1}, HOURLY, kind="digest")
        b = client.insert({"n": 1}, HOURLY, kind="digest")
        assert a.job.id != b.job.id and not b.unique_skipped_as_duplicate
        use_test_config(client)  # back to normal
        c = client.insert({"n": 2}, HOURLY, kind="digest")
        assert client.insert({"n": 2}, HOURLY, kind="digest").job.id == c.job.id


def test_bad_config() -> None:
    with pytest.raises(TypeError, match="Client"):
        use_test_config(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="aware"):
        TestClock(datetime(2030, 1, 1))
