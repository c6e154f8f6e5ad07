"""The dashboard's ``/periodic`` page in a real browser (chromium through playwright), on
SQLite and Postgres: a leader's durable periodic job appears with its schedule, catch-up
policy, last and next run; a stored job no leader runs any more is flagged overdue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from playwright.sync_api import expect

import riverboat
from riverboat import MaintenanceConfig, PeriodicJob, QueueConfig, Workers
from riverboat._url import driver_from_url
from riverboat.dialect._periodic_common import PeriodicJobWrite
from riverboat.ui import create_app
from tests.ui.conftest import SeededDb
from tests.waiting import wait_until


def test_periodic_page_shows_stored_runs(seeded: SeededDb, serve: Any, page: Any) -> None:
    workers = Workers()

    @workers.register("ui_tick")
    def tick(job: Any) -> None:
        return None

    driver = driver_from_url(seeded.url, schema=seeded.schema)
    # A job an old deploy defined: stored, but no leader runs it now.
    gone = PeriodicJobWrite(
        "retired_job", "@every 60s", "none", datetime.now(UTC) - timedelta(hours=2), None
    )
    driver.execute(driver.dialect.periodic_job_save([gone]))
    leader = riverboat.Client(
        driver,
        id="ui_periodic_leader",
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        maintenance=MaintenanceConfig(start_jitter=0.0),
        periodic_jobs=[
            PeriodicJob(
                "* * * * * *",
                lambda: riverboat.InsertManyParams({}, kind="ui_tick"),
                id="every_second",
                catch_up="one",
            )
        ],
    )
    leader.start()
    try:
        wait_until(
            lambda: any(
                r.id == "every_second" and r.last_run_at is not None
                for r in leader.periodic_job_list()
            ),
            timeout=20,
        )
        base = str(serve(create_app(seeded.url, schema=seeded.schema)).url)
        page.goto(base + "/")
        page.click("nav >> text=Periodic")
        row = page.locator('tr[data-periodic="every_second"]')
        expect(row.locator(".schedule")).to_have_text("* * * * * *")
        expect(row.locator(".catch-up")).to_have_text("one")
        expect(row.locator(".last-run")).to_contain_text("ago")
        expect(row.locator(".next-run")).not_to_contain_text("overdue")
        expect(row.locator(".status")).to_have_text("defined")
        retired = page.locator('tr[data-periodic="retired_job"]')
        expect(retired.locator(".next-run")).to_contain_text("overdue: no leader runs it")
        expect(retired.locator(".last-run")).to_have_text("-")
    finally:
        leader.stop()
        leader.close()
