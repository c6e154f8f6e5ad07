"""The dashboard's overview shows each flow-control limit live workers report, per
partition, with its use and the jobs it holds back (chromium, SQLite and Postgres)."""

from __future__ import annotations

import threading
from typing import Any

from playwright.sync_api import expect

import riverboat
from riverboat import ConcurrencyLimit, InsertManyParams, QueueConfig, Workers
from riverboat._url import driver_from_url
from riverboat.ui import create_app
from tests.ui.conftest import SeededDb
from tests.waiting import wait_until


def test_overview_shows_limits_use_and_held_back_jobs(
    seeded: SeededDb, serve: Any, page: Any
) -> None:
    release = threading.Event()
    workers = Workers()

    @workers.register("limits_hold")
    def hold(job: Any) -> None:
        release.wait(30)

    limited = QueueConfig(
        max_workers=5,
        concurrency=ConcurrencyLimit(global_limit=1, local_limit=1, by_args=["customer"]),
        sequences=True,
    )
    worker = riverboat.Client(
        driver_from_url(seeded.url, schema=seeded.schema),
        id="ui_limits_worker",
        queues={"limits_ui": limited},
        workers=workers,
        fetch_poll_interval=0.1,
        heartbeat_interval=0.2,
    )
    opts = riverboat.InsertOpts(queue="limits_ui")
    worker.insert_many([InsertManyParams({"customer": "acme"}, kind="limits_hold", opts=opts)] * 3)
    in_sequence = riverboat.InsertOpts(queue="limits_ui", sequence="nightly")
    worker.insert_many(
        [InsertManyParams({"customer": "zeta"}, kind="limits_hold", opts=in_sequence)] * 2
    )
    worker.start()
    try:
        expected = [
            ("concurrency", ["acme"], 1, 2),
            ("local", ["acme"], 1, 2),
            ("sequence", ["nightly"], 1, 1),
            ("concurrency", ["zeta"], 1, 1),
            ("local", ["zeta"], 1, 1),
        ]
        wait_until(
            lambda: (
                sorted(
                    (u.limit, u.partition, u.in_use, u.held_back)
                    for u in worker.queue_limits("limits_ui")
                )
                == sorted(expected)
            ),
            timeout=20,
        )
        base = str(serve(create_app(seeded.url, schema=seeded.schema)).url)
        page.goto(base + "/")
        rows = page.locator('table.limits tr[data-queue="limits_ui"]')
        expect(rows).to_have_count(5)
        row = rows.locator('xpath=self::*[@data-limit="concurrency"]').filter(has_text="acme")
        expect(row.locator(".value")).to_have_text("1 at once")
        expect(row.locator(".partition")).to_have_text('["acme"]')
        expect(row.locator(".in-use")).to_have_text("1")
        expect(row.locator(".held-back")).to_have_text("2")
        local = page.locator(
            'table.limits tr[data-limit="local"][data-worker="ui_limits_worker"]'
        ).filter(has_text="acme")
        expect(local.locator(".value")).to_have_text("1 at once per worker (ui_limits_worker)")
        expect(local.locator(".held-back")).to_have_text("2")
        sequence = page.locator('table.limits tr[data-limit="sequence"]')
        expect(sequence.locator(".value")).to_have_text("sequence: one at a time")
        expect(sequence.locator(".partition")).to_have_text('["nightly"]')
        expect(sequence.locator(".in-use")).to_have_text("1")
        expect(sequence.locator(".held-back")).to_have_text("1")
    finally:
        release.set()
        worker.stop()
