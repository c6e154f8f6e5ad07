"""``riverboat demo``: a tour of the product on the embedded SQLite default, in seconds.

It migrates a SQLite file (River's schema), clears the demo's own rows from earlier runs,
inserts a realistic mix of jobs and works them with an :class:`~riverboat.AsyncClient`:

* a batch of fast jobs, inserted in one statement (``insert_many``);
* a flaky job that fails twice and then succeeds (retries with backoff);
* a job that snoozes once (``JobSnooze``) and a sync worker run in the thread pool;
* a job scheduled a few seconds ahead (promoted by the leader's scheduler);
* a unique job inserted twice (the second insert is skipped as a duplicate);
* a job that cancels itself (``JobCancel``) and one that fails for good (discarded);
* a periodic job, when this build's runtime runs periodic jobs on the database.

Progress is shown live on a terminal (with ``rich`` when installed: ``riverboat[demo]``)
and as plain lines otherwise; a summary per state with timings closes the run.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, Protocol, TextIO

from riverboat._job import FINALIZED_STATES, InsertOpts, JobRow, UniqueOpts
from riverboat._sql import Query, Statement
from riverboat._url import driver_from_url, is_sqlite_url
from riverboat.client import AsyncClient
from riverboat.migrations import up_all
from riverboat.runtime.events import Event, EventKind
from riverboat.runtime.producer import QueueConfig
from riverboat.runtime.worker import Job, JobCancel, JobSnooze, Workers, record_output

__all__ = ["DEFAULT_URL", "DemoReport", "run_demo"]

DEFAULT_URL = "sqlite:///riverboat-demo.sqlite3"
QUEUE = "riverboat_demo"
FLAKY_RETRY_DELAY = 1.5  # seconds; River's default backoff would be 1 s, then 16 s
SNOOZE_SECONDS = 2.0
SCHEDULE_AHEAD = 3.0
PERIODIC_EVERY = 2.0
PERIODIC_RUNS_WANTED = 2
DEADLINE = 45.0  # the demo never runs longer than this, whatever happens
POLL = 0.25


# -- job args: dataclasses with a kind, River's shape ----------------------------------
class _DemoJob:
    """Every demo job goes to the demo's queue, unless it says otherwise."""

    def insert_opts(self) -> InsertOpts:
        return InsertOpts(queue=QUEUE)


@dataclass(frozen=True)
class ResizeImage(_DemoJob):
    """A fast job: many of these are inserted in one statement."""

    kind: ClassVar[str] = "demo_resize_image"
    image_id: int
    width: int = 640


@dataclass(frozen=True)
class ChargeCard(_DemoJob):
    """Fails twice (a flaky payment gateway), then succeeds."""

    kind: ClassVar[str] = "demo_charge_card"
    order_id: int
    cents: int


@dataclass(frozen=True)
class WaitForStock(_DemoJob):
    """Snoozes once: the item isn't in stock yet, look again in a moment."""

    kind: ClassVar[str] = "demo_wait_for_stock"
    sku: str


@dataclass(frozen=True)
class SendReminder(_DemoJob):
    """Scheduled a few seconds ahead."""

    kind: ClassVar[str] = "demo_send_reminder"
    user_id: int


@dataclass(frozen=True)
class BuildDailyReport(_DemoJob):
    """Unique by args: inserting the same report twice keeps one job. Its worker is a
    plain ``def``, run in the queue's thread pool."""

    kind: ClassVar[str] = "demo_build_daily_report"
    day: str

    def insert_opts(self) -> InsertOpts:
        return InsertOpts(queue=QUEUE, unique_opts=UniqueOpts(by_args=True))


@dataclass(frozen=True)
class CloseAccount(_DemoJob):
    """Gives up for good with JobCancel."""

    kind: ClassVar[str] = "demo_close_account"
    account_id: int


@dataclass(frozen=True)
class ImportFeed(_DemoJob):
    """Always fails; with max_attempts=1 it is discarded after one attempt."""

    kind: ClassVar[str] = "demo_import_feed"
    url: str

    def insert_opts(self) -> InsertOpts:
        return InsertOpts(queue=QUEUE, max_attempts=1)


@dataclass(frozen=True)
class Heartbeat(_DemoJob):
    """The periodic job."""

    kind: ClassVar[str] = "demo_heartbeat"


def build_workers() -> Workers:
    workers = Workers()

    @workers.register(ResizeImage)
    async def resize_image(job: Job[ResizeImage]) -> None:
        await asyncio.sleep(random.uniform(0.02, 0.15))
        record_output({"image_id": job.args.image_id, "width": job.args.width})

    def charge_retry_at(job: Job[Any]) -> datetime:
        # River's default backoff is (errors + 1)^4 s: 1 s, then 16 s. The demo wants to
        # finish in seconds, so this worker retries after 1.5 s each time.
        return datetime.now(UTC) + timedelta(seconds=FLAKY_RETRY_DELAY)

    @workers.register(ChargeCard, next_retry=charge_retry_at)
    async def charge_card(job: Job[ChargeCard]) -> None:
        await asyncio.sleep(0.05)
        if job.attempt <= 2:
            raise ConnectionError(f"payment gateway timed out (attempt {job.attempt})")
        record_output({"order_id": job.args.order_id, "charged": job.args.cents})

    @workers.register(WaitForStock)
    async def wait_for_stock(job: Job[WaitForStock]) -> None:
        if not job.metadata.get("snoozes"):
            raise JobSnooze(SNOOZE_SECONDS)
        record_output({"sku": job.args.sku, "in_stock": True})

    @workers.register(SendReminder)
    async def send_reminder(job: Job[SendReminder]) -> None:
        await asyncio.sleep(0.02)

    @workers.register(BuildDailyReport)
    def build_daily_report(job: Job[BuildDailyReport]) -> None:
        time.sleep(0.1)  # blocking work is fine in a sync worker: it runs in a thread
        record_output({"day": job.args.day, "rows": 1234})

    @workers.register(CloseAccount)
    async def close_account(job: Job[CloseAccount]) -> None:
        raise JobCancel(f"account {job.args.account_id} was already closed")

    @workers.register(ImportFeed)
    async def import_feed(job: Job[ImportFeed]) -> None:
        raise ValueError(f"feed {job.args.url} returned malformed XML")

    @workers.register(Heartbeat)
    async def heartbeat(job: Job[Heartbeat]) -> None:
        await asyncio.sleep(0.01)

    return workers


# -- tracking what happens ---------------------------------------------------------------
@dataclass
class Tracked:
    id: int
    label: str
    kind: str
    state: str
    scheduled_at: datetime
    run_durations: list[float] = field(default_factory=list)
    queue_waits: list[float] = field(default_factory=list)
    row: JobRow | None = None

    @property
    def final(self) -> bool:
        return self.state in FINALIZED_STATES


@dataclass
class DemoReport:
    """What one demo run did; :func:`run_demo` returns it."""

    duration: float = 0.0
    migrated: list[int] = field(default_factory=list)
    reset: int = 0
    jobs: dict[int, Tracked] = field(default_factory=dict)
    duplicate_skipped: bool = False
    duplicate_of: int | None = None
    scheduler: bool = False
    scheduled_gave_up: bool = False
    periodic_note: str = ""
    periodic_runs: int = 0
    timed_out: bool = False
    events: int = 0
    dropped_events: int = 0

    def by_label(self, label: str) -> list[Tracked]:
        return [t for t in self.jobs.values() if t.label == label]

    @property
    def ok(self) -> bool:
        """Every job reached the state the demo expects of it."""
        expected = {
            "fast": "completed",
            "flaky": "completed",
            "snooze": "completed",
            "unique": "completed",
            "cancel": "cancelled",
            "discard": "discarded",
        }
        if not self.scheduled_gave_up:
            expected["scheduled"] = "completed"
        return self.duplicate_skipped and all(
            t.state == expected[t.label] for t in self.jobs.values() if t.label in expected
        )


class Display(Protocol):
    def start(self) -> None: ...
    def log(self, elapsed: float, text: str) -> None: ...
    def update(self, report: DemoReport, elapsed: float, status: Sequence[str]) -> None:
        """``status``: jobs per state, then what the demo is waiting for."""

    def stop(self) -> None: ...
    def summary(self, report: DemoReport) -> None: ...


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s"


STATE_ORDER = (
    "completed",
    "cancelled",
    "discarded",
    "retryable",
    "scheduled",
    "available",
    "running",
    "pending",
)


def summary_rows(report: DemoReport) -> list[tuple[str, ...]]:
    """One row per final state: jobs, total and median run time, median queue wait,
    retries (attempts that failed and were tried again)."""
    groups: dict[str, list[Tracked]] = {}
    for tracked in report.jobs.values():
        groups.setdefault(tracked.state, []).append(tracked)
    rows: list[tuple[str, ...]] = []
    for state in sorted(groups, key=lambda s: STATE_ORDER.index(s) if s in STATE_ORDER else 99):
        jobs = groups[state]
        runs = [d for t in jobs for d in t.run_durations]
        waits = [w for t in jobs for w in t.queue_waits]
        retries = sum(_retries(t) for t in jobs)
        rows.append(
            (
                state,
                str(len(jobs)),
                _fmt_s(sum(runs)) if runs else "-",
                _fmt_s(statistics.median(runs)) if runs else "-",
                _fmt_s(statistics.median(waits)) if waits else "-",
                str(retries),
            )
        )
    return rows


def _retries(tracked: Tracked) -> int:
    """Failed attempts that were tried again: every error, but a cancelled or discarded
    job's last one."""
    errors = len(tracked.row.errors) if tracked.row is not None else 0
    if tracked.state in ("cancelled", "discarded") and errors:
        errors -= 1
    return errors


SUMMARY_HEADER = ("state", "jobs", "total run", "median run", "median wait", "retries")


def summary_notes(report: DemoReport) -> list[str]:
    notes: list[str] = []
    dup = f" (the second insert returned job #{report.duplicate_of})" if report.duplicate_of else ""
    notes.append(f"duplicates skipped: {1 if report.duplicate_skipped else 0}{dup}")
    for flaky in report.by_label("flaky"):
        errors = len(flaky.row.errors) if flaky.row is not None else 0
        notes.append(
            f"flaky job: {flaky.state} after {errors} retries (attempt {errors + 1}); "
            f"its worker retries after {FLAKY_RETRY_DELAY:g} s, where River's default "
            "backoff would wait 1 s, then 16 s"
        )
    for snoozed in report.by_label("snooze"):
        count = snoozed.row.metadata.get("snoozes", 0) if snoozed.row is not None else 0
        notes.append(
            f"snoozed job: snoozed {count} time(s) for {SNOOZE_SECONDS:g} s, then {snoozed.state}"
        )
    for scheduled in report.by_label("scheduled"):
        if scheduled.final:
            wait = scheduled.queue_waits[-1] if scheduled.queue_waits else None
            notes.append(
                f"scheduled job: ran {SCHEDULE_AHEAD:g} s after insert as scheduled "
                f"(then waited {_fmt_s(wait)} for a worker)"
            )
        elif report.scheduled_gave_up:
            why = (
                "the scheduler did not promote it in time"
                if report.scheduler
                else "this build runs no scheduler on this database yet (it is a leader's "
                "maintenance service), so nothing promotes it to available"
            )
            notes.append(f"scheduled job: still {scheduled.state}: {why}; stopped waiting")
    notes.append(f"periodic job: {report.periodic_note}")
    if report.dropped_events:
        notes.append(f"events dropped by the slow display: {report.dropped_events}")
    if report.timed_out:
        notes.append(f"stopped at the {DEADLINE:g} s deadline with jobs unfinished")
    notes.append(f"finished in {report.duration:.1f} s")
    return notes


class PlainDisplay:
    """Plain lines, for pipes, logs and CI."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._last_status = ""
        self._last_print = 0.0

    def start(self) -> None:
        pass

    def log(self, elapsed: float, text: str) -> None:
        print(f"[{elapsed:5.1f}s] {text}", file=self._out, flush=True)

    def update(self, report: DemoReport, elapsed: float, status: Sequence[str]) -> None:
        line = "; ".join(status)
        if line != self._last_status and elapsed - self._last_print >= 1.0:
            self._last_status = line
            self._last_print = elapsed
            self.log(elapsed, line)

    def stop(self) -> None:
        pass

    def summary(self, report: DemoReport) -> None:
        rows = [SUMMARY_HEADER, *summary_rows(report)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(SUMMARY_HEADER))]
        print("\nsummary", file=self._out)
        for row in rows:
            cells = [row[0].ljust(widths[0])] + [
                c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
            ]
            print("  " + "  ".join(cells), file=self._out)
        print(file=self._out)
        for note in summary_notes(report):
            print(note, file=self._out)
        self._out.flush()


class RichDisplay:
    """Notable events as they happen, under them a live panel: a progress bar, jobs per
    state, and what the demo is waiting for."""

    def __init__(self, out: TextIO) -> None:
        from rich.console import Console

        self._console = Console(file=out)
        self._live: Any = None

    def start(self) -> None:
        from rich.live import Live

        self._live = Live(console=self._console, refresh_per_second=10, transient=False)
        self._live.start()

    def log(self, elapsed: float, text: str) -> None:
        # Printed above the live panel, so the whole story stays on screen.
        from rich.text import Text

        line = Text(f"{elapsed:5.1f}s ", style="dim")
        line.append(text)
        self._console.print(line)

    def update(self, report: DemoReport, elapsed: float, status: Sequence[str]) -> None:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        total = len(report.jobs)
        done = sum(1 for t in report.jobs.values() if t.final)
        counts: dict[str, int] = {}
        for tracked in report.jobs.values():
            counts[tracked.state] = counts.get(tracked.state, 0) + 1
        present = [state for state in STATE_ORDER if counts.get(state)]
        states = Table.grid(padding=(0, 2))
        for _ in present:
            states.add_column(justify="right")
        states.add_row(*(f"{state} [bold]{counts[state]}[/bold]" for state in present))
        bar = Table.grid(padding=(0, 1))
        bar.add_row(
            Text(f"{elapsed:5.1f}s"),
            ProgressBar(total=max(total, 1), completed=done, width=40),
            Text(f"{done}/{total} finalized"),
        )
        if self._live is not None:
            waiting = Text("; ".join(status[1:]), style="dim")
            self._live.update(Group(bar, states, waiting))

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def summary(self, report: DemoReport) -> None:
        from rich.table import Table

        table = Table(title="riverboat demo: what happened", title_justify="left")
        for i, name in enumerate(SUMMARY_HEADER):
            table.add_column(name, justify="left" if i == 0 else "right")
        for row in summary_rows(report):
            table.add_row(*row)
        self._console.print(table)
        for note in summary_notes(report):
            self._console.print(note, highlight=False)


def pick_display(out: TextIO, plain: bool) -> Display:
    if not plain and out.isatty():
        try:
            import rich  # noqa: F401
        except ImportError:
            pass
        else:
            return RichDisplay(out)
    return PlainDisplay(out)


# -- the run -------------------------------------------------------------------------------
_RESET_JOBS = Query("demo_reset_jobs", "DELETE FROM river_job WHERE queue = :queue")
_RESET_QUEUE = Query("demo_reset_queue", "DELETE FROM river_queue WHERE name = :queue")


def prepare_database(url: str) -> tuple[list[int], int]:
    """Migrate to River's latest schema and delete the demo's rows from earlier runs.
    Returns (versions applied, jobs deleted)."""
    driver = driver_from_url(url)
    try:
        applied = up_all(driver)["main"]
        deleted: int = driver.execute(Statement(_RESET_JOBS, {"queue": QUEUE}))
        driver.execute(Statement(_RESET_QUEUE, {"queue": QUEUE}))
    finally:
        driver.close()
    return applied, deleted


def _periodic_jobs() -> tuple[list[Any], str]:
    """The demo's periodic job, if this build of riverboat has them."""
    import riverboat

    periodic_cls: Any = getattr(riverboat, "PeriodicJob", None)
    if periodic_cls is None:
        try:
            from riverboat.runtime.maintenance import PeriodicJob

            periodic_cls = PeriodicJob
        except ImportError:
            return [], "skipped: this build of riverboat has no riverboat.PeriodicJob yet"
    # A heartbeat: the ticks missed while the demo was not running are not worth a run.
    job = periodic_cls(
        timedelta(seconds=PERIODIC_EVERY),
        lambda: Heartbeat(),
        run_on_start=True,
        id="demo",
        catch_up="none",
    )
    return [job], ""


def _maintenance_services(client: AsyncClient) -> set[str]:
    maintainer = getattr(client.runtime, "maintainer", None)
    services = getattr(maintainer, "services", None)
    return set(services) if isinstance(services, dict) else set()


def _describe(event: Event, tracked: Tracked | None) -> str | None:
    """A line for the log, for events worth one (not every fast job)."""
    job = event.job
    if job is None:
        return None
    label = tracked.label if tracked is not None else "periodic"
    name = f"{job.kind} #{job.id}"
    if event.kind == EventKind.JOB_FAILED:
        error = job.errors[-1].error if job.errors else "error"
        if job.state == "discarded":
            return f"{name} failed for good (max_attempts={job.max_attempts}): {error}"
        delay = (job.scheduled_at - datetime.now(UTC)).total_seconds()
        return f"{name} attempt {job.attempt} failed: {error}; retrying in {max(delay, 0):.1f} s"
    if event.kind == EventKind.JOB_SNOOZED:
        return f"{name} snoozed for {SNOOZE_SECONDS:g} s (the attempt isn't counted)"
    if event.kind == EventKind.JOB_CANCELLED:
        error = job.errors[-1].error if job.errors else ""
        return f"{name} cancelled itself: {error}"
    if event.kind == EventKind.JOB_COMPLETED and label != "fast":
        extra = f" on attempt {job.attempt}" if job.attempt > 1 else ""
        return f"{name} completed{extra}"
    return None


async def _insert_all(client: AsyncClient, report: DemoReport, jobs: int, log: Any) -> None:
    def track(label: str, row: JobRow) -> None:
        report.jobs[row.id] = Tracked(row.id, label, row.kind, row.state, row.scheduled_at)

    results = await client.insert_many([ResizeImage(image_id=i) for i in range(1, jobs + 1)])
    for result in results:
        track("fast", result.job)
    log(f"inserted {len(results)} {ResizeImage.kind} jobs in one statement (insert_many)")

    flaky = await client.insert(ChargeCard(order_id=1001, cents=4999))
    track("flaky", flaky.job)
    snooze = await client.insert(WaitForStock(sku="RB-42"))
    track("snooze", snooze.job)
    due = datetime.now(UTC) + timedelta(seconds=SCHEDULE_AHEAD)
    scheduled = await client.insert(SendReminder(user_id=7), InsertOpts(scheduled_at=due))
    track("scheduled", scheduled.job)
    log(f"inserted {SendReminder.kind} #{scheduled.job.id}, scheduled {SCHEDULE_AHEAD:g} s ahead")

    day = datetime.now(UTC).date().isoformat()
    first = await client.insert(BuildDailyReport(day=day))
    track("unique", first.job)
    second = await client.insert(BuildDailyReport(day=day))
    report.duplicate_skipped = second.unique_skipped_as_duplicate and not (
        first.unique_skipped_as_duplicate
    )
    report.duplicate_of = second.job.id
    log(
        f"inserted {BuildDailyReport.kind} twice (unique by args): second insert "
        + ("skipped as a duplicate" if second.unique_skipped_as_duplicate else "was NOT skipped")
        + f", returning job #{second.job.id}"
    )

    track("cancel", (await client.insert(CloseAccount(account_id=55))).job)
    track("discard", (await client.insert(ImportFeed(url="https://example.com/feed"))).job)


async def _run(url: str, jobs: int, display: Display, started: float) -> DemoReport:
    report = DemoReport()

    def elapsed() -> float:
        return time.monotonic() - started

    def log(text: str) -> None:
        display.log(elapsed(), text)

    applied, report.reset = await asyncio.to_thread(prepare_database, url)
    report.migrated = applied
    where = url.removeprefix("sqlite:///") if is_sqlite_url(url) else "the database"
    if applied:
        log(f"migrated {where} to River's schema (versions {applied[0]}..{applied[-1]})")
    else:
        log(f"{where} already has River's schema; reusing it")
    if report.reset:
        log(f"deleted {report.reset} jobs left by an earlier demo run")

    periodic, report.periodic_note = _periodic_jobs()
    client = AsyncClient(
        url,
        queues={QUEUE: QueueConfig(max_workers=10)},
        workers=build_workers(),
        fetch_poll_interval=0.5,
        periodic_jobs=periodic,
    )
    subscription = client.subscribe(maxsize=jobs * 4 + 1000)
    display.start()
    try:
        await client.start()
        services = _maintenance_services(client)
        report.scheduler = "scheduler" in services
        if periodic and "periodic" not in services:
            report.periodic_note = (
                "skipped: this build runs no periodic jobs (a leader's maintenance "
                "service) on this database yet"
            )
            periodic = []
        await _insert_all(client, report, jobs, log)
        await _watch(client, report, subscription, display, elapsed, bool(periodic))
    finally:
        await client.stop()
        await client.close()
        # The watch loop also reads rows, so it can end once the last outcome is
        # committed but before the completer has handed out that outcome's event: a CI
        # run printed the flaky job's two failures and not its completion. Stopped, the
        # client has delivered every event; they are logged like the others.
        _drain(subscription, report, log)
        display.stop()
    report.dropped_events = subscription.dropped
    await _final_rows(url, report)
    if periodic:
        report.periodic_note = (
            f"{report.periodic_runs} runs completed (every {PERIODIC_EVERY:g} s, inserted "
            "by the leader)"
        )
    report.duration = elapsed()
    return report


def _drain(subscription: Any, report: DemoReport, log: Callable[[str], None] | None) -> None:
    while True:
        try:
            event: Event = subscription.get_nowait()
        except asyncio.QueueEmpty:
            return
        report.events += 1
        job = event.job
        if job is None:
            continue
        tracked = report.jobs.get(job.id)
        if tracked is not None:
            tracked.state = job.state
            tracked.row = job
            if event.stats is not None:
                tracked.run_durations.append(event.stats.run_duration)
                tracked.queue_waits.append(event.stats.queue_wait)
        elif job.kind == Heartbeat.kind and event.kind == EventKind.JOB_COMPLETED:
            report.periodic_runs += 1
        if log is not None:
            line = _describe(event, tracked)
            if line is not None:
                log(line)


async def _watch(
    client: AsyncClient,
    report: DemoReport,
    subscription: Any,
    display: Display,
    elapsed: Callable[[], float],
    periodic: bool,
) -> None:
    """Work until every job is finalized (bounded waits for scheduler-driven ones)."""
    grace = 10.0 if report.scheduler else 2.0
    scheduled = report.by_label("scheduled")
    announced_due = False

    def log(text: str) -> None:
        display.log(elapsed(), text)

    while True:
        _drain(subscription, report, log)
        # Jobs the scheduler moves, or that wait between attempts, don't emit events:
        # read their rows.
        waiting = [t.id for t in report.jobs.values() if not t.final]
        for row in await _fetch_rows(client, waiting):
            tracked = report.jobs[row.id]
            if not tracked.final:
                tracked.state = row.state
        now = datetime.now(UTC)
        status = _status(report, now, scheduled, periodic)
        display.update(report, elapsed(), status)
        pending = [t for t in report.jobs.values() if not t.final]
        if scheduled and not scheduled[0].final:
            overdue = (now - scheduled[0].scheduled_at).total_seconds()
            if overdue > 0 and not announced_due:
                announced_due = True
                log(
                    f"{scheduled[0].kind} #{scheduled[0].id} is due; "
                    + (
                        "waiting for the scheduler to make it available"
                        if report.scheduler
                        else "no scheduler runs on this database in this build, so it "
                        f"stays {scheduled[0].state}; waiting {grace:g} s to show it"
                    )
                )
            if overdue > grace and pending == scheduled:
                report.scheduled_gave_up = True
                log(f"stopped waiting for {scheduled[0].kind} #{scheduled[0].id}")
                pending = []
        periodic_done = not periodic or report.periodic_runs >= PERIODIC_RUNS_WANTED
        if elapsed() > DEADLINE:
            report.timed_out = True
            log(f"deadline of {DEADLINE:g} s reached; stopping")
        if (not pending and periodic_done) or report.timed_out:
            display.update(report, elapsed(), _status(report, now, scheduled, periodic))
            return
        await asyncio.sleep(POLL)


def _status(
    report: DemoReport, now: datetime, scheduled: Sequence[Tracked], periodic: bool
) -> list[str]:
    parts = []
    counts: dict[str, int] = {}
    for tracked in report.jobs.values():
        counts[tracked.state] = counts.get(tracked.state, 0) + 1
    parts.append(", ".join(f"{s} {counts[s]}" for s in STATE_ORDER if counts.get(s)))
    if scheduled and not scheduled[0].final:
        due = (scheduled[0].scheduled_at - now).total_seconds()
        parts.append(
            f"reminder due in {due:.0f} s" if due > 0 else f"reminder {-due:.0f} s overdue"
        )
    if periodic:
        parts.append(f"periodic runs {report.periodic_runs}")
    return parts


async def _final_rows(url: str, report: DemoReport) -> None:
    """Read every tracked job's final row (errors, metadata) once the client stopped."""
    client = AsyncClient(url)
    try:
        for row in await _fetch_rows(client, list(report.jobs)):
            tracked = report.jobs[row.id]
            tracked.row = row
            tracked.state = row.state
    finally:
        await client.close()


async def _fetch_rows(client: AsyncClient, ids: Sequence[int]) -> list[JobRow]:
    """The rows of ``ids``: one statement per 500 (SQLite's bound on parameters)."""
    dialect = client.driver.dialect
    rows: list[JobRow] = []
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        raw = await client.driver.fetch(dialect.job_get_by_id_many(chunk))
        rows.extend(dialect.decode_job(r) for r in raw)
    return rows


def run_demo(
    url: str = DEFAULT_URL,
    *,
    jobs: int = 50,
    out: TextIO | None = None,
    plain: bool = False,
) -> DemoReport:
    """Run the demo and print its progress and summary to ``out`` (stdout)."""
    stream = out if out is not None else sys.stdout
    display = pick_display(stream, plain)
    started = time.monotonic()
    if is_sqlite_url(url):
        path = Path(url.removeprefix("sqlite:///"))
        print(f"riverboat demo on SQLite: {path.resolve()}", file=stream, flush=True)
    report = asyncio.run(_run(url, jobs, display, started))
    display.summary(report)
    return report


# -- after the tour: a stream to watch (`riverboat demo --ui`) ------------------------------
STREAM_EVERY = 1.0  # seconds between inserts


def keep_producing(url: str, stop: threading.Event) -> int:
    """Insert and work a mixed stream of demo jobs (fast ones, flaky charges, snoozes,
    discarded imports, cancelled accounts) every second until ``stop`` is set, so an
    open dashboard has something moving; returns how many jobs were inserted."""
    return asyncio.run(_stream(url, stop))


async def _stream(url: str, stop: threading.Event) -> int:
    client = AsyncClient(
        url,
        queues={QUEUE: QueueConfig(max_workers=10)},
        workers=build_workers(),
        fetch_poll_interval=0.5,
    )
    inserted = 0
    tick = 0
    await client.start()
    try:
        while not stop.is_set():
            tick += 1
            batch: list[Any] = [
                ResizeImage(image_id=10_000 + tick * 10 + i) for i in range(random.randint(2, 6))
            ]
            if tick % 3 == 0:
                batch.append(ChargeCard(order_id=5000 + tick, cents=random.randint(500, 9999)))
            if tick % 5 == 0:
                batch.append(ImportFeed(url=f"https://feeds.example/{tick}.xml"))
            if tick % 7 == 0:
                batch.append(WaitForStock(sku=f"RB-{tick}"))
            if tick % 11 == 0:
                batch.append(CloseAccount(account_id=tick))
            inserted += len(await client.insert_many(batch))
            await asyncio.to_thread(stop.wait, STREAM_EVERY)
    finally:
        await client.stop()
        await client.close()
    return inserted
