"""``manage.py riverboat migrate`` and ``manage.py riverboat worker``."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

import riverboat
from riverboat.drivers.django import DjangoDriver
from riverboat.migrations._files import load_bundles
from tests.django import djsetup
from tests.django.helpers import rows

# The latest version of riverboat's own migration line.
RIVERBOAT_LATEST = max(load_bundles("postgres", "riverboat"))


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("riverboat", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def empty_schema(django_configured: str, pg_url: str) -> Iterator[str]:
    schema = "t_" + uuid.uuid4().hex[:16]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        with djsetup.use_schema(schema):
            yield schema
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_migrate_list_up_down(empty_schema: str, pg_url: str) -> None:
    listing = _run("migrate", "list")
    assert "current version: 0 (latest 8)" in listing
    assert "  002  initial schema" in listing
    out = _run("migrate", "up", "--target-version", "3")
    assert "applied 001" in out and "applied 003" in out and "applied 004" not in out
    out = _run("migrate")  # up is the default action
    assert "applied 008" in out and "applied riverboat 001" in out
    assert "current version: 8" in out
    assert "nothing to apply" in _run("migrate", "up")
    assert "* 008" in _run("migrate", "list")
    # riverboat's own line first (it sits on top), one version per step.
    for version in range(RIVERBOAT_LATEST, 0, -1):
        out = _run("migrate", "down")
        assert f"reverted riverboat {version:03d}" in out and "current version: 8" in out
    out = _run("migrate", "down")
    assert "reverted 008" in out and "current version: 7" in out
    out = _run("migrate", "down", "--target-version", "0")
    assert "reverted 001" in out
    assert rows(pg_url, empty_schema, "SELECT to_regclass('river_job')") == [(None,)]


def test_migrate_errors_become_command_errors(empty_schema: str) -> None:
    with pytest.raises(CommandError, match="target_version"):
        _run("migrate", "up", "--target-version", "99")


def test_a_mistyped_down_target_is_refused_before_anything_is_reverted(
    empty_schema: str, pg_url: str
) -> None:
    """riverboat's own line is unwound first on the way down: a target only River's line
    knows to refuse was checked after every riverboat_* table was dropped."""
    _run("migrate")
    with pytest.raises(CommandError, match="9 is not a valid migration version"):
        _run("migrate", "down", "--target-version", "9")
    assert "current version: 8" in _run("migrate", "list")
    own = rows(pg_url, empty_schema, "SELECT to_regclass('riverboat_client')")
    assert own != [(None,)]


def test_worker_works_the_configured_queues(dj: str, pg_url: str, pg_schema: str) -> None:
    from tests.django.testapp.models import Counter

    Counter.objects.create(name="w")
    client = riverboat.Client(DjangoDriver(schema=pg_schema))
    for _ in range(3):
        client.insert({"name": "w"}, kind="bump")
    conf = {
        "SCHEMA": pg_schema,
        "QUEUES": {"default": {"max_workers": 2}},
        "WORKERS": "tests.django.testapp.jobs:workers",
        "CLIENT_OPTIONS": {"fetch_poll_interval": 0.1},
    }
    with override_settings(RIVERBOAT=conf):
        _run("worker", "--exit-when-idle", "--log-level", "WARNING")
    assert Counter.objects.get(name="w").n == 3
    states = rows(pg_url, pg_schema, "SELECT state::text, count(*) FROM river_job GROUP BY 1")
    assert states == [("completed", 3)]


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        # Each was a ValueError from dict() or an AttributeError from getattr().
        ({"QUEUES": ["default", "mail"]}, r"RIVERBOAT\['QUEUES'\]: must be a dict of queue"),
        ({"CLIENT_OPTIONS": ["job_timeout"]}, r"RIVERBOAT\['CLIENT_OPTIONS'\]: must be a dict"),
        ({"SCHEMA": 5}, r"RIVERBOAT\['SCHEMA'\]: must be a str"),
        (
            {"WORKERS": "tests.django.testapp.jobs:workrs"},
            r"tests\.django\.testapp\.jobs has no attribute 'workrs'",
        ),
        (
            {"WORKERS": "tests.django.nosuchmodule:workers"},
            r"no module named 'tests\.django\.nosuch",
        ),
    ],
)
def test_a_mistyped_setting_is_a_command_error_naming_it(
    django_configured: str, conf: dict[str, object], expected: str
) -> None:
    with override_settings(RIVERBOAT=conf), pytest.raises(CommandError, match=expected):
        _run("worker", "--exit-when-idle")


def test_worker_log_level_is_checked(dj: str) -> None:
    """As riverboat worker's: a level logging does not know is a usage error, not a
    ValueError traceback from logging once the worker starts."""
    with pytest.raises(CommandError, match="is not a logging level"):
        _run("worker", "--exit-when-idle", "--log-level", "nonsense")
