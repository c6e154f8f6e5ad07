"""Fixtures for the dashboard: a seeded database (SQLite file or Postgres schema), the app
served by uvicorn on a free port in a thread, and Debian's chromium driven by playwright.

The browser is the system's (/usr/bin/chromium, which .ci/run installs): playwright's own
browser download is never used. Outside CI a missing browser skips the browser tests
with the reason; with CI=true it fails them.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import riverboat
from riverboat._url import driver_from_url
from tests.ui.seed import Seeded, seed

uvicorn = pytest.importorskip("uvicorn")

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "ui"


@dataclass
class SeededDb:
    name: str  # "sqlite" or "postgres"
    url: str
    schema: str | None
    jobs: Seeded

    def client(self) -> riverboat.Client:
        return riverboat.Client(driver_from_url(self.url, schema=self.schema))


# For a browser test whose subject is the page's own behaviour (scripts, refreshes,
# escaping, headers, styles), the same on either database: it runs on SQLite only. Each
# browser test costs chromium one to four seconds of CPU, and the suite is bound by the
# 2-core VM's CPU. What each page reads from the database stays checked on both, by
# the other browser tests (each page has one) and the HTTP tests of test_security.py.
same_on_every_database = pytest.mark.parametrize("seeded", ["sqlite"], indirect=True)


@pytest.fixture(params=["sqlite", "postgres"])
def seeded(request: pytest.FixtureRequest) -> SeededDb:
    if request.param == "sqlite":
        url: str = request.getfixturevalue("sqlite_url")
        schema = None
    else:
        url = request.getfixturevalue("pg_url")
        schema = request.getfixturevalue("pg_schema")

    def seed_now() -> Seeded:
        client = riverboat.Client(driver_from_url(url, schema=schema))
        try:
            return seed(client)
        finally:
            client.driver.close()

    # work_job runs its own event loop, and playwright's sync API keeps one running on
    # this thread once the browser is up: seed on another thread.
    with ThreadPoolExecutor(max_workers=1) as pool:
        jobs = pool.submit(seed_now).result()
    return SeededDb(request.param, url, schema, jobs)


class Served:
    """The app on 127.0.0.1:<free port>, in a thread, stopped at teardown."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        # Listening before the server thread starts: a request made at once waits in the
        # backlog until uvicorn accepts it, so nothing has to poll for "started".
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[Served] = []

    def start(app: Any) -> Served:
        served = Served(app)
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


def _chromium() -> str | None:
    for candidate in (os.environ.get("RIVERBOAT_CHROMIUM"), "chromium", "chromium-browser"):
        if candidate and (path := shutil.which(candidate)):
            return path
    return None


class Chromium:
    """Playwright's driver, chromium, one context and its keeper page, shared by a run of
    browser tests (the BROWSER_MODULES of tests/conftest.py, together at the front of
    one xdist worker's slice): started by the first test that asks for ``browser``,
    stopped by tests/conftest.py's ``pytest_runtest_teardown`` as soon as the next test
    does not use it. While playwright's sync API is up it keeps an event loop running
    on this thread, and an async test (pytest-asyncio) could not start its own.

    One chromium, not one per module: each launch cost its driver and browser start-up
    again. The keeper is a page of the dashboards' site (http://127.0.0.1, whatever
    the port; its content made up by playwright, no server behind it) that stays open:
    a test's page of that site then joins the keeper's renderer process instead of
    starting one, and closing it ends nothing. Starting a renderer was about half of
    a test page's cost to chromium."""

    KEEPER = "http://127.0.0.1:9/keeper"

    def __init__(self) -> None:
        self._playwright: Any = None
        self.browser: Any = None
        self.context: Any = None

    def start(self, executable: str) -> None:
        if self._playwright is not None:
            return
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        try:
            self.browser = self._playwright.chromium.launch(
                executable_path=executable,
                # As root (CI containers) chromium refuses to start inside its sandbox.
                args=["--no-sandbox", "--disable-dev-shm-usage"],
            )
            # One context, its cookies cleared before each test: a context per test made
            # chromium start its renderer processes anew each time. The dashboard keeps
            # nothing in the browser but cookies (no page pushes history, so htmx's
            # history cache stays empty); a test that needs other settings (a color
            # scheme, a phone's width) makes its own context.
            self.context = self.browser.new_context(viewport={"width": 1280, "height": 860})
            keeper = self.context.new_page()
            keeper.route(
                self.KEEPER,
                lambda route: route.fulfill(body="<!doctype html><title>keeper</title>"),
            )
            keeper.goto(self.KEEPER)
        except BaseException:
            self.stop()
            raise

    @property
    def started(self) -> bool:
        return self._playwright is not None

    def stop(self) -> None:
        if self._playwright is None:
            return
        try:
            if self.browser is not None:
                self.browser.close()
        finally:
            self._playwright.stop()
            self._playwright = self.browser = self.context = None


CHROMIUM = Chromium()


@pytest.fixture(scope="module")
def browser() -> Any:
    executable = _chromium()
    in_ci = os.environ.get("CI", "").lower() == "true"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        if in_ci:
            raise
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    if executable is None:
        if in_ci:
            pytest.fail("CI=true but no chromium on PATH: .ci/run installs Debian's chromium")
        pytest.skip("no chromium on PATH: apt-get install chromium (or set RIVERBOAT_CHROMIUM)")
    CHROMIUM.start(executable)
    return CHROMIUM.browser


@pytest.fixture(scope="module")
def browser_context(browser: Any) -> Any:
    return CHROMIUM.context


@pytest.fixture
def page(browser_context: Any) -> Iterator[Any]:
    browser_context.clear_cookies()
    opened = browser_context.new_page()
    yield opened
    opened.close()
