"""Rows riverboat did not write: every timestamp form Go River's SQLite drivers bind, and
values nobody can read (out-of-range times, malformed JSON), in real databases.

* Go-written timestamps read back exactly through every read path (job_get, job_list,
  the CLI, the claim, the scheduler, the rescuer), and compare by instant, not by text.
* A claimed row that can't be decoded is failed by id (an error entry, retried or
  discarded by the retry policy) while the good jobs claimed with it run normally.
* Postgres rows with 'infinity' or years BC, written by raw SQL, don't break claim,
  rescuer or admin reads; the same values are refused at insert, before anything is
  written.
"""

from __future__ import annotations

import contextlib
import io
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import riverboat
from riverboat import (
    InsertOpts,
    InvalidInputError,
    Job,
    JobState,
    MaintenanceConfig,
    QueueConfig,
    RetryPolicy,
    Workers,
)
from riverboat._sql import Query, Statement
from riverboat.cli import main as cli_main
from riverboat.dialect._sqlite_common import format_timestamp, parse_timestamp, ts_exact, ts_key
from riverboat.drivers.sqlite import AsyncSqliteDriver, SqliteDriver
from riverboat.runtime.maintenance._service import MaintenanceContext
from riverboat.runtime.maintenance.rescuer import JobRescuer
from riverboat.runtime.maintenance.scheduler import JobScheduler
from tests.reliability._support import sql
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.sqlite.helpers import query
from tests.waiting import wait_until_async

MOMENT = datetime(2026, 12, 2, 16, 57, 15, 92202, tzinfo=UTC)

# (label, text as stored, what it means). Each is a form a Go driver binds a time.Time
# as, or SQLite's own clock.
GO_FORMS = [
    ("modernc default: Time.String()", "2026-12-02 16:57:15.092202 +0000 UTC", MOMENT),
    (
        "Time.String() with monotonic reading",
        "2026-12-02 16:57:15.092202 +0000 UTC m=+0.001300",
        MOMENT,
    ),
    (
        "Time.String() in another zone",
        "2026-12-02 22:27:15.092202 +0530 IST",
        MOMENT,
    ),
    (
        "modernc _time_format=sqlite",
        "2026-12-02 16:57:15.092+00:00",
        MOMENT.replace(microsecond=92000),
    ),
    (
        "mattn/go-sqlite3, nanoseconds, offset",
        "2026-12-02 09:57:15.092202999-07:00",
        MOMENT,
    ),
    ("River's own layout", "2026-12-02 16:57:15.092", MOMENT.replace(microsecond=92000)),
    (
        "River before 0.44.1 (zeros dropped)",
        "2026-12-02 16:57:15.5",
        MOMENT.replace(microsecond=500000),
    ),
    ("RFC 3339 with T and Z", "2026-12-02T16:57:15.092202Z", MOMENT),
    ("whole seconds", "2026-12-02 16:57:15", MOMENT.replace(microsecond=0)),
]


@pytest.mark.parametrize(("label", "text", "expected"), GO_FORMS, ids=[f[0] for f in GO_FORMS])
def test_parse_timestamp_reads_every_go_form(label: str, text: str, expected: datetime) -> None:
    assert parse_timestamp(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "999-01-01 00:00:00",
        "0000-01-01 00:00:00",
        "10000-01-01 00:00:00",
        "yesterday",
        "",
        "2026-13-01 00:00:00",
        "0001-01-01 00:00:00+05:00",
    ],
)
def test_parse_timestamp_refuses_what_python_cannot_hold(text: str) -> None:
    with pytest.raises(ValueError):
        parse_timestamp(text)


# A row as River's SQLite driver inserts one with every column given (the shape of its
# JobInsertFull): JSON through json(), timestamps as bound text.
RIVER_INSERT_FULL = """
INSERT INTO river_job (
    args, attempt, attempted_at, attempted_by, created_at, errors, finalized_at, kind,
    max_attempts, metadata, priority, queue, scheduled_at, state, tags
) VALUES (
    :args, :attempt, :attempted_at, json(:attempted_by), :created_at, json(:errors),
    :finalized_at, :kind, :max_attempts, json(:metadata), 1, 'default', :scheduled_at,
    :state, json('[]')
) RETURNING id
"""


def _river_insert(url: str, **values: Any) -> int:
    row = {
        "args": "{}",
        "attempt": 0,
        "attempted_at": None,
        "attempted_by": None,
        "created_at": "2026-12-01 00:00:00.000",
        "errors": None,
        "finalized_at": None,
        "kind": "go_job",
        "max_attempts": 25,
        "metadata": "{}",
        "scheduled_at": "2026-12-01 00:00:00.000",
        "state": "available",
        **values,
    }
    conn = SqliteDriver(url)
    try:
        ((job_id,),) = conn.fetch(Statement(Query("river_insert_full", RIVER_INSERT_FULL), row))
    finally:
        conn.close()
    return int(job_id)


@pytest.mark.parametrize(("label", "text", "expected"), GO_FORMS, ids=[f[0] for f in GO_FORMS])
def test_go_written_timestamps_read_by_every_admin_path(
    sqlite_url: str, label: str, text: str, expected: datetime
) -> None:
    job_id = _river_insert(
        sqlite_url,
        created_at=text,
        scheduled_at=text,
        attempted_at=text,
        finalized_at=text,
        state="completed",
        attempt=1,
    )
    with riverboat.Client(sqlite_url) as client:
        job = client.job_get(job_id)
        assert job.decode_errors == ()
        assert (job.created_at, job.scheduled_at, job.attempted_at, job.finalized_at) == (
            expected,
        ) * 4
        listed = client.job_list(order_by="scheduled_at").jobs
        assert [j.id for j in listed] == [job_id]
        assert listed[0].scheduled_at == expected
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["jobs", "get", str(job_id), "--database-url", sqlite_url]) == 0
    assert str(job_id) in out.getvalue()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["jobs", "list", "--database-url", sqlite_url]) == 0
    assert str(job_id) in out.getvalue()


def _go_string(moment: datetime, offset_hours: float) -> str:
    """Go's Time.String() of ``moment`` in a fixed zone (no abbreviation: Go prints the
    offset again, as it does for zones without a name)."""
    zone = timezone(timedelta(hours=offset_hours))
    local = moment.astimezone(zone)
    minutes = int(offset_hours * 60)
    sign = "+" if minutes >= 0 else "-"
    hhmm = f"{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"
    return f"{local:%Y-%m-%d %H:%M:%S}.{local.microsecond:06d} {sign}{hhmm} {sign}{hhmm[:2]}"


def _mattn(moment: datetime, offset_hours: int) -> str:
    local = moment.astimezone(timezone(timedelta(hours=offset_hours)))
    return local.isoformat(sep=" ", timespec="microseconds")


def test_claim_compares_instants_not_text(sqlite_url: str) -> None:
    """Text comparison (River's) would claim the first job 6 h early and the second 4 h
    late; riverboat's claim compares the instants."""
    now = datetime.now(UTC)
    future_west = _river_insert(sqlite_url, scheduled_at=_mattn(now + timedelta(hours=1), -7))
    past_east = _river_insert(sqlite_url, scheduled_at=_mattn(now - timedelta(hours=1), 5))
    past_go = _river_insert(sqlite_url, scheduled_at=_go_string(now - timedelta(hours=1), 5))
    past_t = _river_insert(
        sqlite_url, scheduled_at=(now - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    unreadable = _river_insert(sqlite_url, scheduled_at="999-01-01 00:00:00")
    driver = SqliteDriver(sqlite_url)
    try:
        rows = driver.fetch(
            driver.dialect.job_get_available(queue="default", max_to_lock=10, client_id="c")
        )
    finally:
        driver.close()
    claimed = {row[0] for row in rows}
    assert claimed == {past_east, past_go, past_t, unreadable}
    assert future_west not in claimed


async def _run_service(url: str, service_type: Any, workers: Workers) -> Any:
    driver = AsyncSqliteDriver(url)
    try:
        ctx = MaintenanceContext(
            driver=driver,
            client_id="x",
            config=MaintenanceConfig(batch_pause_min=0, batch_pause_max=0, start_jitter=0),
            workers=workers,
            retry_policy=RetryPolicy(),
            job_timeout=1.0,
        )
        service = service_type(ctx)
        await service.run_once()
        return service
    finally:
        await driver.close()


async def test_scheduler_and_rescuer_read_go_forms_and_survive_bad_rows(sqlite_url: str) -> None:
    now = datetime.now(UTC)
    workers = Workers()
    workers.register("go_job")(lambda job: None)
    # Retried by Go River (its completer bound scheduled_at as Time.String()): due.
    retried = _river_insert(
        sqlite_url,
        state="retryable",
        attempt=1,
        scheduled_at=_go_string(now - timedelta(seconds=30), 0),
    )
    not_yet = _river_insert(
        sqlite_url, state="retryable", attempt=1, scheduled_at=_mattn(now + timedelta(hours=1), -7)
    )
    bad_time = _river_insert(sqlite_url, state="scheduled", scheduled_at="not a time")
    await _run_service(sqlite_url, JobScheduler, workers)
    states = dict(query(sqlite_url, "SELECT id, state FROM river_job"))
    assert states[retried] == "available"
    assert states[not_yet] == "retryable"
    assert states[bad_time] == "available"  # promoted; the claim fails it by id

    # Stuck: running since long ago in Go's form; a second one is unreadable as a row.
    stuck = _river_insert(
        sqlite_url, state="running", attempt=1, attempted_at=_go_string(now - timedelta(hours=2), 2)
    )
    stuck_bad = _river_insert(
        sqlite_url,
        state="running",
        attempt=1,
        attempted_at=_go_string(now - timedelta(hours=2), 0),
        created_at="garbage",
    )
    fresh = _river_insert(sqlite_url, state="running", attempt=1, attempted_at=_go_string(now, -5))
    rescuer = await _run_service(sqlite_url, JobRescuer, workers)
    rows = {r[0]: r[1:] for r in query(sqlite_url, "SELECT id, state, json(errors) FROM river_job")}
    assert rows[stuck][0] == "retryable"
    assert rows[stuck_bad][0] == "retryable"
    assert "rescued" in json.loads(rows[stuck_bad][1])[-1]["error"]
    assert rows[fresh][0] == "running"
    assert rescuer.rescued["retryable"] == 2


class Always0(RetryPolicy):
    def next_retry(self, job: riverboat.JobRow, now: datetime) -> datetime:
        return now


# (label, column overrides) for rows riverboat can't fully decode on SQLite.
BAD_SQLITE_ROWS: list[tuple[str, dict[str, Any]]] = [
    ("scheduled_at unpadded year", {"scheduled_at": "999-01-01 00:00:00"}),
    ("scheduled_at garbage", {"scheduled_at": "soon"}),
    ("created_at garbage", {"created_at": "yesterday"}),
    ("created_at year 10000", {"created_at": "10000-01-01 00:00:00"}),
    ("args not JSON", {"args": "{not json"}),
    ("metadata not JSON", {"metadata_raw": "{oops"}),
    ("created_at a blob", {"created_at_blob": True}),
]


def _insert_bad_sqlite_row(url: str, overrides: dict[str, Any], max_attempts: int) -> int:
    raw = {k: overrides.pop(k) for k in list(overrides) if k.endswith(("_raw", "_blob"))}
    job_id = _river_insert(url, kind="go_job", max_attempts=max_attempts, **overrides)
    # Values json() refuses can't go in through River's statement: write them raw.
    for key, value in raw.items():
        column = key.rsplit("_", 1)[0]
        if key.endswith("_blob"):
            query(url, f"UPDATE river_job SET {column} = x'00ff' WHERE id = ?", job_id)
        else:
            query(url, f"UPDATE river_job SET {column} = ? WHERE id = ?", value, job_id)
    return job_id


@pytest.mark.parametrize("max_attempts", [1, 2])
async def test_undecodable_claimed_rows_fail_alone_sqlite(
    sqlite_url: str, max_attempts: int
) -> None:
    workers = Workers()
    ran: list[int] = []

    @workers.register("go_job")
    async def go_job(job: Job[Any]) -> None:
        ran.append(job.id)

    good_before = _river_insert(sqlite_url, kind="go_job")
    bad = {
        _insert_bad_sqlite_row(sqlite_url, dict(overrides), max_attempts): label
        for label, overrides in BAD_SQLITE_ROWS
    }
    # Healed rather than failed: the claim starts attempted_by over, and errors that are
    # not JSON read as none (and start over at the next error written).
    healed = [
        _insert_bad_sqlite_row(sqlite_url, {"attempted_by_raw": "x"}, max_attempts),
        _insert_bad_sqlite_row(sqlite_url, {"errors_raw": "[{"}, max_attempts),
    ]
    good_after = _river_insert(sqlite_url, kind="go_job")
    client = riverboat.AsyncClient(
        sqlite_url,
        queues={"default": QueueConfig(max_workers=20)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        retry_policy=Always0(),
    )
    await client.start()
    try:

        def settled() -> bool:
            states = dict(query(sqlite_url, "SELECT id, state FROM river_job"))
            goods = [good_before, good_after, *healed]
            return all(states[i] in ("discarded", "completed") for i in bad) and all(
                states[i] == "completed" for i in goods
            )

        await wait_until_async(settled, timeout=20, poll=0.05, what="every row settled")
    finally:
        await client.stop()
        await client.close()
    assert {good_before, good_after, *healed} <= set(ran)
    with riverboat.Client(sqlite_url) as admin:
        jobs = {j.id: j for j in admin.job_list(limit=100).jobs}  # survives every bad row
        for job_id, label in bad.items():
            job = admin.job_get(job_id)
            assert jobs[job_id].state == job.state
            errors = query(sqlite_url, "SELECT json(errors) FROM river_job WHERE id = ?", job_id)
            entries = json.loads(errors[0][0])
            print(f"{label:28} -> {job.state:9} {entries[0]['error'][:90]!r}")
            assert "could not decode" in entries[0]["error"], label
            assert entries[0]["attempt"] == 1
            assert (
                query(sqlite_url, "SELECT attempt FROM river_job WHERE id = ?", job_id)[0][0] >= 1
            )
            if max_attempts == 1:
                assert job.state == "discarded", label
            elif label.startswith("scheduled_at"):
                # The retry rewrote scheduled_at in River's form: the 2nd attempt ran.
                assert job.state == "completed" and job_id in ran, label
                assert job.decode_errors == ()
            else:
                assert job.state in ("discarded", "completed"), label


# Postgres: values the column holds but Python's datetime cannot.
PG_BAD_TIMES = [
    ("scheduled_at -infinity", "scheduled_at", "'-infinity'"),
    ("scheduled_at year 0 in UTC", "scheduled_at", "'0001-01-01 00:00:00+05'"),
    ("scheduled_at BC", "scheduled_at", "'4713-01-01 00:00:00+00 BC'"),
    ("created_at infinity", "created_at", "'infinity'"),
    ("created_at year 0", "created_at", "'0001-01-01 00:00:00+05'"),
]


async def test_out_of_range_timestamps_pg(pg_url: str, pg_schema: str) -> None:
    workers = Workers()
    ran: list[int] = []

    @workers.register("pg_job")
    async def pg_job(job: Job[Any]) -> None:
        ran.append(job.id)

    ids = {}
    for label, column, value in PG_BAD_TIMES:
        ((job_id,),) = sql(
            pg_url,
            pg_schema,
            f"INSERT INTO river_job (kind, args, max_attempts, state, {column})"
            f" VALUES ('pg_job', '{{}}', 3, 'available', {value}) RETURNING id",
        )
        ids[job_id] = label
    ((stuck,),) = sql(
        pg_url,
        pg_schema,
        "INSERT INTO river_job (kind, args, max_attempts, state, attempt, attempted_at)"
        " VALUES ('pg_job', '{}', 3, 'running', 1, '-infinity') RETURNING id",
    )
    ((never,),) = sql(
        pg_url,
        pg_schema,
        "INSERT INTO river_job (kind, args, max_attempts, state, scheduled_at)"
        " VALUES ('pg_job', '{}', 3, 'available', 'infinity') RETURNING id",
    )
    with riverboat.Client(pg_url, schema=pg_schema) as admin:
        good = admin.insert_many([riverboat.InsertManyParams({}, kind="pg_job") for _ in range(3)])
        listed = admin.job_list(limit=100, order_by="scheduled_at").jobs
        assert len(listed) == len(ids) + 5
        assert admin.job_get(never).scheduled_at.year == 9999
        attempted_at = admin.job_get(stuck).attempted_at
        assert attempted_at is not None and attempted_at.year == 1
    client = riverboat.AsyncClient(
        pg_url,
        schema=pg_schema,
        queues={"default": QueueConfig(max_workers=20)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    )
    await client.start()
    try:
        want = set(ids) | {r.job.id for r in good}
        await wait_until_async(lambda: want <= set(ran), timeout=20, what="every job ran")
    finally:
        await client.stop()
        await client.close()
    assert never not in ran
    # The rescuer reads the stuck job ('-infinity' attempted_at) and rescues it.
    from riverboat.drivers.psycopg import AsyncPsycopgDriver

    driver = AsyncPsycopgDriver(pg_url, schema=pg_schema)
    try:
        ctx = MaintenanceContext(
            driver=driver,
            client_id="x",
            config=MaintenanceConfig(start_jitter=0),
            workers=workers,
            retry_policy=RetryPolicy(),
            job_timeout=1.0,
        )
        rescuer = JobRescuer(ctx)
        await rescuer.run_once()
    finally:
        await driver.close()
    assert sql(pg_url, pg_schema, "SELECT state::text FROM river_job WHERE id = %s", stuck) == [
        ("retryable",)
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(["jobs", "list", "--database-url", pg_url, "--schema", pg_schema])
    assert code == 0 and str(never) in out.getvalue()


def test_out_of_range_timestamps_in_the_overview_pg(pg_url: str, pg_schema: str) -> None:
    """The dashboard's overview aggregates (throughput per minute, a queue's oldest
    available job, a workflow's start) read stored values: one 'infinity' row made the
    overview and the workflows list fail (503) where every listing reads clamped."""
    wf = '{"riverboat_workflow": {"id": "wf_inf", "task": "a", "name": "inf"}}'
    for columns, values in (
        ("state, finalized_at", "'completed', 'infinity'"),
        ("state, finalized_at", "'discarded', now()"),
        ("state, scheduled_at", "'available', '-infinity'"),
        ("state, created_at, metadata", f"'available', '-infinity', '{wf}'"),
    ):
        sql(
            pg_url,
            pg_schema,
            f"INSERT INTO river_job (kind, args, {columns}) VALUES ('pg_job', '{{}}', {values})",
        )
    with riverboat.Client(pg_url, schema=pg_schema) as admin:
        minutes = admin.job_throughput(minutes=60)
        assert sum(m.discarded for m in minutes) == 1 and sum(m.completed for m in minutes) == 0
        (default,) = admin.queue_activity()
        assert default.oldest_available_at is not None
        assert default.oldest_available_at.year == 1
        (workflow,) = admin.workflow_list()
        assert workflow.created_at is not None and workflow.created_at.year == 1


def _every_page(client: riverboat.Client, descending: bool, limit: int) -> list[int]:
    seen: list[int] = []
    cursor = None
    for _ in range(30):
        page = client.job_list(
            limit=limit, order_by="scheduled_at", descending=descending, cursor=cursor
        )
        seen += [job.id for job in page.jobs]
        # The cursor as the CLI hands it out and takes it back.
        cursor = None if page.next_cursor is None else str(page.next_cursor)
        if cursor is None:
            return seen
    raise AssertionError(f"the pages never ended: {seen}")


@pytest.mark.parametrize("limit", [1, 2])
def test_pages_by_time_pass_rows_read_clamped_pg(pg_url: str, pg_schema: str, limit: int) -> None:
    """Rows written by raw SQL with 'infinity', '-infinity' or a year BC are read clamped
    (9999-12-29, 0001-01-03) but ordered as stored: each is listed once, in order, by
    keyset pages. A cursor at the clamp was compared as the clamp: the infinite rows came
    back on every page, which never ended, and descending skipped one; ascending from
    -infinity, the cursor's year 1 was written "1-01-03" and refused when given back."""
    stored = ["'infinity'", "'infinity'", "now()", "'-infinity'", "'0044-03-15 BC'", "now()"]
    ids = [
        sql(
            pg_url,
            pg_schema,
            "INSERT INTO river_job (kind, args, state, scheduled_at)"
            f" VALUES ('pg_job', '{{}}', 'scheduled', {value}) RETURNING id",
        )[0][0]
        for value in stored
    ]
    inf_a, inf_b, now_a, neg_inf, bc, now_b = ids
    ascending = [neg_inf, bc, now_a, now_b, inf_a, inf_b]
    with riverboat.Client(pg_url, schema=pg_schema) as client:
        assert _every_page(client, False, limit) == ascending
        assert _every_page(client, True, limit) == ascending[::-1]


def test_pages_by_time_pass_years_below_1000_sqlite(sqlite_url: str) -> None:
    """A row another program wrote with a year below 1000 (riverboat refuses them): the
    cursor after it was written with an unpadded year and refused when given back."""
    early = _river_insert(sqlite_url, state="scheduled", scheduled_at="0001-01-01 00:00:00.000")
    later = _river_insert(sqlite_url, state="scheduled", scheduled_at="0999-06-01 12:00:00.000")
    now = _river_insert(sqlite_url, state="scheduled", scheduled_at="2026-12-01 00:00:00.000")
    with riverboat.Client(sqlite_url) as client:
        assert _every_page(client, False, 1) == [early, later, now]
        assert _every_page(client, True, 1) == [now, later, early]


def test_a_job_at_the_last_attempt_river_can_count_is_left_alone_by_a_retry(
    any_db: Db,  # noqa: F811
) -> None:
    """River's attempts are a smallint: a retry of a job at 32767 overflowed and Postgres
    failed the statement, so a bulk retry retried none of its jobs (SQLite stored a
    max_attempts of 32768). Made available, its claim would overflow too, and Go River's
    fails that client's whole fetch of the queue at every poll. Such a job is left as it
    is, as one a retry can't change; the others are retried."""
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        worn, plain = (client.insert({}, kind="edge_job").job.id for _ in range(2))
        now = "now()" if any_db.dialect == "postgres" else "datetime('now', 'subsec')"
        for job_id, attempt in ((worn, 32767), (plain, 1)):
            any_db.execute(
                f"UPDATE river_job SET state = 'discarded', finalized_at = {now},"
                " attempt = %s, max_attempts = %s WHERE id = %s",
                attempt,
                attempt,
                job_id,
            )
        result = client.job_retry_many(states=["discarded"])
        assert [job.id for job in result.jobs] == [plain]
        assert client.job_retry(worn).state is JobState.DISCARDED
        assert client.job_get(plain).state is JobState.AVAILABLE


def test_times_at_the_edges_are_written_with_four_digit_years() -> None:
    """Every text form of a time: four-digit years (glibc's strftime wrote year 999 as
    "999", which no RFC3339 parser reads back), and SQLite's rounding to the millisecond
    stops at datetime.max (a worker's next_retry may return it: the overflow failed the
    job's outcome, and the completer discarded a job with attempts left)."""
    from riverboat._job import format_rfc3339_nano, parse_rfc3339
    from riverboat._json import go_json_dumps

    early = datetime(999, 5, 6, 7, 8, 9, 120, tzinfo=UTC)
    assert format_rfc3339_nano(early) == "0999-05-06T07:08:09.00012Z"
    assert parse_rfc3339(format_rfc3339_nano(early)) == early
    assert go_json_dumps({"at": early}) == '{"at":"0999-05-06T07:08:09.00012Z"}'
    assert format_timestamp(early) == "0999-05-06 07:08:09.000"
    assert format_timestamp(datetime.max.replace(tzinfo=UTC)) == "9999-12-31 23:59:59.999"
    assert format_timestamp(datetime(2026, 1, 2, 3, 4, 5, 999_500)) == "2026-01-02 03:04:06.000"


def test_error_entries_without_a_time_or_a_trace_show_neither_pg(
    pg_url: str, pg_schema: str
) -> None:
    """An error entry another client wrote with "at": "infinity" and "trace": null is
    shown without a time ("-", not year 1) and without a trace line ("None")."""
    entry = '{"at": "infinity", "attempt": 1, "error": "boom", "trace": null}'
    (job_id,) = sql(
        pg_url,
        pg_schema,
        "INSERT INTO river_job (kind, args, state, attempt, errors)"
        " VALUES ('pg_job', '{}', 'retryable', 1, ARRAY[%s::jsonb]) RETURNING id",
        entry,
    )[0]
    with riverboat.Client(pg_url, schema=pg_schema) as client:
        (error,) = client.job_get(job_id).errors
    assert (error.error, error.trace, error.at) == ("boom", "", datetime.min)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(
            ["jobs", "get", str(job_id), "--database-url", pg_url, "--schema", pg_schema]
        )
    assert code == 0 and "attempt 1 at -: boom" in out.getvalue(), out.getvalue()
    assert "None" not in out.getvalue()


def test_an_error_entry_that_is_not_an_object_keeps_the_others_sqlite(sqlite_url: str) -> None:
    """SQLite reads a job's errors as one JSON array: an entry another client wrote as
    a string was parsed as JSON a second time, which failed, and the job showed no
    errors at all (its decode_errors said why). The entry is kept as its JSON text,
    as on Postgres, and the others are read."""
    job_id = _river_insert(
        sqlite_url,
        state="retryable",
        attempt=2,
        errors='[{"at":"2024-01-01T00:00:00Z","attempt":1,"error":"ok"}, "str", 7]',
    )
    with riverboat.Client(sqlite_url) as client:
        job = client.job_get(job_id)
    assert [e.error for e in job.errors] == ["ok", '"str"', "7"]
    assert job.decode_errors == ()


YEAR_ZERO = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))
BAD_TIMES = [
    YEAR_ZERO,
    datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5))),  # year 10000 in UTC
    datetime(999, 12, 31, tzinfo=UTC),  # SQLite would write it unpadded
]


@pytest.mark.parametrize("moment", BAD_TIMES, ids=["year0", "year10000", "year999"])
@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_unstorable_times_refused_before_writing(
    request: pytest.FixtureRequest, dialect: str, moment: datetime
) -> None:
    if dialect == "postgres":
        url = request.getfixturevalue("pg_url")
        schema = request.getfixturevalue("pg_schema")
    else:
        url = request.getfixturevalue("sqlite_url")
        schema = None

    def count() -> int:
        if schema is not None:
            return int(sql(url, schema, "SELECT count(*) FROM river_job")[0][0])
        return int(query(url, "SELECT count(*) FROM river_job")[0][0])

    with riverboat.Client(url, schema=schema) as client:
        with pytest.raises(InvalidInputError) as info:
            client.insert_many(
                [
                    riverboat.InsertManyParams({}, kind="ok_job"),
                    riverboat.InsertManyParams(
                        {}, kind="ok_job", opts=InsertOpts(scheduled_at=moment)
                    ),
                ]
            )
        assert info.value.field == "params[1].opts.scheduled_at"
        assert count() == 0


class BrokenPolicy(RetryPolicy):
    def next_retry(self, job: riverboat.JobRow, now: datetime) -> datetime:
        raise RuntimeError("policy bug")


async def test_rescuer_survives_a_failing_retry_policy_and_bad_metadata(sqlite_url: str) -> None:
    workers = Workers()
    workers.register("go_job")(lambda job: None)
    old = _go_string(datetime.now(UTC) - timedelta(hours=2), 0)
    ids = [
        _river_insert(sqlite_url, state="running", attempt=1, attempted_at=old) for _ in range(3)
    ]
    query(sqlite_url, "UPDATE river_job SET metadata = '{oops', errors = '[' WHERE id = ?", ids[1])
    driver = AsyncSqliteDriver(sqlite_url)
    try:
        ctx = MaintenanceContext(
            driver=driver,
            client_id="x",
            config=MaintenanceConfig(start_jitter=0),
            workers=workers,
            retry_policy=BrokenPolicy(),
            job_timeout=1.0,
        )
        rescuer = JobRescuer(ctx)
        await rescuer.run_once()
    finally:
        await driver.close()
    states = dict(query(sqlite_url, "SELECT id, state FROM river_job"))
    assert [states[i] for i in ids] == ["retryable"] * 3
    ((metadata, errors),) = query(
        sqlite_url, "SELECT json(metadata), json(errors) FROM river_job WHERE id = ?", ids[1]
    )
    assert json.loads(metadata) == {"river:rescue_count": 1}
    # River 0.48: errors that are not JSON are kept, as a string, before the new entry.
    kept, rescued = json.loads(errors)
    assert kept == "[" and rescued["error"] == "Stuck job rescued by JobRescuer"


async def test_scheduler_discards_a_unique_twin_with_bad_metadata(sqlite_url: str) -> None:
    key = "x'" + "ab" * 32 + "'"
    holder = _river_insert(sqlite_url, state="available")
    twin = _river_insert(
        sqlite_url, state="retryable", scheduled_at=_go_string(datetime.now(UTC), 0)
    )
    query(
        sqlite_url,
        f"UPDATE river_job SET unique_key = {key}, unique_states = 255 WHERE id = ?",
        holder,
    )
    query(
        sqlite_url,
        f"UPDATE river_job SET unique_key = {key}, unique_states = 1, metadata = 'bad'"
        " WHERE id = ?",
        twin,
    )
    scheduler = await _run_service(sqlite_url, JobScheduler, Workers())
    assert scheduler.discarded == 1
    assert dict(query(sqlite_url, "SELECT id, state FROM river_job")) == {
        holder: "available",
        twin: "discarded",
    }


# -- properties: any instant, in any form Go writes, in any offset -------------------------

FORMS = ("go_string", "go_string_monotonic", "mattn", "sqlite_tf", "rfc3339", "river")


def _in_form(moment: datetime, form: str, offset_minutes: int) -> str:
    zone = timezone(timedelta(minutes=offset_minutes))
    local = moment.astimezone(zone)
    sign = "+" if offset_minutes >= 0 else "-"
    hh, mm = divmod(abs(offset_minutes), 60)
    frac = f"{local.microsecond:06d}"
    if form in ("go_string", "go_string_monotonic"):
        text = f"{local:%Y-%m-%d %H:%M:%S}.{frac} {sign}{hh:02d}{mm:02d} {sign}{hh:02d}{mm:02d}"
        return text + (" m=+0.001300" if form == "go_string_monotonic" else "")
    if form == "mattn":
        return f"{local:%Y-%m-%d %H:%M:%S}.{frac}123{sign}{hh:02d}:{mm:02d}"  # nanoseconds
    if form == "sqlite_tf":
        return f"{local:%Y-%m-%d %H:%M:%S}.{frac[:3]}{sign}{hh:02d}:{mm:02d}"
    if form == "rfc3339":
        return f"{local:%Y-%m-%dT%H:%M:%S}.{frac}{sign}{hh:02d}:{mm:02d}"
    return f"{moment:%Y-%m-%d %H:%M:%S}.{frac[:3]}"  # River's own: UTC, milliseconds


instants = st.datetimes(
    min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)
offsets = st.integers(min_value=-14 * 60, max_value=14 * 60)


@given(moment=instants, form=st.sampled_from(FORMS), offset=offsets)
@settings(max_examples=300, deadline=None)
def test_every_form_reads_as_its_instant(moment: datetime, form: str, offset: int) -> None:
    text = _in_form(moment, form, offset)
    expected = (
        moment.replace(microsecond=moment.microsecond // 1000 * 1000)
        if form
        in (
            "sqlite_tf",
            "river",
        )
        else moment
    )
    assert parse_timestamp(text) == expected, text


@pytest.fixture(scope="module")
def sqlite_conn() -> Any:
    from riverboat.drivers._sqlite_module import sqlite_module

    conn = sqlite_module().connect(":memory:")
    yield conn
    conn.close()


@given(
    stored=instants,
    form=st.sampled_from(FORMS),
    offset=offsets,
    delta_ms=st.integers(-(10**7), 10**7),
)
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_sql_comparisons_follow_the_instant(
    sqlite_conn: Any, stored: datetime, form: str, offset: int, delta_ms: int
) -> None:
    """What the claim, scheduler and rescuer do: stored text (any form) against River's
    canonical text of another instant, at least a millisecond apart."""
    if delta_ms == 0:
        delta_ms = 1
    text = _in_form(stored, form, offset)
    stored_ms = stored.replace(microsecond=stored.microsecond // 1000 * 1000)
    other = stored_ms + timedelta(milliseconds=delta_ms)
    if not datetime(1000, 1, 1, tzinfo=UTC) <= other <= datetime(9999, 12, 31, tzinfo=UTC):
        return
    canonical = format_timestamp(other)
    ((due,),) = sqlite_conn.execute(f"SELECT {ts_key('?1')} <= ?2", (text, canonical)).fetchall()
    assert bool(due) == (stored_ms <= other), (text, canonical)
    ((exact,),) = sqlite_conn.execute(f"SELECT {ts_exact('?1')}", (text,)).fetchall()
    # SQLite's %f rounds to the millisecond (Python's reading truncates to the µs).
    spelled = [
        f"{m:%Y-%m-%d %H:%M:%S}.{m.microsecond // 1000:03d}"
        for m in (stored_ms, stored_ms + timedelta(milliseconds=1))
    ]
    assert exact in spelled, text


def test_null_timestamps_compare_as_in_river(sqlite_conn: Any) -> None:
    """An unreadable value counts as due; NULL stays NULL (never due, never stuck)."""
    for value, due in ((None, None), ("soon", 1), ("2999-01-01 00:00:00", 0)):
        ((result,),) = sqlite_conn.execute(
            f"SELECT {ts_key('?1')} <= '2026-12-02 16:57:15.092'", (value,)
        ).fetchall()
        assert result == due, value


def test_text_that_is_not_utf8_is_read_with_replacement_characters(sqlite_url: str) -> None:
    """A row whose args hold bytes that are not UTF-8 (SQLite stores what another
    program gives it) is read with U+FFFD in their place, as Go's JSON decoding reads it:
    the claim that took it beside a good job runs both (a decode error had left both
    running, for the rescuer), and the CLI lists the table."""
    bad = _river_insert(sqlite_url, kind="go_job")
    query(
        sqlite_url,
        "UPDATE river_job SET args = CAST(X'7B2261223A2280FF227D' AS TEXT) WHERE id = ?",
        bad,
    )
    seen: list[Any] = []
    workers = Workers()

    @workers.register("go_job")
    def go_job(job: Job[Any]) -> None:
        seen.append(job.args)

    with riverboat.Client(
        sqlite_url, queues={"default": QueueConfig(max_workers=5)}, workers=workers
    ) as client:
        good = client.insert({"a": "fine"}, kind="go_job").job.id
        client.run_until_idle()
        states = {job_id: client.job_get(job_id).state for job_id in (bad, good)}
    assert states == {bad: "completed", good: "completed"}
    assert sorted(args["a"] for args in seen) == ["fine", "\ufffd\ufffd"]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli_main(["jobs", "list", "--database-url", sqlite_url]) == 0
    assert f"{bad} " in out.getvalue()
