"""The dashboard's ``/workers`` page in a real browser (chromium through playwright), on
SQLite and Postgres: a running worker appears with its queues and the job it runs, and
leaves the page when it stops."""

from __future__ import annotations

import threading
from typing import Any

from playwright.sync_api import expect

import riverboat
from riverboat import QueueConfig, Workers
from riverboat._url import driver_from_url
from riverboat.ui import create_app
from tests.ui.conftest import SeededDb
from tests.waiting import wait_until


def test_workers_page_shows_live_workers_and_their_running_jobs(
    seeded: SeededDb, serve: Any, page: Any
) -> None:
    release = threading.Event()
    workers = Workers()

    @workers.register("fleet_hold")
    def hold(job: Any) -> None:
        release.wait(30)

    worker = riverboat.Client(
        driver_from_url(seeded.url, schema=seeded.schema),
        id="ui_worker_1",
        queues={"fleet_ui": QueueConfig(max_workers=3)},
        workers=workers,
        fetch_poll_interval=0.1,
        heartbeat_interval=0.2,
        dead_after=2.0,
    )
    job = worker.insert({}, kind="fleet_hold", opts=riverboat.InsertOpts(queue="fleet_ui")).job
    worker.start()
    try:
        wait_until(lambda: worker.job_get(job.id).state.value == "running", timeout=20)
        base = str(serve(create_app(seeded.url, schema=seeded.schema)).url)
        page.goto(base + "/")
        page.click("nav >> text=Workers")
        card = page.locator('section.worker[data-worker="ui_worker_1"]')
        expect(card.locator(".badge")).to_have_text("alive")
        row = card.locator('tr[data-queue="fleet_ui"]')
        expect(row.locator(".max")).to_have_text("3")
        expect(row.locator(".running")).to_have_text("1")
        expect(card.locator(f'table.worker-jobs tr[data-job="{job.id}"]')).to_contain_text(
            "fleet_hold"
        )
        # An operator's scale reaches the worker and, at its next heartbeat, the page.
        worker.workers_scale("fleet_ui", 7)
        page.reload()
        expect(row.locator(".max")).to_have_text("7", timeout=10_000)
    finally:
        release.set()
        worker.stop()
        worker.close()
    page.reload()
    expect(page.locator('section.worker[data-worker="ui_worker_1"]')).to_have_count(0)
