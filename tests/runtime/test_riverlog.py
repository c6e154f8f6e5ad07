"""riverlog: each attempt's log records stored in ``metadata["river:log"]`` in River's
shape, with River's caps, on Postgres and SQLite."""

from __future__ import annotations

import logging
import subprocess
import sys
from datetime import datetime, timedelta
from typing import Any

import pytest

import riverboat
from riverboat import InvalidInputError, Job, JobRow, JobState, QueueConfig, Workers
from riverboat.riverlog import METADATA_KEY, RiverLog, append_with_cap
from tests.runtime.dbs import Db, any_db  # noqa: F401

app_log = logging.getLogger("tests.riverlog.app")


class Soon(riverboat.RetryPolicy):
    def next_retry(self, job: JobRow, now: datetime) -> datetime:
        return now + timedelta(milliseconds=50)


def test_each_attempt_logs_into_metadata(any_db: Db) -> None:  # noqa: F811
    db = any_db
    app_log.setLevel(logging.DEBUG)
    workers = Workers()

    @workers.register("sync_logs")
    def sync_logs(job: Job[Any]) -> None:
        app_log.info("sync attempt %d", job.attempt)
        app_log.debug("details <&>")
        if job.attempt == 1:
            raise RuntimeError("again")

    @workers.register("async_logs")
    async def async_logs(job: Job[Any]) -> None:
        app_log.warning("async attempt %d", job.attempt)

    @workers.register("quiet")
    def quiet(job: Job[Any]) -> None:
        pass

    client = riverboat.Client(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=4)},
        workers=workers,
        middleware=[RiverLog(formatter=logging.Formatter("%(levelname)s %(message)s"))],
        retry_policy=Soon(),
        fetch_poll_interval=0.1,
    )
    with client:
        ids = {kind: client.insert({}, kind=kind).job.id for kind in ("sync_logs", "async_logs")}
        quiet_id = client.insert({}, kind="quiet").job.id
        app_log.info("not in any job")  # outside an attempt: not captured
        client.run_until_idle()
        rows = {kind: client.job_get(job_id) for kind, job_id in ids.items()}
        quiet_row = client.job_get(quiet_id)
    assert rows["sync_logs"].state is JobState.COMPLETED
    assert rows["sync_logs"].metadata[METADATA_KEY] == [
        {"attempt": 1, "log": "INFO sync attempt 1\nDEBUG details <&>\n"},
        {"attempt": 2, "log": "INFO sync attempt 2\nDEBUG details <&>\n"},
    ]
    assert rows["async_logs"].metadata[METADATA_KEY] == [
        {"attempt": 1, "log": "WARNING async attempt 1\n"}
    ]
    assert METADATA_KEY not in quiet_row.metadata  # nothing logged, nothing written


def test_caps_truncate_and_drop_oldest_first() -> None:
    existing = [{"attempt": i, "log": "x" * 100} for i in range(1, 6)]
    entry = {"attempt": 6, "log": "y" * 100}
    one = len('{"attempt":1,"log":""}') + 100
    kept, dropped = append_with_cap(existing, entry, 2 + 3 * one + 2)
    assert (dropped, [e["attempt"] for e in kept]) == (3, [4, 5, 6])
    kept, dropped = append_with_cap(existing, entry, 10)  # the newest always stays
    assert (dropped, kept) == (5, [entry])
    kept, dropped = append_with_cap([], entry, 10**6)
    assert (dropped, kept) == (0, [entry])
    with pytest.raises(InvalidInputError, match="max_size_bytes"):
        RiverLog(max_size_bytes=0)
    assert RiverLog(max_total_bytes=10**9).max_total_bytes == 64 * 1024 * 1024


def test_per_attempt_cap_on_a_real_job(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Cut as River cuts; the records past the cap are counted, not kept (a job that
    logs for hours held every line in memory until its end)."""
    workers = Workers()
    app_log.setLevel(logging.DEBUG)

    @workers.register("chatty")
    def chatty(job: Job[Any]) -> None:
        for i in range(100):
            app_log.info("line %03d", i)

    with riverboat.Client(
        sqlite_url,
        queues={"default": QueueConfig()},
        workers=workers,
        middleware=[RiverLog(formatter=logging.Formatter("%(message)s"), max_size_bytes=40)],
    ) as client:
        job_id = client.insert({}, kind="chatty").job.id
        client.run_until_idle()
        logged = client.job_get(job_id).metadata[METADATA_KEY]
    # Cut at the byte, as River cuts: 4 lines of 9 bytes, then 4 bytes of the fifth.
    assert logged == [{"attempt": 1, "log": "line 000\nline 001\nline 002\nline 003\nline"}]
    warned = [r.getMessage() for r in caplog.records if r.name == "riverboat.riverlog"]
    assert warned == [
        f"job {job_id}: its log passed 40 bytes; kept the first 40 (and dropped 95 records "
        "after them)"
    ]


def test_warnings_still_reach_stderr_when_logging_is_not_configured() -> None:
    """The capturing handler sits on the root logger; without it there, an unconfigured
    program prints warnings through logging's last resort. It still does."""
    code = (
        "import logging\n"
        "from riverboat.riverlog import RiverLog\n"
        "RiverLog()\n"
        "logging.getLogger('app').warning('still printed')\n"
        "logging.getLogger('app').info('not printed')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stderr == "still printed\n"
