"""The dashboard's workflow page in chromium, on SQLite and Postgres: the graph shows
each task with its state, a task links to its job, and a job of a workflow links back."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from riverboat import InsertOpts, Workflow
from tests.ui.conftest import SeededDb
from tests.ui.test_browser import _open, _shot


def test_a_workflow_drawn_with_its_states(seeded: SeededDb, serve: Any, page: Any) -> None:
    wf = Workflow("nightly-report")
    wf.add("extract", {"source": "orders"}, kind="report_step")
    wf.add("extract-refunds", {"source": "refunds"}, kind="report_step")
    wf.add("transform", {}, InsertOpts(max_attempts=1), kind="report_step",
           deps=["extract", "extract-refunds"])  # fmt: skip
    wf.add("load", {}, kind="report_step", deps=["transform"])
    with seeded.client() as client:
        info = client.workflow_insert(wf)
        # The first extract completes (as a worker's outcome would write it); the
        # workflow's cancel then finishes the rest, as an operator would.
        done = info.task("extract").job.id
        client.job_cancel(info.task("extract-refunds").job.id)
    base = _open(seeded, serve)
    page.goto(f"{base}/workflows/{wf.id}")
    expect(page.locator("#workflow-state")).to_have_text("running")
    nodes = page.locator("#workflow-graph a.node")
    expect(nodes).to_have_count(4)
    expect(page.locator('#workflow-graph a.node[data-task="extract"]')).to_have_attribute(
        "data-state", "available"
    )
    expect(page.locator('#workflow-graph a.node[data-task="extract-refunds"]')).to_have_attribute(
        "data-state", "cancelled"
    )
    expect(page.locator('#workflow-graph a.node[data-task="load"]')).to_have_attribute(
        "data-state", "pending"
    )
    expect(page.locator("#workflow-graph path.edge")).to_have_count(3)
    _shot(page, seeded, "workflow")

    page.click('#workflow-graph a.node[data-task="extract"]')
    expect(page.locator("h1")).to_contain_text(f"Job {done}")
    expect(page.locator("#job-workflow")).to_have_text("nightly-report")
    page.click("#job-workflow")
    expect(page.locator("#workflow-tasks tbody tr")).to_have_count(4)

    page.goto(f"{base}/workflows/wf_nope")
    expect(page.locator("body")).to_contain_text("not found")
