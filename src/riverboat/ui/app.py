"""The dashboard's ASGI app: pages rendered on the server (Jinja2, autoescaped), refreshed
in place by htmx polling, actions as CSRF-protected POSTs.

Every read and write goes through the admin API of one :class:`~riverboat.AsyncClient`
(``job_list``, ``job_count_by_state``, ``job_retry``, ``queue_pause``...), so the SQL and
its rules live in one place.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from riverboat._admin import JOB_COUNT_CAP_DEFAULT, QueueActivity, ThroughputMinute
from riverboat._job import (
    FAILED_STATES,
    FINALIZED_STATES,
    LIFECYCLE_ORDER,
    STATE_BY_NAME,
    JobRow,
    JobState,
)
from riverboat._json import date_time_text
from riverboat.client import AsyncClient
from riverboat.dialect._rows import PREVIEW_ARGS_MAX
from riverboat.dialect._workflow_common import WORKFLOW_LIST_WINDOW
from riverboat.drivers.base import call_deadline
from riverboat.errors import (
    DeadlineExceededError,
    DriverError,
    InvalidInputError,
    JobRunningError,
    NotFoundError,
    RiverboatError,
)
from riverboat.ui.graph import layout, table_tasks
from riverboat.ui.line_tables import read_line_table
from riverboat.workflow import WorkflowInfo, cancelled_by_dependency, workflow_meta

__all__ = ["LOCAL_HOSTS", "Dashboard", "create_app"]

HERE = Path(__file__).parent
CSRF_COOKIE = "riverboat_csrf"
# The message an action leaves for the page it redirects to ("queue email paused"): a
# cookie the app sets, read and cleared by the next page. It was a ?msg= parameter, so a
# link from anywhere could put any text in an operator's dashboard.
FLASH_COOKIE = "riverboat_flash"
CALL_TIMEOUT = 10.0  # seconds each database call of a page may take (then a 503)
FLASH_MAX_BYTES = 3800  # of the encoded cookie value: browsers drop a cookie past 4 KB
PAGE_SIZE = 50
REFRESH_SECONDS = 2
# Latency and throughput per queue read a week of finalized jobs: computed at most this
# often, whatever the refresh rate and the number of open pages.
ACTIVITY_CACHE_SECONDS = 30.0
ALL_STATES = "all"
FINALIZED = FINALIZED_STATES
STATE_TABS = LIFECYCLE_ORDER
ACTIVE_STATES = tuple(s for s in STATE_TABS if s not in FINALIZED)
JOB_ACTIONS = ("retry", "cancel", "delete")
WORKFLOW_ACTIONS = ("retry", "cancel")
BULK_BATCH = 500  # rows per statement of an action on everything a filter matches
# The Host names a dashboard answers by default: a DNS name an attacker controls that
# resolves to 127.0.0.1 (DNS rebinding) arrives with its own name and is refused.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", ".localhost")
# Sent with every response: no framing (clickjacking), no content sniffing.
SECURITY_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
)
FRAME_ANCESTORS = b"frame-ancestors 'none'"
# Scripts only from the dashboard's own files: no inline script, no eval (htmx is told
# not to evaluate, base.html), so markup injected through a stored value could run none.
SCRIPT_SRC = b"script-src 'self'"


class BadFilter(Exception):
    """A filter or form value the user typed that makes no sense; shown in the page."""


@dataclass(slots=True)
class UiConfig:
    read_only: bool
    token: str | None
    count_cap: int


class _ClientHolder:
    """Opens the AsyncClient on first use (a mounted app may never see a lifespan)."""

    def __init__(self, client: AsyncClient | None, url: str | None, schema: str | None) -> None:
        self._client = client
        self._url = url
        self._schema = schema
        self._owned = client is None
        self._lock = asyncio.Lock()

    async def get(self) -> AsyncClient:
        if self._client is None:
            async with self._lock:
                if self._client is None:
                    assert self._url is not None
                    self._client = AsyncClient(self._url, schema=self._schema)
        return self._client

    async def close(self) -> None:
        if self._owned and self._client is not None:
            await self._client.close()
            self._client = None


# -- formatting helpers for the templates ---------------------------------------------------
def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "-"
    seconds = (now - moment).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < 60:
        text = f"{seconds:.0f}s"
    elif seconds < 3600:
        text = f"{seconds / 60:.0f}m"
    elif seconds < 86400:
        text = f"{seconds / 3600:.0f}h"
    else:
        text = f"{seconds / 86400:.0f}d"
    return f"in {text}" if future else f"{text} ago"


# A workflow's state drawn with the job state's colour that means the same.
_WORKFLOW_BADGES = {"completed": "completed", "failed": "discarded"}


def _workflow_badge(state: str) -> str:
    """The badge class (``s-<job state>``) of a workflow's ``state``."""
    return _WORKFLOW_BADGES.get(state, "running")


def _unique_violation(exc: DriverError) -> bool:
    """Whether the database refused a write on a unique index (Postgres's SQLSTATE
    23505, SQLite's "UNIQUE constraint failed"), not a connection that dropped."""
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) == "23505" or "UNIQUE constraint failed" in str(cause)


def _is_id_text(text: str) -> bool:
    """Whether ``text`` reads as a job id: ASCII digits only (``str.isdigit`` also says
    yes to "²", which ``int`` refuses), within int64 (a longer number, in the search
    box, is text to look for in the args, not an error)."""
    return text.isascii() and text.isdigit() and len(text) <= 19 and int(text) < 2**63


def _iso(moment: datetime | None) -> str:
    # datetime.min: an error entry another client wrote without a readable "at"
    # (AttemptError.from_json); naive, so it can't be converted to UTC.
    if moment is None or moment == datetime.min:
        return "-"
    moment = moment.astimezone(UTC)
    return f"{date_time_text(moment, ' ')}.{moment.microsecond // 1000:03d} UTC"


# Characters of one JSON block (args, output, metadata, an attempt's log) a job's page
# shows: the page refreshes itself every few seconds, and a job with 20 MB of args sent
# them, decoded and indented, at every refresh.
SHOW_JSON_MAX = 64 * 1024
# A job page shows the errors of this many newest attempts, each message and trace cut
# to SHOW_ERROR_MAX characters (riverboat's own cap on a message; Go River stores them
# uncut, and a retried job has one per attempt): at most some 320 KiB at each refresh.
SHOW_ERRORS_MAX = 10
SHOW_ERROR_MAX = 16 * 1024


def _shown(text: str, job_id: int, limit: int = SHOW_JSON_MAX) -> str:
    """``text`` cut to ``limit`` characters, saying what was left out and where to read
    it all."""
    if len(text) <= limit:
        return text
    return (
        f"{text[:limit]}\n… ({len(text) - limit:,} more characters not "
        f"shown; `riverboat jobs get {job_id} --json` prints them all)"
    )


class _Acted(NamedTuple):
    """One job action's result, as the dashboard says it: why it did not take effect,
    or what it did when the action's past tense would not be true."""

    problem: str = ""
    note: str = ""
    # A workflow task retried and cancelled again at once: its dependency still failed.
    recancelled: bool = False


def _workflow_link(job: JobRow) -> dict[str, str] | None:
    """What the job page says of the workflow a task belongs to, as text; None for a
    job outside any workflow, or whose workflow id is not text (metadata any client
    can write: a list there made the link's urlencode fail the whole page)."""
    meta = workflow_meta(job)
    if meta is None or not isinstance(meta.get("id"), str):
        return None
    cancelled_by = meta.get("cancelled_by")
    return {
        "id": meta["id"],
        "name": str(meta.get("name") or ""),
        "task": str(meta.get("task", "")),
        "cancelled_by": "" if cancelled_by is None else str(cancelled_by),
    }


def _json_block(raw: str, decoded: Callable[[], Any], job_id: int) -> str:
    """A stored JSON value for a job's page: indented when small; past SHOW_JSON_MAX its
    stored text, cut, without decoding it."""
    if len(raw) > SHOW_JSON_MAX:
        return _shown(raw, job_id)
    try:
        return _pretty_json(decoded())
    except ValueError:  # not JSON, or nested too deeply to decode: the stored text
        return raw


def _pretty_json(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    except RecursionError:
        # A row another client wrote, nested deeper than indenting can recurse.
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except RecursionError:
            return "(nested too deeply to show)"


_GO_HTML_ESCAPES = (("\\u003c", "<"), ("\\u003e", ">"), ("\\u0026", "&"))


def _segment(value: object) -> str:
    """``value`` as one URL path segment: every reserved character encoded, "/" too. A
    lone surrogate (a workflow id in metadata SQLite kept) is encoded as its bytes, not
    raised from inside the page (500): the link then finds no such workflow."""
    return quote(str(value), safe="", errors="surrogatepass")


def _workflow_href(workflow_id: object) -> str:
    """A workflow's page, its id in the query: no path segment carries every id. A
    browser resolves "." and ".." (and %2E spelled either way) as dot segments, so
    /workflows/.. opened the overview; a decoded path turned a%2Fb into a/b on the
    way back from an action; and the path converter matches no newline."""
    return "/workflow?id=" + _segment(workflow_id)


# A lone surrogate: JSON's "\ud800" escape decodes to one (Python's json.dumps and
# JavaScript write it; SQLite's json() keeps it). No page holding one could be encoded:
# the job's page, and every list it was on, answered 500. Shown as its escape.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _args_preview(job: JobRow, width: int = 90) -> str:
    """One line of a job's args for the list: decoded and re-encoded compactly (the stored
    text escapes <, > and & as Go does, which is unreadable)."""
    raw = job.encoded_args
    # Past PREVIEW_ARGS_MAX, args were cut by job_list(preview=True) (no longer JSON), or
    # are megabytes a full row carries: previewed from their stored text, not decoded and
    # re-encoded whole to show 90 characters at every refresh.
    if len(raw) > PREVIEW_ARGS_MAX:
        text = raw[: width * 8]
        for escaped, plain in _GO_HTML_ESCAPES:
            text = text.replace(escaped, plain)
        return text[: width - 1] + "…"
    try:
        text = json.dumps(job.args, ensure_ascii=False, separators=(", ", ": "), default=str)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to decode
        text = raw
    return text if len(text) <= width else text[: width - 1] + "…"


def _duration_text(seconds: float) -> str:
    if seconds < 1:
        return "<1s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _last_error(job: JobRow, width: int = 120) -> str:
    """The job's latest error on one line (its attempt's full text is on the job page)."""
    if not job.errors:
        return ""
    text = " ".join(job.errors[-1].error.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _count_text(count: int, cap: int) -> str:
    return f"{cap:,}+" if count > cap else f"{count:,}"


def _chart(points: Sequence[ThroughputMinute], now: datetime, minutes: int = 60) -> dict[str, Any]:
    """Bars for the last ``minutes`` minutes (completed stacked on discarded), as numbers
    the template draws into an inline SVG: no chart library, nothing to load."""
    end = now.replace(second=0, microsecond=0)
    by_minute = {p.minute.astimezone(UTC).replace(second=0, microsecond=0): p for p in points}
    bars: list[dict[str, Any]] = []
    for i in range(minutes):
        minute = end - timedelta(minutes=minutes - 1 - i)
        point = by_minute.get(minute)
        bars.append(
            {
                "minute": minute.strftime("%H:%M"),
                "completed": point.completed if point else 0,
                "discarded": point.discarded if point else 0,
            }
        )
    peak = max((int(b["completed"]) + int(b["discarded"]) for b in bars), default=0)
    return {
        "bars": bars,
        "peak": peak,
        "completed": sum(b["completed"] for b in bars),
        "discarded": sum(b["discarded"] for b in bars),
    }


# -- request parsing ------------------------------------------------------------------------
@dataclass(slots=True)
class JobFilters:
    state: JobState | None  # None: every state (the "all" tab)
    kind: str
    queue: str
    tag: str
    priority: str
    cursor: str
    search: str = ""

    @property
    def state_name(self) -> str:
        return self.state.value if self.state is not None else ALL_STATES

    def list_kwargs(self) -> dict[str, Any]:
        """The admin API's filters (job_list, job_count_matching, the bulk calls)."""
        kwargs: dict[str, Any] = {"states": [self.state] if self.state is not None else None}
        if self.search:
            # A number is a job id; anything else is looked for in the args' JSON.
            if _is_id_text(self.search):
                kwargs["ids"] = [int(self.search)]
            else:
                kwargs["args_text"] = self.search
        if self.kind:
            kwargs["kinds"] = [k.strip() for k in self.kind.split(",") if k.strip()]
        if self.queue:
            kwargs["queues"] = [q.strip() for q in self.queue.split(",") if q.strip()]
        if self.tag:
            kwargs["tags_any"] = [t.strip() for t in self.tag.split(",") if t.strip()]
        if self.priority:
            try:
                priorities = [int(p) for p in self.priority.split(",") if p.strip()]
            except ValueError:
                raise BadFilter(f"priority {self.priority!r} is not a number from 1 to 4") from None
            if not all(1 <= p <= 4 for p in priorities):
                raise BadFilter(f"priority {self.priority!r} must be from 1 to 4")
            kwargs["priorities"] = priorities
        return {k: v for k, v in kwargs.items() if v}

    def describe(self) -> str:
        """The filters in words, for a confirmation ("state discarded, kind charge")."""
        parts = [f"state {self.state_name}"]
        for name, value in (
            ("kind", self.kind),
            ("queue", self.queue),
            ("tag", self.tag),
            ("priority", self.priority),
            ("search", self.search),
        ):
            if value:
                parts.append(f"{name} {value}")
        return ", ".join(parts)

    def fields(self) -> dict[str, str]:
        """The filters as form fields (a confirmation form posts them back)."""
        return {
            "state": self.state_name,
            "kind": self.kind,
            "queue": self.queue,
            "tag": self.tag,
            "priority": self.priority,
            "q": self.search,
        }

    def query(self, **changes: str) -> str:
        values = {**self.fields(), "cursor": ""}
        values.update(changes)
        return urlencode({k: v for k, v in values.items() if v})


def _filters_from(params: Any) -> tuple[JobFilters, str | None]:
    """Filters from a query string or a posted form (both map names to text)."""
    problem = None
    raw_state = str(params.get("state", JobState.RUNNING.value))
    state = STATE_BY_NAME.get(raw_state)
    if state is None and raw_state != ALL_STATES:
        problem = f"{raw_state!r} is not a job state ({', '.join(STATE_BY_NAME)}, or all)"
        state = JobState.RUNNING
    filters = JobFilters(
        state=state,
        kind=str(params.get("kind", "")).strip(),
        queue=str(params.get("queue", "")).strip(),
        tag=str(params.get("tag", "")).strip(),
        priority=str(params.get("priority", "")).strip(),
        cursor=str(params.get("cursor", "")).strip(),
        search=str(params.get("q", "")).strip(),
    )
    return filters, problem


def workflow_action_message(
    action: str, before: WorkflowInfo, after: WorkflowInfo
) -> tuple[str, str]:
    """What a workflow action changed, from the workflow before and after it: the
    message and its kind (``error`` when it changed nothing)."""
    was = {task.name: task.state for task in before.tasks}
    if action == "retry":
        retried = sum(
            1
            for task in after.tasks
            if was.get(task.name) in FAILED_STATES and task.state not in FAILED_STATES
        )
        if not retried:
            return f"workflow {after.id}: no discarded or cancelled task to retry", "error"
        return f"workflow {after.id}: {retried} task{'s' if retried != 1 else ''} retried", "ok"
    cancelled = sum(
        1
        for task in after.tasks
        if task.state is JobState.CANCELLED and was.get(task.name) is not JobState.CANCELLED
    )
    stopping = sum(1 for task in after.tasks if task.state is JobState.RUNNING)
    if not cancelled and not stopping:
        return f"workflow {after.id}: every task had finished; nothing to cancel", "error"
    message = f"workflow {after.id}: {cancelled} task{'s' if cancelled != 1 else ''} cancelled"
    if stopping:
        message += f", {stopping} running told to stop"
    return message, "ok"


def _safe_back(request: Request, fallback: str) -> str:
    """Where to go after an action: a path on this app, never another site."""
    back = str(request.query_params.get("back", ""))
    parts = urlsplit(back)
    if back.startswith("/") and not back.startswith("//") and not parts.netloc:
        return back
    return fallback


def _app_path(request: Request) -> str:
    """The request's path inside this app (without the prefix it is mounted under), with
    its query string: where an action sends the browser back to."""
    root = str(request.scope.get("root_path", ""))
    path = request.url.path
    if root and path.startswith(root):
        path = path[len(root) :] or "/"
    return path + ("?" + request.url.query if request.url.query else "")


class _Flash:
    """The message an action leaves for the page it redirects to, in a short-lived
    cookie signed with this app's own random key: a cookie set by anyone else (a
    sibling subdomain, a script on another app of the host) is not shown, so a page
    never says "3 jobs deleted" because someone else wrote it there. The key lives as
    long as the app, so a message set by another dashboard process (several behind one
    balancer) is not shown either; the action itself is done all the same."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def _signature(self, message: str, kind: str) -> str:
        text = f"{kind}\n{message}".encode()
        return hmac.new(self._key, text, hashlib.sha256).hexdigest()[:32]

    def redirect(
        self, request: Request, url: str, message: str, kind: str = "ok"
    ) -> RedirectResponse:
        """A redirect to ``url`` whose page shows ``message`` (``kind`` "ok" or "error"),
        cut to what a cookie holds once encoded (text outside ASCII takes up to 9 bytes
        a character)."""
        response = RedirectResponse(url, status_code=303)

        def encoded(text: str) -> str:
            return urlencode({"msg": text, "kind": kind, "sig": self._signature(text, kind)})

        value = encoded(message)
        while len(value) > FLASH_MAX_BYTES:
            message = message[: len(message) * 3 // 4] + "…"
            value = encoded(message)
        path = _flash_path(request)
        response.set_cookie(
            FLASH_COOKIE, value, max_age=60, httponly=True, samesite="strict", path=path
        )
        return response

    def read(self, request: Request) -> tuple[str | None, str]:
        """The message an action of this app left for this page, and its kind; (None,
        "ok") for none, or for a cookie this app did not sign."""
        value = request.cookies.get(FLASH_COOKIE)
        if not value:
            return None, "ok"
        fields = parse_qs(value)
        message = fields.get("msg", [""])[0]
        kind = fields.get("kind", ["ok"])[0]
        signature = fields.get("sig", [""])[0]
        # As bytes: compare_digest raises TypeError for a str past ASCII, which a forged
        # cookie may hold (every page then failed with a 500).
        expected = self._signature(message, kind).encode()
        if not message or not hmac.compare_digest(signature.encode(), expected):
            return None, "ok"
        return message, "error" if kind == "error" else "ok"


def _flash_path(request: Request) -> str:
    """The flash cookie's path: the dashboard's own (two mounted under different
    prefixes of one host don't see each other's messages)."""
    return str(request.scope.get("root_path", "")) or "/"


# -- security middleware ------------------------------------------------------------------
class _AuthMiddleware:
    """Token authentication: ``Authorization: Bearer TOKEN``, or HTTP Basic with the
    token as the password (any user name) so a browser can log in with its own prompt."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    def _allowed(self, header: str) -> bool:
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer":
            # The header's bytes as sent (ASGI decodes them as latin-1): a UTF-8 token's.
            return hmac.compare_digest(value.strip().encode("latin-1"), self.token)
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True)
            except (binascii.Error, ValueError):
                return False
            _user, _, password = decoded.partition(b":")
            return hmac.compare_digest(password, self.token)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        header = headers.get(b"authorization", b"").decode("latin-1")
        if not self._allowed(header):
            response = PlainTextResponse(
                "riverboat ui: authentication required",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="riverboat", charset="UTF-8"'},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _host_name(header: str) -> str:
    """The name in a Host header, lowercased, without its port ("[::1]:8080" -> "::1")."""
    host = header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def host_allowed(header: str, allowed: Sequence[str]) -> bool:
    """Whether a Host header names one of ``allowed``: exact names, ``.example.com`` for
    the domain and its subdomains (as Django's ALLOWED_HOSTS), ``*`` for any."""
    if "*" in allowed:
        return True
    name = _host_name(header)
    if not name:
        return False
    for pattern in allowed:
        pattern = _host_name(pattern) if not pattern.startswith(".") else pattern.lower()
        if pattern == "*" or name == pattern:
            return True
        if pattern.startswith(".") and (name == pattern[1:] or name.endswith(pattern)):
            return True
    return False


class _HostCheckMiddleware:
    """Refuses a request whose Host header is not one of the allowed names (400), so a
    page of another site that rebinds its DNS name to this address reaches nothing."""

    def __init__(self, app: ASGIApp, allowed: Sequence[str]) -> None:
        self.app = app
        self.allowed = tuple(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or ())
            host = headers.get(b"host", b"").decode("latin-1")
            if not host_allowed(host, self.allowed):
                response = PlainTextResponse(
                    f"riverboat ui: refused a request for host {host[:100]!r} (allowed: "
                    f"{', '.join(self.allowed)}; see --allowed-host)",
                    status_code=400,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _SecurityHeadersMiddleware:
    """Adds X-Frame-Options, CSP frame-ancestors and script-src, and nosniff to every
    response (pages, static files, refusals); a Content-Security-Policy already set keeps
    its directives (its own script-src too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", ())
                    if k.lower() not in (b"x-frame-options", b"x-content-type-options")
                ]
                csp = [v for k, v in headers if k.lower() == b"content-security-policy"]
                headers = [(k, v) for k, v in headers if k.lower() != b"content-security-policy"]
                policy = (
                    b"; ".join(p for p in (v.strip().rstrip(b";") for v in csp) if p)
                    if csp
                    else b""
                )
                for directive in (FRAME_ANCESTORS, SCRIPT_SRC):
                    if directive.split(b" ", 1)[0] not in policy:
                        policy = policy + b"; " + directive if policy else directive
                headers.append((b"content-security-policy", policy))
                headers.extend(SECURITY_HEADERS)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class Dashboard:
    """The ASGI app :func:`create_app` returns. Served on its own it closes its client at
    shutdown (ASGI lifespan); mounted in another app, whose lifespan does not reach
    mounted apps, call ``await dashboard.aclose()`` from that app's shutdown."""

    def __init__(self, app: ASGIApp, close: Callable[[], Awaitable[None]]) -> None:
        self.app = app
        self._close = close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

    async def aclose(self) -> None:
        """Close the client the dashboard opened from its URL (not one passed in)."""
        await self._close()


def _csrf_token(request: Request) -> str:
    token = request.cookies.get(CSRF_COOKIE, "")
    if len(token) != 43:  # token_urlsafe(32)
        token = request.state.new_csrf = secrets.token_urlsafe(32)
    return token


def _check_csrf(request: Request, form: FormData) -> str | None:
    """Double-submit check: the form's token must equal the cookie's (another site can
    make the browser send the cookie, not read it), and a browser's request must come
    from this origin.

    The token alone is not enough: cookies ignore ports, and a sibling subdomain can set
    one for the parent domain, so a page on another port of the same host (or on a
    sibling subdomain) can replace the cookie with a value it knows and post it. What a
    browser says of the request's origin can't be forged by a page: ``Origin`` (sent
    with every cross-origin POST, ``null`` after a cross-origin redirect or from a
    sandboxed frame) must name this host, and ``Sec-Fetch-Site``, where sent, must say
    ``same-origin``. Tools that send neither (curl with the cookie and the token) pass."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    sent = str(form.get("csrf", ""))
    if not cookie or not hmac.compare_digest(cookie.encode(), sent.encode()):
        return "the form's CSRF token is missing or stale: reload the page and try again"
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host", ""):
        return f"refused a request from another origin ({origin[:100]})"
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"refused a request from another site (Sec-Fetch-Site: {site[:40]})"
    return None


# -- the app -------------------------------------------------------------------------------
def create_app(
    database_url: str | None = None,
    *,
    client: AsyncClient | None = None,
    schema: str | None = None,
    read_only: bool = False,
    token: str | None = None,
    count_cap: int = JOB_COUNT_CAP_DEFAULT,
    allowed_hosts: Sequence[str] = LOCAL_HOSTS,
) -> Dashboard:
    """The dashboard as an ASGI app.

    Pass ``database_url`` (the app opens its own :class:`~riverboat.AsyncClient` on
    first request and closes it at shutdown) or an existing ``client``. ``read_only``
    hides every action and refuses its POST; ``token`` requires ``Authorization: Bearer
    TOKEN`` or HTTP Basic with the token as password. Job counts per state stop at
    ``count_cap`` (shown as "10,000+").

    Requests whose ``Host`` header is not in ``allowed_hosts`` are refused with 400
    (default: localhost names only; ``.example.com`` allows a domain and its subdomains,
    ``"*"`` any host, for a proxy that checks it itself). Every response forbids framing
    and content sniffing.
    """
    if (database_url is None) == (client is None):
        raise InvalidInputError("database_url", "pass either database_url or client")
    if isinstance(allowed_hosts, str) or not allowed_hosts:
        raise InvalidInputError("allowed_hosts", "must be a non-empty list of host names")
    if not all(isinstance(h, str) and h.strip() for h in allowed_hosts):
        raise InvalidInputError("allowed_hosts", "each entry must be a non-empty string")
    if token is not None and not token:
        raise InvalidInputError("token", "must not be empty")
    config = UiConfig(read_only=read_only, token=token, count_cap=count_cap)
    flash = _Flash()
    holder = _ClientHolder(client, database_url, schema)
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pretty_json"] = _pretty_json
    env.filters["iso"] = _iso
    env.filters["workflow_badge"] = _workflow_badge
    env.filters["args_preview"] = _args_preview
    # A workflow id in a link is one path segment, its "/" encoded too: Jinja's urlencode
    # keeps "/", so an id like "../../jobs/326" (metadata is anyone's to write) linked
    # to job 326's page, whose Cancel and Retry forms then acted on that job.
    env.filters["segment"] = _segment
    env.filters["workflow_href"] = _workflow_href
    env.filters["last_error"] = _last_error

    def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        now = datetime.now(UTC)
        message, message_kind = flash.read(request)
        context.update(
            request=request,
            now=now,
            ago=lambda moment: _ago(moment, now),
            read_only=config.read_only,
            csrf=_csrf_token(request),
            refresh=REFRESH_SECONDS,
            message=message,
            message_kind=message_kind,
            base=request.scope.get("root_path", ""),
        )
        page = _LONE_SURROGATE.sub(_surrogate_escape, env.get_template(name).render(**context))
        response = HTMLResponse(page, status_code=status)
        new = getattr(request.state, "new_csrf", None)
        if new:
            response.set_cookie(CSRF_COOKIE, new, httponly=True, samesite="strict", path="/")
        if message is not None:  # shown once
            path = _flash_path(request)
            response.delete_cookie(FLASH_COOKIE, path=path, httponly=True, samesite="strict")
        response.headers["Cache-Control"] = "no-store"
        return response

    def error_page(request: Request, status: int, text: str) -> HTMLResponse:
        return render(request, "error.html", status=status, error=text, title="Error")

    activity_cache: dict[str, Any] = {"at": 0.0, "rows": {}}

    async def queue_activity(client: AsyncClient) -> dict[str, QueueActivity]:
        loop_now = asyncio.get_running_loop().time()
        if loop_now - activity_cache["at"] >= ACTIVITY_CACHE_SECONDS:
            rows = await client.queue_activity()
            activity_cache["rows"] = {a.queue: a for a in rows}
            activity_cache["at"] = loop_now
        cached: dict[str, QueueActivity] = activity_cache["rows"]
        return cached

    async def overview(request: Request) -> Response:
        client = await holder.get()
        counts, by_queue, queues, throughput, leader, activity = (
            await client.job_count_by_state(cap=config.count_cap),
            await client.job_count_by_queue(states=ACTIVE_STATES),
            await client.queue_list(limit=1000),
            await client.job_throughput(minutes=60),
            await client.leader_get(),
            await queue_activity(client),
        )
        limits, _ = await read_line_table(client.queue_limits())
        now = datetime.now(UTC)
        names = sorted({q.name for q in queues} | set(by_queue) | set(activity))
        by_name = {q.name: q for q in queues}
        rows = []
        for name in names:
            queue = by_name.get(name)
            seen = activity.get(name)
            latency = seen.latency(now) if seen is not None else None
            rows.append(
                {
                    "name": name,
                    "row": queue,
                    "counts": by_queue.get(name, {}),
                    "running": by_queue.get(name, {}).get(JobState.RUNNING, 0),
                    "latency": _duration_text(latency) if latency is not None else None,
                    "activity": seen,
                }
            )
        return render(
            request,
            "overview.html",
            title="Overview",
            states=STATE_TABS,
            active_states=ACTIVE_STATES,
            counts={s: _count_text(counts.get(s, 0), config.count_cap) for s in STATE_TABS},
            queues=rows,
            limits=limits,
            chart=_chart(throughput, now),
            leader=leader if leader is not None and leader.expires_at > now else None,
        )

    async def jobs(request: Request) -> Response:
        client = await holder.get()
        filters, problem = _filters_from(request.query_params)
        listed: list[JobRow] = []
        next_cursor = None
        try:
            if problem:
                raise BadFilter(problem)
            kwargs = filters.list_kwargs()
            # By id, which river_job_pkey serves on both databases: newest first for
            # running and finalized jobs, oldest first for those waiting. (River UI sorts
            # by the state's time column; on SQLite that order is an expression no index
            # serves, and a million finalized rows took seconds to sort.)
            result = await client.job_list(
                preview=True,  # the list shows none of the heavy columns whole
                order_by="id",
                descending=filters.state is None
                or filters.state in FINALIZED
                or filters.state == JobState.RUNNING,
                limit=PAGE_SIZE,
                cursor=filters.cursor or None,
                **kwargs,
            )
            listed, next_cursor = result.jobs, result.next_cursor
        except BadFilter as exc:
            problem = str(exc)
        except InvalidInputError as exc:
            problem = str(exc)
        counts = await client.job_count_by_state(cap=config.count_cap)
        total = sum(counts.values())
        capped = any(n > config.count_cap for n in counts.values())
        return render(
            request,
            "jobs.html",
            status=400 if problem else 200,
            title="Jobs",
            filters=filters,
            problem=problem,
            jobs=listed,
            next_query=filters.query(cursor=str(next_cursor)) if next_cursor else None,
            first_query=filters.query() if filters.cursor else None,
            states=STATE_TABS,
            counts={s: _count_text(counts.get(s, 0), config.count_cap) for s in STATE_TABS},
            all_count=f"{total:,}+" if capped else f"{total:,}",
            here=_app_path(request),
            bulk_query=filters.query(),
        )

    def _job_id(request: Request) -> int | None:
        raw = str(request.path_params["job_id"])
        if not _is_id_text(raw):
            return None
        return int(raw)

    async def job_detail(request: Request) -> Response:
        job_id = _job_id(request)
        if job_id is None:
            return error_page(request, 404, f"{request.path_params['job_id']!r} is not a job id")
        client = await holder.get()
        try:
            job = await client.job_get(job_id)
        except (NotFoundError, InvalidInputError):
            return error_page(request, 404, f"job {job_id} not found (deleted, or never existed)")
        metadata = dict(job.metadata)
        logs = metadata.get("river:log")
        shown_logs = [
            {"attempt": entry.get("attempt", "?"), "log": _shown(str(entry.get("log", "")), job.id)}
            if isinstance(entry, dict)
            else {"attempt": "?", "log": _shown(str(entry), job.id)}
            for entry in (logs if isinstance(logs, list) else [])
        ]
        # The output and the logs have blocks of their own: the metadata block names them
        # instead of formatting (maybe megabytes of) them a second time at every refresh.
        elsewhere = {"output": "Output"} | ({"river:log": "Logs"} if shown_logs else {})
        metadata_shown = {
            key: f"(shown above, under {elsewhere[key]})" if key in elsewhere else value
            for key, value in metadata.items()
        }
        return render(
            request,
            "job.html",
            title=f"Job {job.id}",
            job=job,
            args_text=_json_block(job.encoded_args, lambda: job.args, job.id),
            output_text=_shown(_pretty_json(metadata.get("output")), job.id),
            has_output="output" in metadata,
            metadata_text=_shown(_pretty_json(metadata_shown), job.id),
            logs=shown_logs,
            timeline=[
                ("Created", job.created_at),
                ("Scheduled", job.scheduled_at),
                ("Attempted", job.attempted_at),
                ("Finalized", job.finalized_at),
            ],
            errors=[
                {
                    "attempt": error.attempt,
                    "at": error.at,
                    "error": _shown(error.error, job.id, SHOW_ERROR_MAX),
                    "trace": _shown(error.trace, job.id, SHOW_ERROR_MAX),
                }
                for error in reversed(job.errors[-SHOW_ERRORS_MAX:])
            ],
            errors_left_out=max(0, len(job.errors) - SHOW_ERRORS_MAX),
            here=_app_path(request).split("?", 1)[0],
            workflow=_workflow_link(job),
        )

    async def workflows(request: Request) -> Response:
        client = await holder.get()
        limit = 50
        return render(
            request,
            "workflows.html",
            title="Workflows",
            summaries=await client.workflow_list(limit=limit),
            limit=limit,
            window=WORKFLOW_LIST_WINDOW,
        )

    def _workflow_id_of(request: Request) -> str:
        """The workflow named by the URL: ``/workflow?id=ID`` (what the pages link to),
        or ``/workflows/ID`` (earlier links, and typed by hand)."""
        if "workflow_id" in request.path_params:
            return str(request.path_params["workflow_id"])
        return str(request.query_params.get("id", ""))

    async def workflow_detail(request: Request) -> Response:
        workflow_id = _workflow_id_of(request)
        if not workflow_id:  # "/workflows/": the list, as before ids could hold "/"
            return RedirectResponse(request.scope.get("root_path", "") + "/workflows", 307)
        client = await holder.get()
        try:
            workflow = await client.workflow_get(workflow_id)
        except (NotFoundError, InvalidInputError):
            return error_page(request, 404, f"workflow {workflow_id!r} not found")
        return render(
            request,
            "workflow.html",
            title=f"Workflow {workflow.name}",
            workflow=workflow,
            drawing=layout(workflow.tasks),
            listed=table_tasks(workflow.tasks),
            here=_workflow_href(workflow.id),
            can_retry=any(t.state in FAILED_STATES for t in workflow.tasks),
            can_cancel=workflow.state == "running",
        )

    async def _form(request: Request) -> tuple[FormData | None, Response | None]:
        if config.read_only:
            return None, error_page(request, 403, "this dashboard is read-only")
        form = await request.form()
        problem = _check_csrf(request, form)
        if problem:
            return None, error_page(request, 403, problem)
        return form, None

    async def _act_on_job(client: AsyncClient, action: str, job_id: int) -> _Acted:
        """Run one action; says why it did not take effect (the admin API returns a job
        it left alone unchanged, e.g. cancelling a completed job), or, where "job N
        cancelled" would not be true, what it did: River cancels a running job by
        asking its worker, and the row stays running until the worker stops it."""
        try:
            if action == "retry":
                # Read first: River's JobRetry returns a job it left alone (available and
                # due already) as it is, and the page must not say "retried".
                before = await client.job_get(job_id)
                if before.state == JobState.AVAILABLE and before.scheduled_at <= datetime.now(UTC):
                    return _Acted(f"job {job_id} is available and due already; nothing to retry")
                try:
                    job = await client.job_retry(job_id)
                except DriverError as exc:
                    if before.unique_key is None or not _unique_violation(exc):
                        raise
                    # River's unique index refused it (another job holds its key).
                    return _Acted(f"job {job_id} was not retried: {exc}")
                if job.state == JobState.RUNNING:
                    return _Acted(f"job {job_id} is running; a running job is not retried")
                dependency = cancelled_by_dependency(job)
                if dependency:
                    # A workflow task is decided at once: its dependency still failed.
                    return _Acted(
                        f"job {job_id} was cancelled again: its dependency "
                        f"{dependency!r} failed (retry that task, or the workflow)",
                        recancelled=True,
                    )
            elif action == "cancel":
                before = await client.job_get(job_id)
                if before.state in FINALIZED_STATES:
                    return _Acted(
                        f"job {job_id} is already {before.state.value}; nothing to cancel"
                    )
                job = await client.job_cancel(job_id)
                if job.state in (JobState.COMPLETED, JobState.DISCARDED):
                    return _Acted(f"job {job_id} is already {job.state.value}; nothing to cancel")
                if job.state is JobState.RUNNING:
                    return _Acted(
                        note=f"cancel requested for job {job_id}: it is running, and is "
                        "cancelled when its worker stops it"
                    )
            else:
                await client.job_delete(job_id)
        except JobRunningError:
            return _Acted(f"job {job_id} is running and cannot be deleted")
        except NotFoundError:
            return _Acted(f"job {job_id} not found")
        return _Acted()

    async def job_action(request: Request) -> Response:
        _form_data, refused = await _form(request)
        if refused is not None:
            return refused
        job_id = _job_id(request)
        action = str(request.path_params["action"])
        if job_id is None or action not in JOB_ACTIONS:
            return error_page(request, 404, "no such job action")
        client = await holder.get()
        acted = await _act_on_job(client, action, job_id)
        problem = acted.problem
        back = _safe_back(request, f"/jobs/{job_id}")
        if action == "delete" and not problem:
            back = _safe_back(request, "/jobs")
            if back.startswith(f"/jobs/{job_id}"):
                back = "/jobs"
        past = {"retry": "retried", "cancel": "cancelled", "delete": "deleted"}[action]
        message = problem or acted.note or f"job {job_id} {past}"
        return flash.redirect(
            request,
            request.scope.get("root_path", "") + back,
            message,
            "error" if problem else "ok",
        )

    async def workflow_action(request: Request) -> Response:
        """Retry a workflow's failed tasks, or cancel its unfinished ones (what
        ``riverboat workflows retry|cancel`` do), and say how many tasks changed."""
        _form_data, refused = await _form(request)
        if refused is not None:
            return refused
        workflow_id = _workflow_id_of(request)
        action = str(request.path_params["action"])
        if action not in WORKFLOW_ACTIONS:
            return error_page(request, 404, "no such workflow action")
        client = await holder.get()
        try:
            before = await client.workflow_get(workflow_id)
            act = client.workflow_retry if action == "retry" else client.workflow_cancel
            after = await act(workflow_id)
        except (NotFoundError, InvalidInputError):
            return error_page(request, 404, f"workflow {workflow_id!r} not found")
        message, kind = workflow_action_message(action, before, after)
        back = _safe_back(request, _workflow_href(workflow_id))
        return flash.redirect(request, request.scope.get("root_path", "") + back, message, kind)

    async def jobs_bulk(request: Request) -> Response:
        form, refused = await _form(request)
        if refused is not None:
            return refused
        assert form is not None
        action = str(form.get("action", ""))
        back = _safe_back(request, "/jobs")
        root = request.scope.get("root_path", "")
        if action not in JOB_ACTIONS:
            return error_page(request, 400, f"{action!r} is not a job action")
        texts = [str(v) for v in form.getlist("job")]
        if not texts:
            return flash.redirect(request, root + back, "no job selected", "error")
        if not all(_is_id_text(v) for v in texts):
            return error_page(request, 400, "job ids must be numbers")
        # Each job once, in the order given (a form can post one id twice, or spelled
        # "1" and "01").
        ids = list(dict.fromkeys(int(v) for v in texts))
        client = await holder.get()
        acts = [await _act_on_job(client, action, v) for v in ids]
        # A workflow task retried before its failed dependency (the list shows newest
        # first) was cancelled again by it: retried again once the others were, for as
        # long as that changes something.
        while action == "retry":
            again = [n for n, acted in enumerate(acts) if acted.recancelled]
            redone = {n: await _act_on_job(client, action, ids[n]) for n in again}
            if not again or all(acted.recancelled for acted in redone.values()):
                break
            acts = [redone.get(n, acted) for n, acted in enumerate(acts)]
        problems = [acted.problem for acted in acts if acted.problem]
        past = {"retry": "retried", "cancel": "cancelled", "delete": "deleted"}[action]
        done = len(ids) - len(problems)
        message = f"{done} job{'s' if done != 1 else ''} {past}"
        if problems:
            message += "; " + "; ".join(problems[:5])
        return flash.redirect(request, root + back, message, "error" if problems else "ok")

    async def jobs_confirm(request: Request) -> Response:
        """Before acting on everything a filter matches: how many jobs that is, and a
        form that posts the same filters back."""
        if config.read_only:
            return error_page(request, 403, "this dashboard is read-only")
        action = str(request.query_params.get("action", ""))
        if action not in JOB_ACTIONS:
            return error_page(request, 400, f"{action!r} is not a job action")
        filters, problem = _filters_from(request.query_params)
        if problem:
            raise BadFilter(problem)
        client = await holder.get()
        kwargs = filters.list_kwargs()
        will = await client.job_count_matching(action=action, **kwargs)
        matching = await client.job_count_matching(**kwargs)
        return render(
            request,
            "confirm.html",
            title="Jobs",
            action=action,
            past={"retry": "retried", "cancel": "cancelled", "delete": "deleted"}[action],
            filters=filters,
            will=will,
            matching=matching,
            fields=filters.fields(),
            back=f"/jobs?{filters.query()}",
        )

    async def jobs_bulk_filter(request: Request) -> Response:
        """Retry, cancel or delete every job the posted filters match, in bounded
        batches (each one statement), and say how many."""
        form, refused = await _form(request)
        if refused is not None:
            return refused
        assert form is not None
        action = str(form.get("action", ""))
        if action not in JOB_ACTIONS:
            return error_page(request, 400, f"{action!r} is not a job action")
        filters, problem = _filters_from(form)
        if problem:
            raise BadFilter(problem)
        kwargs = {k: v for k, v in filters.list_kwargs().items() if v is not None}
        client = await holder.get()
        done = 0
        recancelled = 0
        if action == "delete":
            while True:
                batch = await client.job_delete_many(**kwargs, limit=BULK_BATCH, all=True)
                done += len(batch)
                if len(batch) < BULK_BATCH:
                    break
        else:
            bulk = client.job_retry_many if action == "retry" else client.job_cancel_many
            after_id: int | None = 0
            while after_id is not None:
                result = await bulk(**kwargs, limit=BULK_BATCH, after_id=after_id, all=True)
                if action == "retry":
                    recancelled += sum(1 for job in result.jobs if cancelled_by_dependency(job))
                done += len(result.jobs)
                after_id = result.next_after_id
        done -= recancelled
        past = {"retry": "retried", "cancel": "cancelled", "delete": "deleted"}[action]
        root = request.scope.get("root_path", "")
        message = f"{done:,} job{'s' if done != 1 else ''} {past} ({filters.describe()})"
        if recancelled:
            # Workflow tasks whose dependency, outside the filter, still failed: the
            # retry cancelled them again at once, which is no retry.
            message += (
                f"; {recancelled:,} workflow task{'s' if recancelled != 1 else ''} cancelled "
                "again: a dependency still failed (retry that task, or the workflow)"
            )
        kind = "error" if recancelled and not done else "ok"
        return flash.redirect(request, f"{root}/jobs?{filters.query()}", message, kind)

    async def queue_action(request: Request) -> Response:
        _form_data, refused = await _form(request)
        if refused is not None:
            return refused
        name = str(request.path_params["name"])
        action = str(request.path_params["action"])
        if action not in ("pause", "resume"):
            return error_page(request, 404, "no such queue action")
        client = await holder.get()
        root = request.scope.get("root_path", "")
        try:
            if action == "pause":
                await client.queue_pause(name)
            else:
                await client.queue_resume(name)
        except (NotFoundError, InvalidInputError) as exc:
            return flash.redirect(request, root + "/", str(exc), "error")
        past = "paused" if action == "pause" else "resumed"
        said = f"every queue {past}" if name == "*" else f"queue {name} {past}"  # River's '*'
        return flash.redirect(request, root + _safe_back(request, "/"), said)

    async def workers(request: Request) -> Response:
        from riverboat.ui.workers import workers_context

        client = await holder.get()
        return render(request, "workers.html", title="Workers", **await workers_context(client))

    async def periodic(request: Request) -> Response:
        from riverboat.ui.periodic import periodic_context

        client = await holder.get()
        return render(request, "periodic.html", title="Periodic", **await periodic_context(client))

    def guarded(
        endpoint: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            try:
                # Each database call must answer within CALL_TIMEOUT: a database that
                # stopped answering without closing its connections (a stalled proxy, a
                # partitioned host) held a page's request for ever.
                with call_deadline(CALL_TIMEOUT):
                    return await endpoint(request)
            except (InvalidInputError, BadFilter) as exc:
                return error_page(request, 400, str(exc))
            except DeadlineExceededError as exc:
                return error_page(request, 503, f"the database did not answer: {exc}")
            except RiverboatError as exc:
                return error_page(request, 503, f"the database call failed: {exc}")

        return run

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await holder.close()

    routes = [
        Route("/", guarded(overview)),
        Route("/jobs", guarded(jobs)),
        Route("/workers", guarded(workers)),
        Route("/periodic", guarded(periodic)),
        Route("/jobs/bulk", guarded(jobs_bulk), methods=["POST"]),
        Route("/jobs/confirm", guarded(jobs_confirm)),
        Route("/jobs/bulk-filter", guarded(jobs_bulk_filter), methods=["POST"]),
        Route("/jobs/{job_id}", guarded(job_detail)),
        Route("/jobs/{job_id}/{action}", guarded(job_action), methods=["POST"]),
        # A queue name may hold "/" (River allows it): matched whole, as workflow ids
        # are; its pause and resume were a 404.
        Route("/queues/{name:path}/{action}", guarded(queue_action), methods=["POST"]),
        Route("/workflows", guarded(workflows)),
        # A workflow id may hold "/" (ids other clients write): matched whole, so its
        # link (the id's "/" left as it is) opens its page, and an action posts to
        # /workflows/<id>/<action>; they were a 405 and a 404.
        Route("/workflow", guarded(workflow_detail)),
        Route("/workflow/{action}", guarded(workflow_action), methods=["POST"]),
        Route("/workflows/{workflow_id:path}/{action}", guarded(workflow_action), methods=["POST"]),
        Route("/workflows/{workflow_id:path}", guarded(workflow_detail)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app: ASGIApp = Starlette(routes=routes, lifespan=lifespan)
    if token is not None:
        app = _AuthMiddleware(app, token)
    app = _SecurityHeadersMiddleware(_HostCheckMiddleware(app, allowed_hosts))
    return Dashboard(app, holder.close)
