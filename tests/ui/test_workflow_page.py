"""The dashboard's workflow pages in chromium, on SQLite and Postgres: the graph shows
each task with its state, a task links to its job, a job of a workflow links back, and
the list of workflows shows each with its counts."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from riverboat import InsertOpts, Workflow
from tests.ui.conftest import SeededDb, same_on_every_database
from tests.ui.test_browser import _open, _shot


def test_a_workflow_drawn_with_its_states(seeded: SeededDb, serve: Any, page: Any) -> None:
    base = _open(seeded, serve)
    page.goto(f"{base}/workflows")
    expect(page.locator("#no-workflows")).to_be_visible()  # the seed has none
    wf = Workflow("nightly-report")
    wf.add("extract", {"source": "orders"}, kind="report_step")
    wf.add("extract-refunds", {"source": "refunds"}, kind="report_step")
    # "run": transform still waits for extract after extract-refunds is cancelled (under
    # "cancel" the cancel would cancel it and load at once).
    wf.add("transform", {}, InsertOpts(max_attempts=1), kind="report_step",
           deps=["extract", "extract-refunds"], on_dep_failure="run")  # fmt: skip
    wf.add("load", {}, kind="report_step", deps=["transform"])
    with seeded.client() as client:
        info = client.workflow_insert(wf)
        done = info.task("extract").job.id
        client.job_cancel(info.task("extract-refunds").job.id)
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

    # The list of workflows, from the navigation: this one with its counts, and a link.
    page.click('nav a:has-text("Workflows")')
    row = page.locator(f'#workflows tr[data-workflow="{wf.id}"]')
    expect(row.locator(".tasks")).to_have_text("4")
    expect(row.locator(".failed")).to_have_text("1")
    expect(row.locator(".unfinished")).to_have_text("3")
    row.locator("a").click()
    expect(page.locator("#workflow-state")).to_have_text("running")

    page.goto(f"{base}/workflows/wf_nope")
    expect(page.locator("body")).to_contain_text("not found")


def test_a_large_workflow_is_drawn_by_groups(seeded: SeededDb, serve: Any, page: Any) -> None:
    """Beyond DRAW_TASKS_MAX tasks, one node per column with its count and state bar,
    and a table of the TABLE_TASKS_MAX tasks that need attention most."""
    from riverboat.ui.graph import DRAW_TASKS_MAX, TABLE_TASKS_MAX

    wf = Workflow("big-fan")
    root = wf.add("root", {}, kind="report_step")
    leaves = [wf.add(f"leaf{i}", {}, kind="report_step", deps=[root]) for i in range(600)]
    wf.add("join", {}, kind="report_step", deps=leaves)
    assert len(wf.tasks) > DRAW_TASKS_MAX
    with seeded.client() as client:
        info = client.workflow_insert(wf)
        client.job_cancel(info.task("leaf450").job.id)
        client.job_cancel(info.task("join").job.id)
    page.goto(f"{_open(seeded, serve)}/workflows/{wf.id}")
    groups = page.locator("#workflow-graph g.group")
    expect(groups).to_have_count(3)
    expect(page.locator("#workflow-graph a.node")).to_have_count(0)
    leaves_group = page.locator('#workflow-graph g.group[data-first="leaf0"]')
    expect(leaves_group).to_have_attribute("data-tasks", "600")
    expect(leaves_group.locator('rect.bar[data-state="pending"]')).to_have_attribute(
        "data-count", "599"
    )
    expect(leaves_group.locator('rect.bar[data-state="cancelled"]')).to_have_attribute(
        "data-count", "1"
    )
    expect(page.locator("#workflow-tasks-note")).to_contain_text(f"{TABLE_TASKS_MAX} of 602 tasks")
    rows = page.locator("#workflow-tasks tbody tr")
    expect(rows).to_have_count(TABLE_TASKS_MAX)
    expect(rows.nth(0)).to_have_attribute("data-task", "leaf450")  # cancelled: first
    expect(rows.nth(1)).to_have_attribute("data-task", "join")
    expect(rows.nth(2)).to_have_attribute("data-task", "root")  # available
    expect(page.locator('#workflow-tasks tr[data-task="join"] td').nth(4)).to_have_text(
        "leaf0, leaf1, leaf2, leaf3, leaf4 and 595 more"
    )


def test_retry_and_cancel_a_workflow_from_its_page(seeded: SeededDb, serve: Any, page: Any) -> None:
    """The workflow page's buttons do what `riverboat workflows retry|cancel` do, shown
    only when there is something to retry or cancel, and say how many tasks changed (a
    page left open after another operator acted says that nothing did)."""
    wf = Workflow("payout")
    charge = wf.add("charge", {}, kind="report_step")
    wf.add("pay", {}, kind="report_step", deps=[charge])
    wf.add("notify", {}, kind="report_step")
    with seeded.client() as client:
        info = client.workflow_insert(wf)
        client.job_cancel(info.task("charge").job.id)  # pay is cancelled with it
    base = _open(seeded, serve)
    page.goto(f"{base}/workflows/{wf.id}")
    task = page.locator("#workflow-graph a.node")
    expect(task.and_(page.locator('[data-task="pay"]'))).to_have_attribute(
        "data-state", "cancelled"
    )
    csrf = page.locator('#workflow-retry >> xpath=.. >> input[name="csrf"]').input_value()

    page.click("#workflow-retry")
    expect(page.locator(".flash")).to_have_text(f"workflow {wf.id}: 2 tasks retried")
    expect(task.and_(page.locator('[data-task="charge"]'))).to_have_attribute(
        "data-state", "available"
    )
    expect(task.and_(page.locator('[data-task="pay"]'))).to_have_attribute("data-state", "pending")
    expect(page.locator("#workflow-retry")).to_have_count(0)  # nothing failed now

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#workflow-cancel")
    expect(page.locator(".flash")).to_have_text(f"workflow {wf.id}: 3 tasks cancelled")
    expect(page.locator("#workflow-state")).to_have_text("failed")
    expect(page.locator("#workflow-cancel")).to_have_count(0)  # every task finished
    expect(page.locator("#workflow-retry")).to_be_visible()

    stale = page.request.post(f"{base}/workflows/{wf.id}/cancel", form={"csrf": csrf})
    assert stale.ok and "every task had finished; nothing to cancel" in stale.text()

    # Retrying one task whose dependency still failed: decided at once, and said so.
    page.goto(f"{base}/jobs/{info.task('pay').job.id}")
    page.click("#job-retry")
    expect(page.locator(".flash.error")).to_have_text(
        f"job {info.task('pay').job.id} was cancelled again: its dependency 'charge' failed "
        "(retry that task, or the workflow)"
    )


@same_on_every_database
def test_a_workflow_name_in_a_confirmation_is_text_not_code(
    seeded: SeededDb, serve: Any, page: Any
) -> None:
    """Workflow names are data any client writes: the cancel button's confirmation shows
    one as it is, and dismissing it cancels nothing (it once sat in an inline onclick
    script, where a quote in the name ran code as soon as the button was clicked)."""
    name = "x'+(window.PWNED='yes')+'\"><img src=x onerror=\"window.PWNED='img'\">"
    wf = Workflow(name)
    wf.add("only", {}, kind="report_step")
    with seeded.client() as client:
        client.workflow_insert(wf)
    base = _open(seeded, serve)
    page.goto(f"{base}/workflows/{wf.id}")
    messages: list[str] = []

    def dismiss(dialog: Any) -> None:
        messages.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.click("#workflow-cancel")
    expect(page.locator("#workflow-cancel")).to_be_visible()
    assert messages == [f"Cancel every unfinished task of workflow {name}?"]
    assert page.evaluate("window.PWNED === undefined")
    expect(page.locator("#workflow-state")).to_have_text("running")
