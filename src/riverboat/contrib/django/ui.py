"""The dashboard (:mod:`riverboat.ui`) as a Django view, for a URLconf include::

    urlpatterns = [
        path("riverboat/", include("riverboat.contrib.django.urls")),
    ]

The dashboard is an ASGI app; the view hands each request to it and returns its
response. The app runs on one event loop in a daemon thread of its own (one per
process, started on the first request), not on the request's thread: under WSGI Django
runs an async view on a fresh event loop per request, and the dashboard's connection
pool must stay on the loop that opened it. The view is therefore a plain sync view and
works the same under WSGI and ASGI.

Who may see it: by default active staff users (``request.user.is_staff``, as Django's
admin), anonymous visitors are sent to ``settings.LOGIN_URL`` when the site routes it,
else to the admin's login page, else answered 403. ``RIVERBOAT["UI"]``
configures it::

    RIVERBOAT = {
        "UI": {
            "PERMISSION": "myproject.perms:can_see_jobs",  # callable(request) -> bool
            "READ_ONLY": False,   # hide and refuse every action
            "COUNT_CAP": 10_000,  # job counts per state stop here ("10,000+")
        },
    }

The dashboard connects to the same database as ``RIVERBOAT["DATABASE_ALIAS"]`` with its
own async connection (psycopg for PostgreSQL, riverboat's SQLite driver for SQLite) and
uses ``RIVERBOAT["SCHEMA"]``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from riverboat.client import AsyncClient
from riverboat.contrib.django.settings import get_driver, get_settings, load_object
from riverboat.errors import InvalidInputError, MissingDependencyError

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponse

    from riverboat.ui import Dashboard

__all__ = ["DashboardSettings", "close_dashboards", "dashboard_settings", "dashboard_view"]

_UI_KEYS = frozenset({"PERMISSION", "READ_ONLY", "COUNT_CAP"})
# How long a request may wait for the dashboard's answer before the view gives up with
# a 504 (the database is unreachable, say); the pool's own timeouts are shorter.
RESPONSE_TIMEOUT_SECONDS = 60.0
# Request headers an ASGI scope carries as fields of its own, or that Django recomputes.
_HOP_BY_HOP = frozenset({b"content-length", b"transfer-encoding", b"connection"})


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    """``RIVERBOAT["UI"]``, validated."""

    permission: Callable[[HttpRequest], bool] | None = None
    read_only: bool = False
    count_cap: int | None = None


def dashboard_settings() -> DashboardSettings:
    """``RIVERBOAT["UI"]`` read now (so ``override_settings`` applies), validated."""
    raw = get_settings().ui
    if not isinstance(raw, Mapping):
        raise InvalidInputError("RIVERBOAT['UI']", "must be a dict")
    unknown = set(raw) - _UI_KEYS
    if unknown:
        raise InvalidInputError("RIVERBOAT['UI']", f"unknown keys {sorted(unknown)}")
    permission = raw.get("PERMISSION")
    if isinstance(permission, str):
        permission = load_object(permission, setting="RIVERBOAT['UI']['PERMISSION']")
    if permission is not None and not callable(permission):
        raise InvalidInputError(
            "RIVERBOAT['UI']['PERMISSION']", "must be a callable(request) -> bool or its path"
        )
    read_only = raw.get("READ_ONLY", False)
    if not isinstance(read_only, bool):
        raise InvalidInputError("RIVERBOAT['UI']['READ_ONLY']", "must be True or False")
    count_cap = raw.get("COUNT_CAP")
    if count_cap is not None and (
        not isinstance(count_cap, int) or isinstance(count_cap, bool) or count_cap < 1
    ):
        raise InvalidInputError("RIVERBOAT['UI']['COUNT_CAP']", "must be a positive int")
    return DashboardSettings(permission=permission, read_only=read_only, count_cap=count_cap)


def _staff_only(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    if user is None:
        raise InvalidInputError(
            "RIVERBOAT['UI']['PERMISSION']",
            "the dashboard checks request.user.is_staff by default: add "
            "django.contrib.auth's AuthenticationMiddleware, or set a PERMISSION callable",
        )
    return bool(user.is_active and user.is_staff)


class _DashboardLoop:
    """One event loop in a daemon thread, running the dashboards this process serves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._apps: dict[tuple[Any, ...], tuple[Dashboard, AsyncClient]] = {}

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="riverboat-ui-django", daemon=True
            )
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    def app_for(self, conf: DashboardSettings) -> tuple[Dashboard, asyncio.AbstractEventLoop]:
        """The dashboard for the current settings (tests change them between requests)."""
        try:
            from riverboat.ui import create_app
        except ImportError as exc:
            raise MissingDependencyError("riverboat's dashboard", "ui", exc) from exc
        base = get_settings()
        key = (base.database_alias, base.schema, conf.read_only, conf.count_cap)
        with self._lock:
            loop = self._running_loop()
            entry = self._apps.get(key)
            if entry is None:
                # Django checked the Host against ALLOWED_HOSTS (request.get_host() in
                # dashboard_view) before the request reaches the app.
                options: dict[str, Any] = {"read_only": conf.read_only, "allowed_hosts": ["*"]}
                if conf.count_cap is not None:
                    options["count_cap"] = conf.count_cap
                client = _dashboard_client()
                entry = self._apps[key] = (create_app(client=client, **options), client)
            return entry[0], loop

    def close(self) -> None:
        """Stop the loop and close every dashboard's client (tests; process exit)."""
        with self._lock:
            loop, self._loop = self._loop, None
            thread, self._thread = self._thread, None
            apps, self._apps = list(self._apps.values()), {}
        if loop is None or thread is None:
            return

        async def close_all() -> None:
            for _app, client in apps:
                await client.close()

        asyncio.run_coroutine_threadsafe(close_all(), loop).result(RESPONSE_TIMEOUT_SECONDS)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def _dashboard_client() -> AsyncClient:
    """An AsyncClient (inserts and admin only, no workers) on the configured alias."""
    driver = get_driver()
    if driver.vendor == "sqlite":
        from django.db import connections

        from riverboat.drivers.sqlite import AsyncSqliteDriver

        name = str(connections[driver.alias].settings_dict["NAME"])
        sqlite = AsyncSqliteDriver(name, schema=driver.dialect.schema)
        return AsyncClient(sqlite, owns_driver=True)  # made here: close() closes it too
    return AsyncClient(driver.async_driver(max_pool_size=4), owns_driver=True)


_dashboards = _DashboardLoop()


def close_dashboards() -> None:
    """Close the dashboards' database connections and stop their thread. Optional: the
    thread is a daemon; the next request starts it again."""
    _dashboards.close()


def _scope(request: HttpRequest, subpath: str) -> dict[str, Any]:
    """The ASGI HTTP scope of a Django request, mounted where the URLconf put the view."""
    root = request.path[: len(request.path) - len(subpath)].rstrip("/")
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in request.headers.items()
    ]
    host = request.get_host()
    headers = [(n, v) for n, v in headers if n not in _HOP_BY_HOP and n != b"host"]
    headers.append((b"host", host.encode("latin-1")))
    server_name, _, port = host.rpartition(":") if ":" in host else (host, "", "")
    default_port = 443 if request.is_secure() else 80
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method or "GET",
        "scheme": request.scheme or "http",
        "path": root + "/" + subpath,
        "raw_path": (root + "/" + subpath).encode("utf-8"),
        "root_path": root,
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": headers,
        "client": (request.META.get("REMOTE_ADDR") or "127.0.0.1", 0),
        "server": (
            server_name or host,
            int(port) if port.isascii() and port.isdigit() else default_port,
        ),
    }


async def _call(
    app: Dashboard, scope: dict[str, Any], body: bytes
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Run one request through the ASGI app and collect its whole response."""
    sent_body = False
    finished = asyncio.Event()
    status = 500
    headers: list[tuple[bytes, bytes]] = []
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        # A response that listens for the client going away hears it only once the
        # response is complete: the Django side holds the connection until then.
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: Mapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
            headers.extend((bytes(k), bytes(v)) for k, v in message.get("headers", ()))
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                finished.set()

    try:
        await app(scope, receive, send)
    finally:
        finished.set()
    return status, headers, b"".join(chunks)


def _login_url() -> str | None:
    """Where to send an anonymous visitor: ``settings.LOGIN_URL`` when this site routes
    it (a default project has no ``/accounts/login/``), else the admin's login page when
    the admin is mounted, else nowhere (the view answers 403 and says why)."""
    from django.conf import settings
    from django.urls import NoReverseMatch, Resolver404, resolve, reverse

    configured = str(settings.LOGIN_URL)
    if "://" in configured or not configured.startswith("/"):
        # Another site's URL, or a URL name: Django resolves names itself.
        if "://" in configured:
            return configured
        try:
            return str(reverse(configured))
        except NoReverseMatch:
            pass
    else:
        try:
            resolve(configured.split("?", 1)[0])
            return configured
        except Resolver404:
            pass
    try:
        return str(reverse("admin:login"))
    except NoReverseMatch:
        return None


def dashboard_view(request: HttpRequest, subpath: str = "") -> HttpResponse:
    """The Django view behind ``riverboat.contrib.django.urls``."""
    from django.http import HttpResponse, HttpResponseForbidden

    conf = dashboard_settings()
    # Raises DisallowedHost (a 400 from Django) for a Host outside ALLOWED_HOSTS, before
    # anything else: the dashboard app itself accepts any host behind this check.
    request.get_host()
    allowed = (conf.permission or _staff_only)(request)
    if not allowed:
        user = getattr(request, "user", None)
        if user is not None and not user.is_authenticated:
            # Only reached with django.contrib.auth installed (it made request.user).
            login = _login_url()
            if login is not None:
                from django.contrib.auth.views import redirect_to_login

                return redirect_to_login(request.get_full_path(), login)
            return HttpResponseForbidden(
                "riverboat ui: log in as a staff user first (this site routes neither "
                "settings.LOGIN_URL nor Django's admin login)"
            )
        return HttpResponseForbidden("riverboat ui: you may not see this dashboard")
    app, loop = _dashboards.app_for(conf)
    future = asyncio.run_coroutine_threadsafe(
        _call(app, _scope(request, subpath), request.body), loop
    )
    try:
        status, headers, body = future.result(RESPONSE_TIMEOUT_SECONDS)
    except concurrent.futures.TimeoutError:
        future.cancel()
        return HttpResponse(
            "riverboat ui: the dashboard did not answer in time",
            status=504,
            content_type="text/plain",
        )
    response = HttpResponse(body, status=status)
    for name, value in headers:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        if key == "set-cookie":
            response.cookies.load(text)
        elif key not in ("content-length", "transfer-encoding", "connection"):
            response[key] = text
    return response
