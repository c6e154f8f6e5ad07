"""The dashboard's HTTP rules, without a browser: actions need the CSRF token and our
origin, read-only refuses them, a token guards every page, bad input is a 4xx page."""

from __future__ import annotations

import base64
import html
import http.client
import json
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

import riverboat
from riverboat import InsertOpts, InvalidInputError
from riverboat.ui import create_app
from tests.runtime.dbs import Db
from tests.ui.conftest import SeededDb
from tests.ui.seed import XSS_ARGS


class Http:
    """A tiny client that keeps the cookies it is given and never follows redirects;
    ``flash`` and ``flash_kind``: the message the last response left for the next page
    (its riverboat_flash cookie), if it set one."""

    def __init__(self, base: str, headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(base)
        self.host, self.port = parts.hostname or "", parts.port or 80
        self.cookies: dict[str, str] = {}
        self.headers = headers or {}
        self.flash: str | None = None
        self.flash_kind: str | None = None

    @property
    def cookie(self) -> str:
        return "; ".join(f"{name}={value}" for name, value in self.cookies.items())

    @cookie.setter
    def cookie(self, header: str) -> None:
        """Replace every cookie with the one of ``header`` (``name=value``)."""
        name, _, value = header.partition("=")
        self.cookies = {name: value}

    def _keep(self, set_cookie: str) -> None:
        name, _, rest = set_cookie.partition("=")
        value = rest.split(";", 1)[0]
        if "max-age=0" in set_cookie.lower():
            self.cookies.pop(name, None)
            return
        self.cookies[name] = value
        if name == "riverboat_flash":
            fields = parse_qs(value.strip('"'))
            self.flash = fields["msg"][0]
            self.flash_kind = fields["kind"][0]

    def request(
        self, method: str, path: str, body: dict[str, str] | None = None, **headers: str
    ) -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        sent = dict(self.headers)
        if self.cookie:
            sent["Cookie"] = self.cookie
        data = None
        if body is not None:
            data = urlencode(body)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        sent.update({k.replace("_", "-"): v for k, v in headers.items()})
        conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        text = response.read().decode()
        got = {k.lower(): v for k, v in response.getheaders()}
        self.flash = self.flash_kind = None
        for name, value in response.getheaders():
            if name.lower() == "set-cookie":
                self._keep(value)
        conn.close()
        return response.status, got, text

    def csrf(self, path: str = "/") -> str:
        status, _, text = self.request("GET", path)
        assert status == 200
        found = re.search(r'name="csrf" value="([^"]+)"', text)
        assert found, "no CSRF field in the page"
        return found.group(1)


def _paused(seeded: SeededDb, queue: str) -> bool:
    client = seeded.client()
    try:
        return bool(client.queue_get(queue).paused)
    finally:
        client.driver.close()


def test_actions_need_the_csrf_token_and_our_origin(seeded: SeededDb, serve: Any) -> None:
    base = serve(create_app(seeded.url, schema=seeded.schema)).url
    stranger = Http(base)
    for path in ("/queues/email/pause", "/workflows/wf_any/cancel", "/workflow/cancel?id=wf_any"):
        status, _, text = stranger.request("POST", path, {"csrf": "x" * 43})
        assert status == 403 and "CSRF token" in text, path

    browser = Http(base)
    token = browser.csrf()
    assert browser.cookie.startswith("riverboat_csrf=")
    status, _, _ = browser.request("POST", "/queues/email/pause", {"csrf": "y" * 43})
    assert status == 403
    status, _, text = browser.request(
        "POST", "/queues/email/pause", {"csrf": token}, Origin="http://evil.example"
    )
    assert status == 403 and "another origin" in text
    # A page on another port of this host (cookies ignore ports) can set the cookie to
    # a value of its own and post it: after its cross-origin redirect the browser says
    # Origin: null, and Sec-Fetch-Site says the request is not this origin's.
    tossed = Http(base)
    tossed.cookie = "riverboat_csrf=" + "A" * 43
    for headers in ({"Origin": "null"}, {"Sec_Fetch_Site": "same-site"}):
        status, _, text = tossed.request(
            "POST", "/queues/email/pause", {"csrf": "A" * 43}, **headers
        )
        assert status == 403 and "refused a request from another" in text, headers
    assert not _paused(seeded, "email")

    status, headers, _ = browser.request(
        "POST", "/queues/email/pause", {"csrf": token}, Origin=base, Sec_Fetch_Site="same-origin"
    )
    assert status == 303 and headers["location"] == "/"
    assert browser.flash == "queue email paused" and browser.flash_kind == "ok"
    assert _paused(seeded, "email")
    # "back" only ever points inside the app.
    status, headers, _ = browser.request(
        "POST", "/queues/email/resume?back=//evil.example/x", {"csrf": token}
    )
    assert status == 303 and headers["location"] == "/" and browser.flash is not None


def test_a_link_cannot_put_words_in_the_dashboard(seeded: SeededDb, serve: Any) -> None:
    """An action's message reaches the next page in a cookie the app sets, shown once;
    text in a link's query string (the old ?msg=) shows nothing."""
    browser = Http(serve(create_app(seeded.url, schema=seeded.schema)).url)
    spoof = "Your session expired: sign in again at evil.example"
    status, _, page = browser.request("GET", "/?" + urlencode({"msg": spoof, "msgkind": "error"}))
    assert status == 200 and "evil.example" not in page and 'class="flash' not in page
    token = browser.csrf()
    status, headers, _ = browser.request("POST", "/queues/email/pause", {"csrf": token})
    assert status == 303 and browser.flash == "queue email paused"
    status, _, page = browser.request("GET", headers["location"])
    assert status == 200 and "queue email paused" in page
    # Shown once: the page cleared it.
    assert "riverboat_flash" not in browser.cookies
    status, _, page = browser.request("GET", "/")
    assert status == 200 and "queue email paused" not in page
    # Nor can a cookie written by someone else (a sibling subdomain may set one for the
    # host): only messages this app signed are shown, and a signed one edited is not.
    forged = urlencode({"msg": spoof, "kind": "error"})
    browser.cookies["riverboat_flash"] = forged
    status, _, page = browser.request("GET", "/")
    assert status == 200 and "evil.example" not in page and 'class="flash' not in page
    status, headers, _ = browser.request("POST", "/queues/email/resume", {"csrf": token})
    signed = browser.cookies["riverboat_flash"]
    browser.cookies["riverboat_flash"] = signed.replace("resumed", "deleted")
    assert browser.cookies["riverboat_flash"] != signed
    status, _, page = browser.request("GET", "/")
    assert status == 200 and "queue email" not in page
    browser.cookies["riverboat_flash"] = signed
    status, _, page = browser.request("GET", "/")
    assert status == 200 and "queue email resumed" in page
    # A signature past ASCII (compare_digest refuses such text: every page was a 500).
    browser.cookies["riverboat_flash"] = urlencode({"msg": "x", "kind": "ok", "sig": "é"})
    status, _, page = browser.request("GET", "/")
    assert status == 200 and 'class="flash' not in page


def test_a_long_message_still_fits_its_cookie() -> None:
    """Browsers drop a cookie past 4 KB, and text outside ASCII takes up to 9 bytes a
    character once encoded: a long message is cut to fit, not lost."""
    from starlette.requests import Request

    from riverboat.ui.app import FLASH_MAX_BYTES, _Flash

    request = Request({"type": "http", "method": "POST", "root_path": "/riverboat", "headers": []})
    message = "重試" * 1000
    flash = _Flash()
    response = flash.redirect(request, "/riverboat/jobs", message, "error")
    cookie = response.headers["set-cookie"]
    value = cookie.split(";", 1)[0].split("=", 1)[1].strip('"')
    assert len(value) <= FLASH_MAX_BYTES
    shown = parse_qs(value)["msg"][0]
    assert message.startswith(shown[:-1]) and shown.endswith("…") and len(shown) > 100
    # The message as cut is the one signed: the next page shows it.
    page = Request({"type": "http", "headers": [(b"cookie", f"riverboat_flash={value}".encode())]})
    assert flash.read(page) == (shown, "error")
    # The dashboard's own path: another one mounted on the same host doesn't see it.
    assert "Path=/riverboat" in cookie


def test_read_only_refuses_every_action(seeded: SeededDb, serve: Any) -> None:
    base = serve(create_app(seeded.url, schema=seeded.schema, read_only=True)).url
    browser = Http(base)
    status, _, page = browser.request("GET", "/")
    assert status == 200 and 'name="csrf"' not in page.split("<main>", 1)[1].split("</h1>")[0]
    browser.cookie = "riverboat_csrf=" + "z" * 43
    job = seeded.jobs.discarded[0]
    for path in (
        "/queues/email/pause",
        f"/jobs/{job}/retry",
        f"/jobs/{job}/delete",
        "/jobs/bulk",
        "/jobs/bulk-filter",
        "/workflows/wf_any/retry",
        "/workflows/wf_any/cancel",
        "/workflow/retry?id=wf_any",
        "/workflow/cancel?id=wf_any",
    ):
        status, _, text = browser.request(
            "POST", path, {"csrf": "z" * 43, "action": "delete", "job": str(job)}
        )
        assert status == 403 and "read-only" in text, path
    assert not _paused(seeded, "email")
    client = seeded.client()
    try:
        assert client.job_get(job).state == "discarded"
    finally:
        client.driver.close()
    status, _, text = browser.request("GET", "/jobs/confirm?action=delete&state=discarded")
    assert status == 403 and "read-only" in text


def test_bulk_by_filter_needs_the_token_and_our_host(seeded: SeededDb, serve: Any) -> None:
    base = serve(create_app(seeded.url, schema=seeded.schema)).url
    browser = Http(base)
    token = browser.csrf()
    form = {"action": "delete", "state": "discarded"}
    status, _, text = browser.request("POST", "/jobs/bulk-filter", {**form, "csrf": "x" * 43})
    assert status == 403 and "CSRF token" in text
    status, _, text = browser.request(
        "POST", "/jobs/bulk-filter", {**form, "csrf": token}, Host="rebind.evil.example"
    )
    assert status == 400
    status, _, text = browser.request(
        "POST", "/jobs/bulk-filter", {**form, "state": "bogus", "csrf": token}
    )
    assert status == 400 and "is not a job state" in text
    client = seeded.client()
    try:
        assert client.job_count_matching(states=["discarded"]) == 3
    finally:
        client.driver.close()
    status, _, _ = browser.request("POST", "/jobs/bulk-filter", {**form, "csrf": token})
    assert status == 303 and browser.flash is not None and "3 jobs deleted" in browser.flash
    client = seeded.client()
    try:
        assert client.job_count_matching(states=["discarded"]) == 0
    finally:
        client.driver.close()


def test_token_guards_every_page(seeded: SeededDb, serve: Any) -> None:
    base = serve(create_app(seeded.url, schema=seeded.schema, token="s3cret-token")).url
    for path in ("/", "/jobs", f"/jobs/{seeded.jobs.xss}", "/static/htmx.min.js"):
        status, headers, _ = Http(base).request("GET", path)
        assert status == 401 and headers["www-authenticate"].startswith("Basic"), path
    assert Http(base, {"Authorization": "Bearer s3cret-token"}).request("GET", "/")[0] == 200
    assert Http(base, {"Authorization": "Bearer wrong"}).request("GET", "/")[0] == 401
    basic = base64.b64encode(b"anyone:s3cret-token").decode()
    assert Http(base, {"Authorization": f"Basic {basic}"}).request("GET", "/")[0] == 200
    bad = base64.b64encode(b"anyone:nope").decode()
    assert Http(base, {"Authorization": f"Basic {bad}"}).request("GET", "/")[0] == 401
    assert Http(base, {"Authorization": "Basic !!!"}).request("GET", "/")[0] == 401


def _status_with_bearer(base: str, token: bytes) -> int:
    """GET / with ``Authorization: Bearer`` and the token's bytes as they are."""
    conn = http.client.HTTPConnection(urlsplit(base).netloc, timeout=10)
    try:
        conn.putrequest("GET", "/")
        conn.putheader("Authorization", b"Bearer " + token)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_token_past_ascii_works_as_bearer_and_basic(seeded: SeededDb, serve: Any) -> None:
    """The header arrives as bytes; a UTF-8 token sent as sent must match (the ASGI
    server hands it over decoded as latin-1)."""
    token = "pässwörd-✓"
    base = serve(create_app(seeded.url, schema=seeded.schema, token=token)).url
    raw = token.encode()
    assert _status_with_bearer(base, raw) == 200
    basic = base64.b64encode(b"anyone:" + raw).decode()
    assert Http(base, {"Authorization": f"Basic {basic}"}).request("GET", "/")[0] == 200
    assert _status_with_bearer(base, "passwörd-✓".encode()) == 401


def _execute(seeded: SeededDb, statement: str, *params: Any) -> None:
    """One statement (``?`` placeholders) on the seeded database, as another client."""
    if seeded.name == "postgres":
        import psycopg

        with psycopg.connect(seeded.url, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{seeded.schema}"')
            conn.execute(statement.replace("?", "%s"), params)
    else:
        from riverboat.drivers._sqlite_module import sqlite_module

        conn = sqlite_module().connect(seeded.url.removeprefix("sqlite:///"))
        with conn:
            conn.execute(statement, params)
        conn.close()


def _write_errors(seeded: SeededDb, job_id: int, errors: list[str]) -> None:
    """Store ``errors`` (JSON texts) as the job's error entries, as another client can."""
    if seeded.name == "postgres":
        import psycopg

        with psycopg.connect(seeded.url, autocommit=True) as conn:
            conn.execute(
                f'UPDATE "{seeded.schema}".river_job SET errors = %s::jsonb[] WHERE id = %s',
                (errors, job_id),
            )
    else:
        from riverboat.drivers._sqlite_module import sqlite_module

        # River's SQLite rows keep each entry as its JSON text.
        conn = sqlite_module().connect(seeded.url.removeprefix("sqlite:///"))
        with conn:
            conn.execute(
                "UPDATE river_job SET errors = jsonb(?) WHERE id = ?",
                (json.dumps(errors), job_id),
            )
        conn.close()


def test_a_job_page_with_odd_error_entries(seeded: SeededDb, serve: Any) -> None:
    """Error entries another client wrote without a readable time: the page shows them,
    their time as "-"."""
    with seeded.client() as client:
        job = client.insert({}, kind="odd_errors").job
    errors = ["{}", '"a string"', "null", '{"at": "yesterday", "attempt": 2, "error": "boom"}']
    _write_errors(seeded, job.id, errors)
    status, _, text = Http(serve(create_app(seeded.url, schema=seeded.schema)).url).request(
        "GET", f"/jobs/{job.id}"
    )
    assert status == 200, text[-600:]
    assert "boom" in text and "a string" in text


def test_a_job_page_cuts_megabytes_of_errors(seeded: SeededDb, serve: Any) -> None:
    """Go River stores errors and traces uncut, one entry per attempt: the page (which
    refreshes itself) shows the newest attempts' errors, each cut, and says so."""
    from riverboat.ui.app import SHOW_ERROR_MAX, SHOW_ERRORS_MAX

    with seeded.client() as client:
        job = client.insert({}, kind="loud_errors").job
    entry = {"at": "2026-01-01T00:00:00Z", "error": "e" * 500_000, "trace": "t" * 500_000}
    attempts = SHOW_ERRORS_MAX + 3
    _write_errors(
        seeded, job.id, [json.dumps({**entry, "attempt": n}) for n in range(1, attempts + 1)]
    )
    status, _, text = Http(serve(create_app(seeded.url, schema=seeded.schema)).url).request(
        "GET", f"/jobs/{job.id}"
    )
    assert status == 200
    assert len(text) < 2 * SHOW_ERRORS_MAX * SHOW_ERROR_MAX + 100_000
    assert f'Errors <span class="muted">({attempts})</span>' in text
    assert "3 older attempts not shown" in text
    assert (
        f"<strong>Attempt {attempts}</strong>" in text and "<strong>Attempt 3</strong>" not in text
    )
    assert "more characters not shown" in text


def test_a_job_page_with_a_workflow_id_that_is_not_text(seeded: SeededDb, serve: Any) -> None:
    """Metadata is any client's to write: a workflow id that is a list is shown as
    metadata, without the workflow link (its urlencode failed the page with a 500)."""
    with seeded.client() as client:
        job = client.insert(
            {}, InsertOpts(metadata={"riverboat_workflow": {"id": ["x"]}}), kind="odd_meta"
        )
    status, _, text = Http(serve(create_app(seeded.url, schema=seeded.schema)).url).request(
        "GET", f"/jobs/{job.job.id}"
    )
    assert status == 200, text[-600:]
    assert 'id="job-workflow"' not in text


_NESTED_CURSOR = base64.urlsafe_b64encode(b"[" * 5000).decode().rstrip("=")


def test_bad_input_is_a_page_not_a_500(seeded: SeededDb, serve: Any) -> None:
    base = serve(create_app(seeded.url, schema=seeded.schema)).url
    browser = Http(base)
    for path, status_wanted, text_wanted in (
        ("/jobs?state=nope", 400, "is not a job state"),
        ("/jobs?state=available&priority=9", 400, "must be from 1 to 4"),
        ("/jobs?state=available&kind=%00", 400, "NUL"),
        ("/jobs?state=available&queue=Not%20A%20Queue", 400, "queue"),
        ("/jobs?state=available&cursor=%%%", 400, "cursor"),
        # Nested arrays past json.loads' recursion limit (was a 500).
        (f"/jobs?state=available&cursor={_NESTED_CURSOR}", 400, "cursor"),
        ("/jobs/99999999999999999999", 404, "is not a job id"),
        ("/jobs/424242", 404, "not found"),
        # Digits str.isdigit() accepts and int() refuses ("²"), and a NUL in a workflow id.
        ("/jobs/%C2%B2", 404, "is not a job id"),
        ("/jobs?state=available&q=%C2%B2", 200, "match these filters"),
        # A number past int64 in the search box is text to look for (was a 400).
        ("/jobs?state=available&q=9999999999999999999", 200, "match these filters"),
        ("/jobs/9999999999999999999", 404, "is not a job id"),
        ("/workflows/%00", 404, "not found"),
    ):
        status, _, text = browser.request("GET", path)
        assert status == status_wanted and text_wanted in text, (path, status, text[-600:])
    token = browser.csrf()
    status, _, text = browser.request("POST", "/jobs/bulk", {"csrf": token, "action": "explode"})
    assert status == 400 and "is not a job action" in text
    status, _, _ = browser.request("POST", "/jobs/bulk", {"csrf": token, "action": "retry"})
    assert status == 303 and browser.flash == "no job selected"
    status, _, _ = browser.request("POST", "/queues/nope/pause", {"csrf": token})
    assert status == 303 and browser.flash is not None and "not found" in browser.flash


def test_create_app_checks_its_arguments() -> None:
    with pytest.raises(InvalidInputError, match="either database_url or client"):
        create_app()
    with pytest.raises(InvalidInputError, match="token"):
        create_app("sqlite:///x.sqlite3", token="")


def test_mounted_under_a_prefix(seeded: SeededDb, serve: Any) -> None:
    """Mounted in another ASGI app, links, static files and redirects keep the prefix."""
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.routing import Mount

    dashboard = create_app(seeded.url, schema=seeded.schema)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await dashboard.aclose()

    outer = Starlette(routes=[Mount("/riverboat", dashboard)], lifespan=lifespan)
    browser = Http(serve(outer).url)
    status, _, page = browser.request("GET", "/riverboat/")
    assert status == 200
    assert 'href="/riverboat/jobs"' in page and 'src="/riverboat/static/htmx.min.js"' in page
    assert browser.request("GET", "/riverboat/static/htmx.min.js")[0] == 200
    token = browser.csrf("/riverboat/")
    status, headers, _ = browser.request("POST", "/riverboat/queues/email/pause", {"csrf": token})
    assert status == 303 and headers["location"] == "/riverboat/" and browser.flash
    job = seeded.jobs.discarded[0]
    status, _, page = browser.request("GET", f"/riverboat/jobs/{job}")
    action = re.search(r'action="([^"]+/retry[^"]*)"', page)
    assert status == 200 and action is not None
    path = action.group(1).replace("&amp;", "&")
    status, headers, _ = browser.request("POST", path, {"csrf": token})
    assert status == 303 and headers["location"].startswith(f"/riverboat/jobs/{job}")
    assert browser.flash is not None and "msg=" not in headers["location"]


def test_an_action_that_changes_nothing_says_so(seeded: SeededDb, serve: Any) -> None:
    browser = Http(serve(create_app(seeded.url, schema=seeded.schema)).url)
    token = browser.csrf()
    done = seeded.jobs.completed[0]
    status, _, _ = browser.request("POST", f"/jobs/{done}/cancel", {"csrf": token})
    assert status == 303 and browser.flash is not None and "already completed" in browser.flash
    assert browser.flash_kind == "error"

    def message(path: str, form: dict[str, str] | list[tuple[str, str]]) -> str:
        body = urlencode(form)
        conn = http.client.HTTPConnection(browser.host, browser.port, timeout=10)
        headers = {"Cookie": browser.cookie, "Content-Type": "application/x-www-form-urlencoded"}
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        assert response.status == 303
        flash = next(v for k, v in response.getheaders() if v.startswith("riverboat_flash="))
        conn.close()
        value = flash.split(";", 1)[0].split("=", 1)[1]
        return parse_qs(value.strip('"'))["msg"][0]

    # Each used to say it acted: "job N retried", "job N cancelled", "3 jobs cancelled".
    due = seeded.jobs.available[0]
    said = message(f"/jobs/{due}/retry", {"csrf": token})
    assert said.startswith(f"job {due} is available and due already; nothing to retry"), said
    assert message(f"/jobs/{due}/cancel", {"csrf": token}).startswith(f"job {due} cancelled")
    said = message(f"/jobs/{due}/cancel", {"csrf": token})
    assert said.startswith(f"job {due} is already cancelled; nothing to cancel"), said
    said = message(
        "/jobs/bulk",
        [("csrf", token), ("action", "cancel")] + [("job", str(done))] * 3 + [("job", f"0{done}")],
    )
    assert said.startswith("0 jobs cancelled; ") and said.count("already completed") == 1, said
    # River's '*' is every queue: said so, not "queue * paused".
    assert message("/queues/*/pause", {"csrf": token}) == "every queue paused"
    assert message("/queues/*/resume", {"csrf": token}) == "every queue resumed"
    # A running job is cancelled by its worker, asked: the row stays running until then.
    running = seeded.jobs.available[1]
    _execute(seeded, "UPDATE river_job SET state = 'running', attempt = 1 WHERE id = ?", running)
    said = message(f"/jobs/{running}/cancel", {"csrf": token})
    assert said.startswith(f"cancel requested for job {running}: it is running"), said


def test_unknown_host_is_refused_even_for_a_valid_action(seeded: SeededDb, serve: Any) -> None:
    """DNS rebinding: a page of rebind.evil.example, its name now resolving to 127.0.0.1,
    makes the browser send requests with that Host. Pages and actions are refused (400)
    before anything is read or written; localhost names are served."""
    base = serve(create_app(seeded.url, schema=seeded.schema)).url
    port = urlsplit(base).port
    browser = Http(base)
    token = browser.csrf()
    for host in (
        "rebind.evil.example",
        f"rebind.evil.example:{port}",
        "",
        "127.0.0.1.evil.example",
    ):
        status, headers, text = browser.request("GET", "/", Host=host)
        assert status == 400 and "refused a request for host" in text, host
        assert headers["x-frame-options"] == "DENY"
    # A same-origin POST (the rebound page's own origin) with a valid token: refused.
    evil = f"http://rebind.evil.example:{port}"
    status, _, text = browser.request(
        "POST", "/queues/email/pause", {"csrf": token}, Host=evil[7:], Origin=evil
    )
    assert status == 400 and "refused a request for host" in text
    assert not _paused(seeded, "email")
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "LOCALHOST", f"app.localhost:{port}"):
        assert browser.request("GET", "/", Host=host)[0] == 200, host


def test_allowed_hosts_option(seeded: SeededDb, serve: Any) -> None:
    app = create_app(seeded.url, schema=seeded.schema, allowed_hosts=["jobs.example.com", ".corp"])
    browser = Http(serve(app).url)
    assert browser.request("GET", "/", Host="jobs.example.com:8443")[0] == 200
    assert browser.request("GET", "/", Host="ops.corp")[0] == 200
    assert browser.request("GET", "/", Host="corp")[0] == 200
    assert browser.request("GET", "/", Host="localhost")[0] == 400  # replaced, not added
    assert browser.request("GET", "/", Host="example.com")[0] == 400
    with pytest.raises(InvalidInputError, match="allowed_hosts"):
        create_app(seeded.url, allowed_hosts="localhost")
    with pytest.raises(InvalidInputError, match="allowed_hosts"):
        create_app(seeded.url, allowed_hosts=[])


def test_every_response_forbids_framing_and_sniffing(seeded: SeededDb, serve: Any) -> None:
    base = serve(create_app(seeded.url, schema=seeded.schema)).url
    browser = Http(base)
    token = browser.csrf()
    for method, path, body in (
        ("GET", "/", None),
        ("GET", "/jobs?state=discarded", None),
        ("GET", f"/jobs/{seeded.jobs.discarded[0]}", None),
        ("GET", "/jobs/424242", None),
        ("GET", "/static/style.css", None),
        ("POST", "/queues/email/pause", {"csrf": token}),
    ):
        status, headers, _ = browser.request(method, path, body)
        assert status in (200, 303, 404), path
        assert headers["x-frame-options"] == "DENY", path
        assert headers["x-content-type-options"] == "nosniff", path
        assert "frame-ancestors 'none'" in headers["content-security-policy"], path
    protected = Http(serve(create_app(seeded.url, schema=seeded.schema, token="t0ken")).url)
    status, headers, _ = protected.request("GET", "/")
    assert status == 401 and headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize(
    ("existing", "sent_policy"),
    [
        (b"default-src 'self';", b"default-src 'self'; frame-ancestors 'none'; script-src 'self'"),
        (
            b"script-src 'self' https://cdn.example",
            b"script-src 'self' https://cdn.example; frame-ancestors 'none'",
        ),
    ],
)
def test_an_existing_policy_keeps_its_directives(existing: bytes, sent_policy: bytes) -> None:
    import asyncio

    from riverboat.ui.app import _SecurityHeadersMiddleware

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-security-policy", existing)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request"}

    asyncio.run(_SecurityHeadersMiddleware(inner)({"type": "http"}, receive, send))
    headers = dict(sent[0]["headers"])
    assert headers[b"content-security-policy"] == sent_policy
    assert headers[b"x-frame-options"] == b"DENY"


def test_a_job_with_megabytes_of_args_is_previewed_without_decoding(
    seeded: SeededDb, serve: Any
) -> None:
    """The list previews 90 characters of each job's args: args past 16 KiB are cut from
    their stored text (Go's escapes of <, > and & undone), not decoded and re-encoded
    whole at every refresh."""
    from riverboat.dialect._rows import PREVIEW_ARGS_MAX

    with seeded.client() as client:
        big = client.insert({"a": "<b>", "blob": "y" * (4 * PREVIEW_ARGS_MAX)}, kind="big_args").job
    assert len(big.encoded_args) > PREVIEW_ARGS_MAX
    status, _, text = Http(serve(create_app(seeded.url, schema=seeded.schema)).url).request(
        "GET", "/jobs?state=available&kind=big_args"
    )
    assert status == 200
    preview = re.search(r'<td class="args"><code>([^<]*)</code>', text)
    assert preview is not None
    shown = html.unescape(preview.group(1))  # Postgres's jsonb text has spaces, SQLite's not
    assert re.fullmatch(r'\{"a": ?"<b>", ?"blob": ?"y+…', shown) and len(shown) == 90, shown


def test_a_job_page_shows_stored_markup_as_text(seeded: SeededDb, serve: Any) -> None:
    """The seeded job whose args, output, metadata and log hold markup and a closing
    script tag, on both databases (the browser checks it on SQLite): each block has it
    escaped, and none of it reaches the page as markup."""
    base = serve(create_app(seeded.url, schema=seeded.schema)).url
    status, _, text = Http(base).request("GET", f"/jobs/{seeded.jobs.xss}")
    assert status == 200
    for raw in (*XSS_ARGS.values(), "<b>bold</b>", "rendering <i>page</i>"):
        assert raw not in text, raw
    # As text: the args and the output (the same object), the metadata's title, the log.
    unescaped = html.unescape(text)
    for value in (*XSS_ARGS.values(), "<b>bold</b>"):  # in the JSON blocks
        assert json.dumps(value) in unescaped, value
    assert "rendering <i>page</i>\nwrote 3 files" in unescaped  # the log, as written
    assert text.count("&lt;/script&gt;&lt;script&gt;") >= 2  # the args and the output


def test_a_job_page_shows_at_most_64_kib_of_each_json_block(seeded: SeededDb, serve: Any) -> None:
    """The page refreshes itself every few seconds: a job with megabytes of args or
    output sent them all, indented, at every refresh. Each block is cut, and says
    where to read the rest."""
    from riverboat.ui.app import SHOW_JSON_MAX

    with seeded.client() as client:
        job = client.insert({"blob": "y" * (3 * SHOW_JSON_MAX)}, kind="big_args").job
        client.job_update(job.id, metadata={"note": "z" * (3 * SHOW_JSON_MAX)})
    status, _, text = Http(serve(create_app(seeded.url, schema=seeded.schema)).url).request(
        "GET", f"/jobs/{job.id}"
    )
    assert status == 200
    for block in ("job-args", "job-metadata"):
        shown = re.search(rf'<pre class="json" id="{block}">([^<]*)</pre>', text)
        assert shown is not None, block
        body = html.unescape(shown.group(1))
        assert len(body) < SHOW_JSON_MAX + 200, block
        assert body.endswith(f"`riverboat jobs get {job.id} --json` prints them all)"), block
    assert len(text) < 4 * SHOW_JSON_MAX


def test_a_job_page_shows_output_and_logs_once(seeded: SeededDb, serve: Any) -> None:
    """The output and the logs have blocks of their own; the metadata block names them
    instead of formatting (maybe megabytes of) them a second time at every refresh."""
    from riverboat.ui.app import SHOW_JSON_MAX

    with seeded.client() as client:
        job = client.insert({}, kind="with_output").job
        client.job_update(
            job.id,
            metadata={
                "output": {"a": "output-marker", "blob": "o" * (2 * SHOW_JSON_MAX)},
                "river:log": [{"attempt": 1, "log": "log-marker"}],
                "note": "kept",
            },
        )
    status, _, text = Http(serve(create_app(seeded.url, schema=seeded.schema)).url).request(
        "GET", f"/jobs/{job.id}"
    )
    assert status == 200
    blocks = dict(re.findall(r'<pre class="json" id="(job-\w+)">([^<]*)</pre>', text))
    metadata = json.loads(html.unescape(blocks["job-metadata"]))
    assert metadata == {
        "note": "kept",
        "output": "(shown above, under Output)",
        "river:log": "(shown above, under Logs)",
    }
    assert html.unescape(blocks["job-output"]).startswith('{\n  "a": "output-marker"')
    assert text.count("output-marker") == 1 and text.count("log-marker") == 1
    assert len(text) < 2 * SHOW_JSON_MAX


def test_a_database_that_stops_answering_is_a_503_not_a_hung_page(
    pg_url: str, pg_schema: str, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database that stops answering without closing its connections (a stalled proxy,
    a partitioned host): each page's database calls have a deadline, so the page says
    so. The request hung for ever (240 s and counting in the probe that found it)."""
    import riverboat.ui.app as ui_app
    from tests.reliability._support import FreezingProxy

    monkeypatch.setattr(ui_app, "CALL_TIMEOUT", 1.0)
    port = int(pg_url.rsplit(":", 1)[1].split("/", 1)[0])
    proxy = FreezingProxy("127.0.0.1", port).start()
    try:
        browser = Http(serve(create_app(proxy.url(pg_url), schema=pg_schema)).url)
        assert browser.request("GET", "/")[0] == 200
        proxy.freeze(new_too=True)
        status, _, page = browser.request("GET", "/jobs")
        assert status == 503 and "the database did not answer" in page
        # These pages read riverboat's own tables too, and took any failure there for
        # a missing migration: a 200 that said to run `riverboat migrate up`.
        for path in ("/periodic", "/workers"):
            status, _, page = browser.request("GET", path)
            assert status == 503 and "the database did not answer" in page, (path, status)
            assert "migrate up" not in page
    finally:
        proxy.close()


def test_a_database_without_riverboats_line_says_how_to_add_it(tmp_path: Any, serve: Any) -> None:
    """River's line alone (a database River migrated): the pages on riverboat's own
    tables say which migration adds them, and the rest of the page works."""
    from riverboat.cli import main

    url = f"sqlite:///{tmp_path / 'river_only.sqlite3'}"
    assert main(["migrate", "up", "--line", "main", "--database-url", url]) == 0
    browser = Http(serve(create_app(url)).url)
    for path, marker in (("/workers", 'id="no-registry"'), ("/periodic", 'id="no-periodic-table"')):
        status, _, page = browser.request("GET", path)
        assert status == 200 and marker in page and "riverboat migrate up" in page, path
        assert page.count("migrate up") == 1, path  # the advice once, not again after it


def test_a_workflow_id_with_a_slash_opens_and_acts(tmp_path: Any, serve: Any) -> None:
    """Ids other clients write may hold "/": the list's link (the "/" left as it is)
    matched the POST-only action route (a 405), and its actions were a 404."""
    from riverboat import Client, Workflow
    from riverboat.cli import main

    url = f"sqlite:///{tmp_path / 'slash.sqlite3'}"
    assert main(["migrate", "up", "--database-url", url]) == 0
    workflow_id = "team a/b %2F c"
    with Client(url) as client:
        client.insert(
            {},
            InsertOpts(
                metadata={"riverboat_workflow": {"id": workflow_id, "task": "t1", "name": "hand"}}
            ),
            kind="hand_step",
        )
        more = Workflow(id=workflow_id)
        more.add("t2", {}, kind="hand_step", deps=["t1"])
        client.workflow_insert(more)
    browser = Http(serve(create_app(url)).url)
    status, _, listing = browser.request("GET", "/workflows")
    assert status == 200
    links = re.findall(r'href="(/workflow\?id=[^"]+)"', listing)
    assert len(links) == 1
    status, _, page = browser.request("GET", html.unescape(links[0]))
    assert status == 200 and "t1" in page and "t2" in page, (links, status)
    action = re.search(r'action="(/workflow/cancel\?[^"]+)"', page)
    assert action is not None
    token = browser.csrf(html.unescape(links[0]))
    status, headers, _ = browser.request("POST", html.unescape(action.group(1)), {"csrf": token})
    assert status == 303 and browser.flash is not None and "cancelled" in browser.flash
    # Back on this workflow's page: the way back was the decoded path (team a/b / c).
    status, _, page = browser.request("GET", headers["location"])
    assert status == 200 and "t1" in page, headers["location"]
    # A link of an earlier release still opens it.
    status, _, page = browser.request("GET", "/workflows/team%20a%2Fb%20%252F%20c")
    assert status == 200 and "t1" in page
    # The list with a trailing slash still goes to the list (the route now takes ids
    # with "/", the empty one too).
    status, headers, _ = browser.request("GET", "/workflows/")
    assert status == 307 and headers["location"].endswith("/workflows")
    with Client(url) as client:
        states = {t.name: t.state.value for t in client.workflow_get(workflow_id).tasks}
    assert states == {"t1": "cancelled", "t2": "cancelled"}


def test_a_lone_surrogate_in_a_job_is_shown_as_its_escape(sqlite_url: str, serve: Any) -> None:
    """A JSON ``"\\ud800"`` escape decodes to a lone surrogate, which no page can be
    encoded with: the job's page and every list it was on answered 500. (SQLite keeps
    such a value; Postgres refuses it in jsonb.)"""
    with riverboat.Client(sqlite_url) as client:
        job = client.insert({}, kind="surrogate").job
    Db("sqlite", sqlite_url, None).execute(
        "UPDATE river_job SET args = jsonb(%s), errors = jsonb(%s), state = 'discarded',"
        " finalized_at = datetime('now'), attempt = 1 WHERE id = %s",
        '{"x":"\\ud800"}',
        '[{"at":"2024-01-01T00:00:00Z","attempt":1,"error":"e \\udfff"}]',
        job.id,
    )
    browser = Http(serve(create_app(sqlite_url)).url)
    for path in (f"/jobs/{job.id}", "/jobs?state=discarded"):
        status, _, page = browser.request("GET", path)
        assert status == 200 and "e \\udfff" in page, path


def test_a_lone_surrogate_in_a_workflow_id_leaves_its_pages_up(sqlite_url: str, serve: Any) -> None:
    """A workflow id holding a lone surrogate (metadata SQLite kept as written) made the
    job page answer 500: its link to the workflow could not be encoded. The link is
    made (it finds no workflow: 404), and the pages that show the id answer."""
    with riverboat.Client(sqlite_url) as client:
        job = client.insert({}, kind="surrogate_task").job
    Db("sqlite", sqlite_url, None).execute(
        "UPDATE river_job SET metadata = jsonb(%s) WHERE id = %s",
        '{"riverboat_workflow":{"id":"s\\ud800x","task":"t1"}}',
        job.id,
    )
    browser = Http(serve(create_app(sqlite_url)).url)
    status, _, _ = browser.request("GET", "/workflows")
    assert status == 200
    status, _, page = browser.request("GET", f"/jobs/{job.id}")
    assert status == 200
    link = re.search(r'id="job-workflow" href="(/workflow\?id=[^"]+)"', page)
    assert link is not None and link.group(1) == "/workflow?id=s%ED%A0%80x"
    status, _, _ = browser.request("GET", link.group(1))
    assert status == 404


def _insert_task_of(url: str, workflow_id: str, task: str) -> None:
    """A job whose metadata makes it task ``task`` of workflow ``workflow_id``, written
    as any client may write it (no Workflow, so any id)."""
    with riverboat.Client(url) as client:
        client.insert(
            {},
            InsertOpts(metadata={"riverboat_workflow": {"id": workflow_id, "task": task}}),
            kind="crafted",
        )


def test_a_workflow_id_is_one_segment_of_its_links(sqlite_url: str, serve: Any) -> None:
    """A workflow id is anyone's to write (job metadata): ``../../jobs/N`` was linked
    with its "/" as is, and the browser went to job N's page, whose Cancel and Retry
    forms then acted on that job. The id is one encoded path segment, and its page
    opens."""
    with riverboat.Client(sqlite_url) as client:
        victim = client.insert({}, kind="victim").job.id
    wid = f"../../jobs/{victim}"
    _insert_task_of(sqlite_url, wid, "t")
    browser = Http(serve(create_app(sqlite_url)).url)
    status, _, page = browser.request("GET", "/workflows")
    assert status == 200
    encoded = f"..%2F..%2Fjobs%2F{victim}"
    assert f'href="/workflow?id={encoded}"' in page and f'href="/workflows/{wid}"' not in page
    status, _, page = browser.request("GET", f"/workflow?id={encoded}")
    assert status == 200 and f'action="/workflow/cancel?id={encoded}&amp;' in page


@pytest.mark.parametrize("wid", ["..", ".", "tab\there", "new\nline", "a%2Fb", "q?x=1&y#z"])
def test_any_workflow_id_opens_and_acts_on_its_own_page(
    sqlite_url: str, serve: Any, wid: str
) -> None:
    """Ids no path segment carries: a browser resolves "." and ".." (and %2E) as dot
    segments, so /workflows/.. opened the overview; the way back from an action was the
    decoded path (a%2Fb came back as workflow a/b) and lost a tab; the path converter
    matches no newline (404). The id now goes in the query, and each comes back to its
    own page after an action."""
    _insert_task_of(sqlite_url, wid, "only")
    browser = Http(serve(create_app(sqlite_url)).url)
    status, _, listing = browser.request("GET", "/workflows")
    assert status == 200
    links = re.findall(r'href="(/workflow\?id=[^"]+)"', listing)
    assert len(links) == 1, links
    link = html.unescape(links[0])
    status, _, page = browser.request("GET", link)
    assert status == 200 and "only" in page, (link, status)
    action = re.search(r'action="(/workflow/cancel\?[^"]+)"', page)
    assert action is not None
    token = browser.csrf(link)
    status, headers, _ = browser.request("POST", html.unescape(action.group(1)), {"csrf": token})
    assert status == 303 and browser.flash is not None and "cancelled" in browser.flash
    assert headers["location"] == link
    with riverboat.Client(sqlite_url) as client:
        assert [t.state.value for t in client.workflow_get(wid).tasks] == ["cancelled"]


def test_a_bulk_retry_by_filter_counts_tasks_cancelled_again_apart(
    sqlite_url: str, serve: Any
) -> None:
    """Retrying by filter a workflow task whose failed dependency the filter left out:
    the retry's promotion cancelled it again at once, and the page still said "1 job
    retried". It says what stayed retried, and the tasks cancelled again, as an error."""
    from riverboat import Workflow

    wf = Workflow("bulk")
    wf.add("charge", {}, kind="charge_step")
    wf.add("pay", {}, kind="pay_step", deps=["charge"])
    with riverboat.Client(sqlite_url) as client:
        info = client.workflow_insert(wf)
        client.job_cancel(info.task("charge").job.id)
    browser = Http(serve(create_app(sqlite_url)).url)
    token = browser.csrf(f"/jobs/{info.task('pay').job.id}")
    form = {"action": "retry", "state": "cancelled", "kind": "pay_step", "csrf": token}
    status, _, _ = browser.request("POST", "/jobs/bulk-filter", form)
    assert status == 303
    assert browser.flash is not None and browser.flash.startswith("0 jobs retried")
    assert "1 workflow task cancelled again: a dependency still failed" in browser.flash
    assert browser.flash_kind == "error"


def test_a_queue_name_with_a_slash_pauses_and_resumes(sqlite_url: str, serve: Any) -> None:
    """A queue row another client wrote may have "/" in its name (River's inserts refuse
    it, its queue table does not): the overview's Pause and Resume forms posted to
    /queues/<name>/<action> with the "/" as is, and the route answered 404. The name is
    one encoded segment of the form's action (so ``..`` in it cannot point the form at
    another page), and the route takes it whole."""
    name = "../jobs/1/team a/b"
    with riverboat.Client(sqlite_url) as client:
        client.driver.fetch(client.driver.dialect.queue_create_or_set_updated_at(name))
    browser = Http(serve(create_app(sqlite_url)).url)
    for action, past in (("pause", "paused"), ("resume", "resumed")):
        status, _, page = browser.request("GET", "/")
        assert status == 200
        form = f'action="/queues/..%2Fjobs%2F1%2Fteam%20a%2Fb/{action}"'
        assert form in page, page[-3000:]
        token = browser.csrf()
        path = html.unescape(form.split('"')[1])
        status, _, _ = browser.request("POST", path, {"csrf": token})
        assert status == 303 and browser.flash == f"queue {name} {past}"
        with riverboat.Client(sqlite_url) as client:
            row = client.queue_get(name)
        assert (row.paused_at is not None) == (action == "pause")


def test_a_job_page_says_what_could_not_be_decoded(sqlite_url: str, serve: Any) -> None:
    """A row another client wrote with a time riverboat can't read: the page showed the
    stand-in time as if stored and never said why (only ``jobs get --json`` did)."""
    with riverboat.Client(sqlite_url) as client:
        job = client.insert({}, kind="undecodable").job
    Db("sqlite", sqlite_url, None).execute(
        "UPDATE river_job SET scheduled_at = 'garbage' WHERE id = %s", job.id
    )
    browser = Http(serve(create_app(sqlite_url)).url)
    status, _, page = browser.request("GET", f"/jobs/{job.id}")
    assert status == 200 and 'id="decode-errors"' in page
    section = page.split('id="decode-errors"', 1)[1].split("</section>", 1)[0]
    assert "scheduled_at" in section and "garbage" in section
