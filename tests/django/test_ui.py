"""The dashboard mounted in a Django project with ``include("riverboat.contrib.django.urls")``.

On Postgres in this process (Django's test client, a PERMISSION callable standing in for
a login), and on SQLite in a small Django project of its own with real users, sessions
and logins (a subprocess: this process's Django is configured for Postgres).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")

from django.conf import settings
from django.http import HttpRequest
from django.test import Client as DjangoTestClient
from django.test import override_settings

import riverboat
from riverboat import InvalidInputError
from riverboat.contrib.django.ui import close_dashboards, dashboard_settings
from riverboat.drivers.django import DjangoDriver

PREFIX = "/ops/riverboat"
REPO = Path(__file__).resolve().parents[2]


def staff_header(request: HttpRequest) -> bool:
    return bool(request.headers.get("X-Test-Staff") == "yes")


@pytest.fixture
def ui(dj: str) -> Iterator[DjangoTestClient]:
    conf = {**settings.RIVERBOAT, "UI": {"PERMISSION": staff_header}}
    with override_settings(
        RIVERBOAT=conf, ROOT_URLCONF="tests.django.testapp.urls", ALLOWED_HOSTS=["testserver"]
    ):
        try:
            yield DjangoTestClient(headers={"X-Test-Staff": "yes"})
        finally:
            close_dashboards()


def _cancelled_job(schema: str, args: dict[str, Any]) -> int:
    client = riverboat.Client(DjangoDriver(schema=schema))
    job = client.insert(args, riverboat.InsertOpts(queue="reports"), kind="ui_probe").job
    client.job_cancel(job.id)
    return job.id


def test_pages_render_under_the_include_prefix(ui: DjangoTestClient, pg_schema: str) -> None:
    job_id = _cancelled_job(pg_schema, {"n": 1})
    client = riverboat.Client(DjangoDriver(schema=pg_schema))
    client.insert({"n": 0}, riverboat.InsertOpts(queue="reports"), kind="ui_waiting")
    overview = ui.get(PREFIX + "/")
    assert overview.status_code == 200
    page = overview.content.decode()
    assert "reports" in page
    assert f'href="{PREFIX}/jobs' in page  # links carry the mount prefix
    listing = ui.get(PREFIX + "/jobs", {"state": "cancelled"}).content.decode()
    assert "ui_probe" in listing and f"{PREFIX}/jobs/{job_id}" in listing
    detail = ui.get(f"{PREFIX}/jobs/{job_id}")
    assert detail.status_code == 200 and "ui_probe" in detail.content.decode()
    assert ui.get(PREFIX + "/static/htmx.min.js").status_code == 200
    assert ui.get(PREFIX + "/jobs/999999999").status_code == 404
    bad = ui.get(PREFIX + "/jobs", {"state": "nope"})
    assert bad.status_code == 400 and "is not a job state" in bad.content.decode()


def test_escapes_job_content(ui: DjangoTestClient, pg_schema: str) -> None:
    job_id = _cancelled_job(pg_schema, {"html": "<img src=x onerror=alert(1)></script>"})
    page = ui.get(f"{PREFIX}/jobs/{job_id}").content.decode()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_retry_through_django_with_the_dashboards_csrf(
    ui: DjangoTestClient, pg_schema: str
) -> None:
    job_id = _cancelled_job(pg_schema, {"n": 2})
    ui.get(f"{PREFIX}/jobs/{job_id}")  # sets the dashboard's CSRF cookie
    token = ui.cookies["riverboat_csrf"].value
    client = riverboat.Client(DjangoDriver(schema=pg_schema))

    refused = ui.post(f"{PREFIX}/jobs/{job_id}/retry", {"csrf": "forged" + token[6:]})
    assert refused.status_code == 403
    job = client.job_get(job_id)
    assert job is not None and job.state is riverboat.JobState.CANCELLED

    done = ui.post(f"{PREFIX}/jobs/{job_id}/retry", {"csrf": token})
    assert done.status_code == 303
    assert done["Location"].startswith(f"{PREFIX}/jobs/{job_id}")
    job = client.job_get(job_id)
    assert job is not None and job.state is riverboat.JobState.AVAILABLE


def test_allowed_hosts_and_anti_framing_headers(ui: DjangoTestClient, pg_schema: str) -> None:
    """The mount answers only ALLOWED_HOSTS (a rebound name gets Django's 400, even for a
    POST carrying a valid token) and its pages forbid framing and sniffing."""
    job_id = _cancelled_job(pg_schema, {"n": 3})
    page = ui.get(PREFIX + "/")
    assert page.status_code == 200
    assert page["X-Frame-Options"] == "DENY"
    assert page["X-Content-Type-Options"] == "nosniff"
    assert "frame-ancestors 'none'" in page["Content-Security-Policy"]
    token = ui.cookies["riverboat_csrf"].value
    assert ui.get(PREFIX + "/", headers={"Host": "rebind.evil.example"}).status_code == 400
    refused = ui.post(
        f"{PREFIX}/jobs/{job_id}/retry",
        {"csrf": token},
        headers={"Host": "rebind.evil.example", "Origin": "http://rebind.evil.example"},
    )
    assert refused.status_code == 400
    client = riverboat.Client(DjangoDriver(schema=pg_schema))
    job = client.job_get(job_id)
    assert job is not None and job.state is riverboat.JobState.CANCELLED


def test_pause_a_queue(ui: DjangoTestClient, pg_schema: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:  # the row a producer makes when it starts
        cursor.execute(
            "INSERT INTO river_queue (name, created_at, metadata, updated_at)"
            " VALUES ('reports', now(), '{}', now())"
        )
    client = riverboat.Client(DjangoDriver(schema=pg_schema))
    ui.get(PREFIX + "/")
    token = ui.cookies["riverboat_csrf"].value
    answer = ui.post(f"{PREFIX}/queues/reports/pause", {"csrf": token})
    assert answer.status_code == 303
    queue = client.queue_get("reports")
    assert queue is not None and queue.paused_at is not None


def test_permission_and_read_only(dj: str, pg_schema: str) -> None:
    job_id = _cancelled_job(pg_schema, {"n": 4})
    ui_conf = {"PERMISSION": "tests.django.test_ui:staff_header", "READ_ONLY": True}
    conf = {**settings.RIVERBOAT, "UI": ui_conf}
    with override_settings(
        RIVERBOAT=conf, ROOT_URLCONF="tests.django.testapp.urls", ALLOWED_HOSTS=["testserver"]
    ):
        try:
            assert DjangoTestClient().get(PREFIX + "/").status_code == 403
            staff = DjangoTestClient(headers={"X-Test-Staff": "yes"})
            page = staff.get(f"{PREFIX}/jobs/{job_id}").content.decode()
            assert "Retry" not in page
            token = staff.cookies["riverboat_csrf"].value
            refused = staff.post(f"{PREFIX}/jobs/{job_id}/retry", {"csrf": token})
            assert refused.status_code == 403
        finally:
            close_dashboards()


@pytest.mark.parametrize(
    ("ui_conf", "message"),
    [
        ({"READ_ONLY": "yes"}, "must be True or False"),
        ({"COUNT_CAP": 0}, "positive int"),
        ({"PERMISSON": None}, "unknown keys"),
        ({"PERMISSION": "nodots"}, "package.module:attr"),
        ({"PERMISSION": 3}, "callable"),
    ],
)
def test_bad_settings_are_named(dj: str, ui_conf: dict[str, Any], message: str) -> None:
    with override_settings(RIVERBOAT={**settings.RIVERBOAT, "UI": ui_conf}):
        with pytest.raises(InvalidInputError, match=message):
            dashboard_settings()


def test_without_auth_middleware_the_default_permission_says_what_to_do(dj: str) -> None:
    with override_settings(ROOT_URLCONF="tests.django.testapp.urls", ALLOWED_HOSTS=["testserver"]):
        with pytest.raises(InvalidInputError, match="AuthenticationMiddleware"):
            DjangoTestClient().get(PREFIX + "/")


SQLITE_PROJECT = """
import sqlite3
import sys

if sqlite3.sqlite_version_info < (3, 45):
    # River's SQLite schema needs jsonb (SQLite 3.45); Django's backend imports the
    # stdlib module, so give it sqlean's newer SQLite, as docs/django.md says.
    import sqlean

    sys.modules["sqlite3"] = sqlean
    sys.modules["sqlite3.dbapi2"] = sqlean.dbapi2

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    USE_TZ=True,
    SECRET_KEY="riverboat-ui-test",
    ALLOWED_HOSTS=["testserver"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DB}},
    INSTALLED_APPS=[
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "riverboat.contrib.django",
    ],
    MIDDLEWARE=[
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
    ],
    ROOT_URLCONF="__main__",  # the urlpatterns below
    LOGIN_URL="/login/",
    RIVERBOAT={},
)
django.setup()

from django.http import HttpResponse
from django.urls import include, path

urlpatterns = [
    path("ops/riverboat/", include("riverboat.contrib.django.urls")),
    path("login/", lambda request: HttpResponse("the site's login page")),
]

from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from riverboat.contrib.django.settings import get_client
from riverboat.contrib.django.ui import close_dashboards

call_command("migrate", verbosity=0)
call_command("riverboat", "migrate")
User.objects.create_user("staff", password="pw", is_staff=True)
User.objects.create_user("plain", password="pw")
job = get_client().insert({"n": 1}, kind="sqlite_probe").job
get_client().job_cancel(job.id)
# Django's SQLite connection turns columns declared timestamp into datetimes: read as
# such, not as year 1 (nor None).
from datetime import UTC, datetime, timedelta

stored = get_client().job_get(job.id)
for moment in (job.created_at, job.scheduled_at, stored.created_at, stored.finalized_at):
    assert moment is not None and abs(moment - datetime.now(UTC)) < timedelta(minutes=5), moment

anonymous = Client().get("/ops/riverboat/")
assert anonymous.status_code == 302, anonymous.status_code
assert anonymous["Location"] == "/login/?next=/ops/riverboat/", anonymous["Location"]

# Django's default LOGIN_URL, which this site (as a default project) does not route:
# no redirect to a 404, a 403 that says why.
from django.test import override_settings

with override_settings(LOGIN_URL="/accounts/login/"):
    stranger = Client().get("/ops/riverboat/")
assert stranger.status_code == 403, stranger.status_code
assert b"log in as a staff user first" in stranger.content, stranger.content

plain = Client()
plain.login(username="plain", password="pw")
assert plain.get("/ops/riverboat/").status_code == 403

staff = Client(enforce_csrf_checks=True)
staff.login(username="staff", password="pw")
page = staff.get(f"/ops/riverboat/jobs/{job.id}")
assert page.status_code == 200 and "sqlite_probe" in page.content.decode()
token = staff.cookies["riverboat_csrf"].value
done = staff.post(f"/ops/riverboat/jobs/{job.id}/retry", {"csrf": token})
assert done.status_code == 303, done.status_code
assert get_client().job_get(job.id).state.value == "available"
close_dashboards()
print("sqlite dashboard ok")
"""


def test_sqlite_project_with_real_logins(tmp_path: Path) -> None:
    script = tmp_path / "project.py"
    script.write_text(f"DB = {str(tmp_path / 'app.db')!r}\n" + textwrap.dedent(SQLITE_PROJECT))
    inherited = os.environ.get("PYTHONPATH")
    path = str(REPO) + (os.pathsep + inherited if inherited else "")
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "sqlite dashboard ok" in done.stdout
