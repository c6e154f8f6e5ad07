"""docs/django.md's settings, exactly as written (its RIVERBOAT and TASKS blocks are
copied into a project's settings.py), in a Django project of its own on Postgres: a task
sent to the `emails` queue is worked by `manage.py riverboat worker --exit-when-idle`;
with the map pointing at a queue no worker serves, the worker says so at start."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg.conninfo
import pytest

from tests.docblocks import python_blocks

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "django.md"


def _block(containing: str) -> str:
    found = [code for _line, code in python_blocks(DOC) if containing in code]
    assert len(found) == 1, f"docs/django.md has {len(found)} blocks with {containing!r}"
    return found[0]


def _project(tmp_path: Path, pg_url: str, schema: str, tasks_block: str) -> Path:
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    root = tmp_path / "site"
    (root / "myapp").mkdir(parents=True)
    (root / "myapp" / "__init__.py").write_text("")
    (root / "myapp" / "jobs.py").write_text(
        "from riverboat import Workers\n\nworkers = Workers()\n"
    )
    (root / "myapp" / "tasks.py").write_text(
        textwrap.dedent(
            """
            from django_tasks import task

            @task(priority=10, queue_name="emails")
            def send_welcome(user_id: int) -> str:
                return f"sent to {user_id}"
            """
        )
    )
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": info.get("dbname", "postgres"),
        "USER": info.get("user", ""),
        "PASSWORD": info.get("password", ""),
        "HOST": info.get("host", ""),
        "PORT": str(info.get("port", "")),
        "OPTIONS": {"options": f"-c search_path={schema}"},
    }
    settings = "\n".join(
        [
            "SECRET_KEY = 'documented-settings'",
            "USE_TZ = True",
            f"DATABASES = {{'default': {database!r}}}",
            "# --- docs/django.md, as written ---",
            _block('RIVERBOAT = {\n    "DATABASE_ALIAS"'),
            tasks_block,
            "# --- the doc's '...' is the project's other apps ---",
            "INSTALLED_APPS = ['django_tasks', 'myapp', "
            "*[app for app in INSTALLED_APPS if app is not Ellipsis]]",
            f"RIVERBOAT['SCHEMA'] = {schema!r}",
        ]
    )
    (root / "settings.py").write_text(settings)
    (root / "manage.py").write_text(
        textwrap.dedent(
            """
            import os, sys
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
            from django.core.management import execute_from_command_line
            execute_from_command_line(sys.argv)
            """
        )
    )
    return root


def _run(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    inherited = os.environ.get("PYTHONPATH")
    path = os.pathsep.join([str(root), str(REPO), *([inherited] if inherited else [])])
    return subprocess.run(
        [sys.executable, *argv],
        cwd=root,
        env={**os.environ, "PYTHONPATH": path, "DJANGO_SETTINGS_MODULE": "settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )


ENQUEUE = """
import django
django.setup()
from myapp.tasks import send_welcome
result = send_welcome.enqueue(7)
print(result.id)
"""

RESULT = """
import sys
import django
django.setup()
from myapp.tasks import send_welcome
result = send_welcome.get_result(sys.argv[1])
print(result.status, result.return_value)
"""


def test_the_documented_settings_work_a_task_sent_to_emails(
    tmp_path: Path, pg_url: str, pg_schema: str
) -> None:
    pytest.importorskip("django_tasks")
    root = _project(tmp_path, pg_url, pg_schema, _block("TASKS = {"))
    enqueued = _run(root, "-c", ENQUEUE)
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = enqueued.stdout.strip()
    worked = _run(root, "manage.py", "riverboat", "worker", "--exit-when-idle")
    assert worked.returncode == 0, worked.stderr
    assert "WARNING" not in worked.stderr, worked.stderr
    assert re.search(r"started: queues default \(10 slots\), mail \(4 slots\)", worked.stderr)
    assert "(1 completed)" in worked.stderr, worked.stderr
    result = _run(root, "-c", RESULT, job_id)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("SUCCESSFUL sent to 7"), result.stdout


def test_a_task_queue_no_worker_serves_is_reported_at_start(
    tmp_path: Path, pg_url: str, pg_schema: str
) -> None:
    pytest.importorskip("django_tasks")
    stranded = _block("TASKS = {").replace('"QUEUE_MAP": {"emails": "mail"}', '"QUEUE_MAP": {}')
    assert stranded != _block("TASKS = {")
    root = _project(tmp_path, pg_url, pg_schema, stranded)
    worked = _run(root, "manage.py", "riverboat", "worker", "--exit-when-idle")
    assert worked.returncode == 0, worked.stderr
    assert (
        "WARNING riverboat.django: TASKS['default'] sends Django queue 'emails' to River "
        "queue 'emails', which this worker does not work (its queues: default, mail)"
    ) in worked.stderr, worked.stderr
