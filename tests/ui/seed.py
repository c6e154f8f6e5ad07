"""Jobs for the dashboard's tests and screenshots, worked for real (riverboat.testing's
work_job runs each worker inline and writes its outcome), on Postgres or SQLite."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import riverboat
from riverboat import Job, Workers, record_output
from riverboat.testing import work_job

XSS_ARGS = {
    "html": "<img src=x onerror=\"window.__xss='img'\">",
    "note": "</script><script>window.__xss='script'</script>",
}
QUEUES = ("default", "email", "media")
MEDIA_COMPLETED = 60  # more than a page of 50


@dataclass
class Seeded:
    completed: list[int] = field(default_factory=list)
    discarded: list[int] = field(default_factory=list)
    available: list[int] = field(default_factory=list)
    scheduled: list[int] = field(default_factory=list)
    xss: int = 0


class ChargeDeclined(Exception):
    pass


def build_workers() -> Workers:
    workers = Workers()

    @workers.register("resize_image")
    async def resize_image(job: Job[Any]) -> None:
        record_output({"width": job.args["width"], "ok": True})

    @workers.register("charge_card")
    async def charge_card(job: Job[Any]) -> None:
        raise ChargeDeclined(f"card for order {job.args['order']} was declined")

    @workers.register("render_page")
    async def render_page(job: Job[Any]) -> None:
        record_output(job.args)

    return workers


def seed(client: riverboat.Client) -> Seeded:
    """Queues default/email/media; 60 completed resize_image jobs, 3 discarded
    charge_card jobs (with errors and traces), available email jobs with tags and
    priorities, a scheduled report, and a completed render_page job whose args are HTML
    and a closing script tag."""
    driver = client.driver
    for name in QUEUES:
        driver.fetch(driver.dialect.queue_create_or_set_updated_at(name))
    workers = build_workers()
    out = Seeded()
    for i in range(MEDIA_COMPLETED):
        job = client.insert(
            {"image": f"img-{i}.png", "width": 100 + i},
            riverboat.InsertOpts(queue="media", tags=["thumbnails"]),
            kind="resize_image",
        ).job
        out.completed.append(work_job(client, workers, job).job.id)
    for order in (101, 102, 103):
        job = client.insert(
            {"order": order, "cents": 1999},
            riverboat.InsertOpts(max_attempts=1, tags=["billing"]),
            kind="charge_card",
        ).job
        result = work_job(client, workers, job)
        assert result.job.state == "discarded", result.job.state
        out.discarded.append(job.id)
    for i, priority in enumerate((1, 2, 2, 3)):
        job = client.insert(
            {"to": f"user{i}@example.com"},
            riverboat.InsertOpts(
                queue="email", priority=priority, tags=["welcome" if i % 2 else "digest"]
            ),
            kind="send_email",
        ).job
        out.available.append(job.id)
    job = client.insert(
        {"day": "2026-12-03"},
        riverboat.InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(hours=2)),
        kind="daily_report",
    ).job
    out.scheduled.append(job.id)
    # River's logging middleware keeps each attempt's log under metadata["river:log"].
    metadata = {
        "title": "<b>bold</b>",
        "river:log": [{"attempt": 1, "log": "rendering <i>page</i>\nwrote 3 files"}],
    }
    job = client.insert(XSS_ARGS, riverboat.InsertOpts(metadata=metadata), kind="render_page").job
    work_job(client, workers, job)
    out.xss = job.id
    return out
