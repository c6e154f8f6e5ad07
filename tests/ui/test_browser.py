"""The dashboard in a real browser (Debian's chromium through playwright), on SQLite and
Postgres: every page loads, filters and pagination work, and actions change the database
and the page shows it. On SQLite only (``same_on_every_database``): pages refresh
themselves, scripts run under the strict policy, job content is shown as text, read-only
hides actions, framing is refused, and dark mode and a phone's width work.

With RIVERBOAT_UI_SCREENSHOTS=1 the SQLite run writes the screenshots in docs/ui/ that
docs/ui.md shows."""

from __future__ import annotations

import os
import re
from typing import Any

from playwright.sync_api import expect

from riverboat.ui import create_app
from tests.ui.conftest import SCREENSHOTS, SeededDb, _chromium, same_on_every_database
from tests.ui.seed import MEDIA_COMPLETED


def _open(seeded: SeededDb, serve: Any, **options: Any) -> str:
    app = create_app(seeded.url, schema=seeded.schema, **options)
    return str(serve(app).url)


def _shot(page: Any, seeded: SeededDb, name: str, *, full_page: bool = True) -> None:
    """With RIVERBOAT_UI_SCREENSHOTS=1, the SQLite run writes the page's screenshot into
    docs/ui/. A plain run takes none: rendering a full page to PNG cost chromium about a
    second of CPU each, 17 s of the suite's on the 2-core VM, to check playwright rather
    than the dashboard (and writing them would leave a dirty work tree, the times on the
    page differing from run to run)."""
    if seeded.name != "sqlite" or os.environ.get("RIVERBOAT_UI_SCREENSHOTS") != "1":
        return
    image = page.screenshot(full_page=full_page)
    assert image.startswith(b"\x89PNG")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / f"{name}.png").write_bytes(image)


def test_each_page_loads(seeded: SeededDb, serve: Any, page: Any) -> None:
    base = _open(seeded, serve)
    page.goto(base + "/")
    expect(page.locator('[data-state="completed"] .count')).to_have_text(str(MEDIA_COMPLETED + 1))
    expect(page.locator('[data-state="discarded"] .count')).to_have_text("3")
    expect(page.locator('tr[data-queue="email"] td').nth(1)).to_have_text("active")
    expect(page.locator("svg.chart rect.done").first).to_be_attached()
    _shot(page, seeded, "overview")

    page.click('[data-state="discarded"]')
    expect(page.locator("table.jobs tbody tr")).to_have_count(3)
    expect(page.locator("#state-tabs a.on")).to_contain_text("discarded")
    _shot(page, seeded, "jobs")

    page.click(f'tr[data-job="{seeded.jobs.discarded[0]}"] a')
    expect(page.locator("#job-state")).to_have_text("discarded")
    expect(page.locator(".error-entry pre.err")).to_contain_text("was declined")
    page.click(".error-entry summary")
    expect(page.locator(".error-entry pre.trace")).to_contain_text("ChargeDeclined")
    expect(page.locator("dl.kv")).to_contain_text("riverboat-test")  # attempted_by
    _shot(page, seeded, "job")


def test_filter_and_paginate(seeded: SeededDb, serve: Any, page: Any) -> None:
    base = _open(seeded, serve)
    page.goto(base + "/jobs?state=completed")
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(50)
    page.click("#next-page")
    expect(rows).to_have_count(MEDIA_COMPLETED + 1 - 50)
    expect(page.locator("#next-page")).to_have_count(0)
    page.click("#first-page")
    expect(rows).to_have_count(50)

    page.fill('input[name="kind"]', "render_page")
    page.click("form.filters button")
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".kind")).to_have_text("render_page")

    page.goto(base + "/jobs?state=available")
    page.fill('input[name="priority"]', "2")
    page.click("form.filters button")
    expect(rows).to_have_count(2)
    page.fill('input[name="priority"]', "")
    page.fill('input[name="tag"]', "welcome")
    page.click("form.filters button")
    expect(rows).to_have_count(2)
    page.fill('input[name="tag"]', "")
    page.fill('input[name="queue"]', "default")
    page.click("form.filters button")
    expect(page.locator("p.empty")).to_contain_text("No available jobs match")

    # Bad input is a message in the page, not a 500.
    response = page.goto(base + "/jobs?state=completed&priority=urgent")
    assert response is not None and response.status == 400
    expect(page.locator("#problem")).to_contain_text("priority 'urgent'")
    response = page.goto(base + "/jobs?state=finished")
    assert response is not None and response.status == 400
    expect(page.locator("#problem")).to_contain_text("'finished' is not a job state")
    response = page.goto(base + "/jobs?state=completed&cursor=garbage")
    assert response is not None and response.status == 400
    expect(page.locator("#problem")).to_contain_text("cursor")
    response = page.goto(base + "/jobs/not-a-number")
    assert response is not None and response.status == 404
    expect(page.locator("#problem")).to_contain_text("is not a job id")


def test_retry_a_discarded_job(seeded: SeededDb, serve: Any, page: Any) -> None:
    base = _open(seeded, serve)
    job_id = seeded.jobs.discarded[0]
    page.goto(f"{base}/jobs/{job_id}")
    expect(page.locator("#job-state")).to_have_text("discarded")
    page.click("#job-retry")
    expect(page.locator(".flash.ok")).to_have_text(f"job {job_id} retried")
    expect(page.locator("#job-state")).to_have_text("available")
    client = seeded.client()
    try:
        assert client.job_get(job_id).state == "available"
    finally:
        client.driver.close()


def test_bulk_cancel_and_delete(seeded: SeededDb, serve: Any, page: Any) -> None:
    base = _open(seeded, serve)
    page.goto(base + "/jobs?state=available")
    first, second = seeded.jobs.available[:2]
    page.check(f'tr[data-job="{first}"] input.pick')
    page.check(f'tr[data-job="{second}"] input.pick')
    page.click('button[value="cancel"]')
    expect(page.locator(".flash.ok")).to_have_text("2 jobs cancelled")
    expect(page.locator("table.jobs tbody tr")).to_have_count(2)

    page.goto(base + "/jobs?state=cancelled")
    page.check("#pick-all")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click('button[value="delete"]')
    expect(page.locator(".flash.ok")).to_have_text("2 jobs deleted")
    expect(page.locator("p.empty")).to_be_visible()


def test_pause_and_resume_a_queue(seeded: SeededDb, serve: Any, page: Any) -> None:
    base = _open(seeded, serve)
    page.goto(base + "/")
    row = page.locator('tr[data-queue="email"]')
    row.get_by_role("button", name="Pause").click()
    expect(page.locator(".flash.ok")).to_have_text("queue email paused")
    expect(row.locator(".badge")).to_have_text("paused")
    client = seeded.client()
    try:
        assert client.queue_get("email").paused
        row.get_by_role("button", name="Resume").click()
        expect(row.locator(".badge")).to_have_text("active")
        assert not client.queue_get("email").paused
    finally:
        client.driver.close()


@same_on_every_database
def test_pages_refresh_themselves(seeded: SeededDb, serve: Any, page: Any) -> None:
    """A change made elsewhere shows up in the open page without a reload (htmx polling
    swaps the live part in place: a marker set on the window survives)."""
    base = _open(seeded, serve)
    page.goto(base + "/")
    page.evaluate("window.__sameDocument = true")
    row = page.locator('tr[data-queue="media"]')
    expect(row.locator(".badge")).to_have_text("active")
    client = seeded.client()
    try:
        client.queue_pause("media")
        client.insert({"to": "late@example.com"}, kind="send_email")
    finally:
        client.driver.close()
    expect(row.locator(".badge")).to_have_text("paused", timeout=10_000)
    expect(page.locator('[data-state="available"] .count')).to_have_text(
        str(len(seeded.jobs.available) + 1)
    )
    assert page.evaluate("window.__sameDocument") is True


@same_on_every_database
def test_scripts_run_under_a_strict_policy_and_a_ticked_list_holds_still(
    seeded: SeededDb, serve: Any, page: Any
) -> None:
    """Every response says ``script-src 'self'``, and the pages' scripts run under it
    without a violation (no inline script, no eval: htmx's trigger filter needed one).
    The jobs list does not refresh while a box is ticked in it (the swap would untick
    it): the refreshes that come are held, and once no box is ticked the next one
    shows a job inserted meanwhile."""
    base = _open(seeded, serve)
    problems: list[str] = []
    # (A page's missing favicon is a console error too, and not one of these.)
    page.on(
        "console",
        lambda message: (
            problems.append(message.text)
            if message.type == "error" and not message.text.startswith("Failed to load resource")
            else None
        ),
    )
    page.on("pageerror", lambda error: problems.append(str(error)))
    response = page.goto(base + "/jobs?state=available")
    assert response is not None
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.evaluate(
        """() => {
            window.__sameDocument = true;
            window.__held = 0;
            document.addEventListener("htmx:beforeRequest", (event) => {
                if (event.defaultPrevented) window.__held += 1;
            });
        }"""
    )
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(len(seeded.jobs.available))
    first = seeded.jobs.available[0]
    page.check(f'tr[data-job="{first}"] input.pick')
    client = seeded.client()
    try:
        client.insert({"to": "held@example.com"}, kind="send_email")
    finally:
        client.driver.close()
    page.wait_for_function("() => window.__held >= 1", timeout=10_000)
    expect(rows).to_have_count(len(seeded.jobs.available))
    expect(page.locator(f'tr[data-job="{first}"] input.pick')).to_be_checked()
    page.uncheck(f'tr[data-job="{first}"] input.pick')
    expect(rows).to_have_count(len(seeded.jobs.available) + 1, timeout=10_000)
    assert page.evaluate("window.__sameDocument") is True
    for path in ("/", "/workflows", "/workers", "/periodic", f"/jobs/{first}"):
        response = page.goto(base + path)
        assert response is not None and response.status == 200, path
        expect(page.locator("#live")).to_be_attached()
    assert problems == []


@same_on_every_database
def test_job_content_is_escaped(seeded: SeededDb, serve: Any, page: Any) -> None:
    base = _open(seeded, serve)
    page.goto(f"{base}/jobs/{seeded.jobs.xss}")
    args = page.locator("#job-args")
    expect(args).to_contain_text("<img src=x onerror=")
    expect(args).to_contain_text("</script><script>window.__xss='script'</script>")
    expect(page.locator("#job-output")).to_contain_text("<img src=x")
    expect(page.locator("pre.json").last).to_contain_text("<b>bold</b>")
    expect(page.locator("pre.log")).to_contain_text("rendering <i>page</i>\nwrote 3 files")
    assert page.locator("main img").count() == 0
    assert page.locator("main b").count() == 0
    assert page.locator("main i").count() == 0
    assert page.evaluate("window.__xss") is None
    page.goto(f"{base}/jobs?state=completed&kind=render_page")
    expect(page.locator("td.args")).to_contain_text("<img src=x")
    assert page.locator("main img").count() == 0
    assert page.evaluate("window.__xss") is None
    _shot(page, seeded, "escaping")


@same_on_every_database
def test_read_only_hides_every_action(seeded: SeededDb, serve: Any, page: Any) -> None:
    base = _open(seeded, serve, read_only=True)
    for path in ("/", "/jobs?state=discarded", f"/jobs/{seeded.jobs.discarded[0]}"):
        page.goto(base + path)
        expect(page.locator(".badge.ro")).to_have_text("read-only")
        assert page.locator("main form[method=post] button").count() == 0
        assert page.locator("input.pick").count() == 0


@same_on_every_database
def test_cannot_be_framed_or_reached_by_a_rebound_name(
    seeded: SeededDb, serve: Any, page: Any, browser: Any
) -> None:
    """Another site's page cannot show the dashboard in a frame, and a browser whose DNS
    resolves rebind.evil.example to 127.0.0.1 (DNS rebinding) gets a refusal, not a page
    from which its script could post actions."""
    base = _open(seeded, serve)
    port = base.rsplit(":", 1)[1]
    other = serve(_FramingPage(base + "/")).url
    page.goto(other + "/")
    frame = page.frame_locator("iframe#dash")
    expect(page.locator("iframe#dash")).to_be_attached()
    # The framed document never becomes the dashboard (chromium shows its error page).
    page.wait_for_load_state("load")
    framed = [f.url for f in page.frames if f != page.main_frame]
    assert framed == ["chrome-error://chromewebdata/"], framed
    assert frame.locator("[data-state]").count() == 0

    rebinding = browser.browser_type.launch(
        executable_path=_chromium(),
        args=[
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--host-resolver-rules=MAP rebind.evil.example 127.0.0.1",
        ],
    )
    try:
        evil = rebinding.new_page()
        response = evil.goto(f"http://rebind.evil.example:{port}/")
        assert response is not None and response.status == 400
        expect(evil.locator("body")).to_contain_text("refused a request for host")
        assert evil.locator("form").count() == 0
        # The same server answers its own name.
        response = evil.goto(f"http://127.0.0.1:{port}/")
        assert response is not None and response.status == 200
    finally:
        rebinding.close()


class _FramingPage:
    """An ASGI app on another origin (port) whose page frames the dashboard."""

    def __init__(self, target: str) -> None:
        self.body = f'<html><body><iframe id="dash" src="{target}"></iframe></body></html>'

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].rsplit(".", 1)[1]  # startup / shutdown
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/html")],
            }
        )
        await send({"type": "http.response.body", "body": self.body.encode()})


def test_failed_jobs_show_their_last_error_and_search_finds_jobs(
    seeded: SeededDb, serve: Any, page: Any
) -> None:
    base = _open(seeded, serve)
    for state in ("discarded", "all"):
        page.goto(f"{base}/jobs?state={state}&kind=charge_card")
        errors = page.locator("table.jobs td.lasterr")
        expect(errors).to_have_count(3)
        for i in range(3):
            expect(errors.nth(i)).to_contain_text("ChargeDeclined: card for order 10")
            expect(errors.nth(i)).to_contain_text("was declined")

    # The "all" tab lists every state, with a state column.
    page.goto(base + "/jobs?state=all")
    expect(page.locator('#state-tabs a[data-tab="all"]')).to_have_class(re.compile(r"\bon\b"))
    expect(page.locator("table.jobs tbody tr .badge.s-scheduled")).to_have_count(1)
    # Search: a number is a job id (whatever its state), text is looked for in the args.
    page.fill('input[name="q"]', str(seeded.jobs.scheduled[0]))
    page.click("form.filters button")
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".kind")).to_have_text("daily_report")
    page.fill('input[name="q"]', "USER2@example")
    page.click("form.filters button")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td.args")).to_contain_text("user2@example.com")
    page.fill('input[name="q"]', '"ORDER"')  # any case; the quotes are part of the text
    page.click("form.filters button")
    expect(rows).to_have_count(3)
    expect(rows.first).to_have_attribute("data-job", str(seeded.jobs.discarded[-1]))


def test_bulk_action_on_everything_a_filter_matches(
    seeded: SeededDb, serve: Any, page: Any
) -> None:
    """More than one page (60 completed media jobs, 50 a page): "Retry all…" says how
    many, and the confirmed action reaches every one of them."""
    base = _open(seeded, serve)
    page.goto(base + "/jobs?state=completed&queue=media")
    expect(page.locator("table.jobs tbody tr")).to_have_count(50)
    page.click("#all-retry")
    expect(page.locator("#confirm-count")).to_have_text(f"{MEDIA_COMPLETED} jobs will be retried.")
    expect(page.locator("#confirm")).to_contain_text("state completed, queue media")
    _shot(page, seeded, "confirm")
    page.click("#confirm-go")
    expect(page.locator(".flash.ok")).to_have_text(
        f"{MEDIA_COMPLETED} jobs retried (state completed, queue media)"
    )
    expect(page.locator("p.empty")).to_be_visible()
    client = seeded.client()
    try:
        assert client.job_count_matching(queues=["media"], states=["available"]) == MEDIA_COMPLETED
    finally:
        client.driver.close()

    # Nothing to act on: the confirmation says so and offers no button.
    page.goto(base + "/jobs/confirm?action=cancel&state=completed&queue=media")
    expect(page.locator("#confirm-count")).to_have_text("0 jobs will be cancelled.")
    assert page.locator("#confirm-go").count() == 0
    # Cancel leaves finalized jobs alone and says how many of the matching ones that is.
    page.goto(base + "/jobs/confirm?action=cancel&state=all&kind=charge_card")
    expect(page.locator("#confirm")).to_contain_text("3 jobs match")
    expect(page.locator("#confirm")).to_contain_text("cancel leaves the other 3 alone")


def test_overview_shows_latency_throughput_and_what_runs(
    seeded: SeededDb, serve: Any, page: Any
) -> None:
    client = seeded.client()
    try:
        running = seeded.jobs.available[0]
        assert client.driver.fetch(client.driver.dialect.job_set_running(running, "w1"))
        client.queue_pause("default")
    finally:
        client.driver.close()
    page.goto(_open(seeded, serve) + "/")
    email = page.locator('tr[data-queue="email"]')
    expect(email.locator("td.activity")).to_contain_text("1 running")
    expect(email.locator("td.latency")).not_to_have_text("\u2013")
    media = page.locator('tr[data-queue="media"]')
    expect(media.locator('td.tp[data-window="1h"]')).to_have_text(str(MEDIA_COMPLETED))
    expect(media.locator('td.tp[data-window="7d"]')).to_have_text(str(MEDIA_COMPLETED))
    expect(media.locator("td.latency")).to_have_text("\u2013")
    # A paused queue with no worker: paused, nothing running (never "seen 0s ago").
    default = page.locator('tr[data-queue="default"]')
    expect(default.locator(".badge")).to_have_text("paused")
    expect(default.locator("td.activity")).to_contain_text("nothing running")
    expect(default.locator('td.tp[data-window="24h"]')).to_contain_text("/ 3")  # discarded


@same_on_every_database
def test_dark_mode_and_phone_width(seeded: SeededDb, serve: Any, browser: Any) -> None:
    base = _open(seeded, serve)
    context = browser.new_context(color_scheme="dark", viewport={"width": 1280, "height": 860})
    try:
        dark = context.new_page()
        dark.goto(base + "/")
        background = dark.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(11, 17, 32)", background
        _shot(dark, seeded, "dark")
    finally:
        context.close()

    context = browser.new_context(viewport={"width": 420, "height": 900})
    try:
        phone = context.new_page()
        phone.goto(base + "/jobs?state=completed&queue=media")
        args = phone.locator("table.jobs td.args").first
        box = args.bounding_box()
        assert box is not None and box["width"] >= 120, box  # not one character per line
        line_height = float(args.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)"))
        assert box["height"] < line_height * 6, (box, line_height)
        # The page itself does not scroll sideways: the table does, inside its box.
        assert phone.evaluate("document.documentElement.scrollWidth") <= 420
        _shot(phone, seeded, "phone", full_page=False)
        phone.goto(base + "/")
        assert phone.evaluate("document.documentElement.scrollWidth") <= 420
    finally:
        context.close()
