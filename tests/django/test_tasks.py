"""The Django tasks backend: ``@task`` functions become River jobs, run by the worker."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import override_settings
from django_tasks import TaskResultStatus, task_backends

import riverboat
from riverboat.contrib.django.tasks import (
    RiverboatBackend,
    TaskWorkers,
    django_priority_to_river,
)
from riverboat.drivers.django import DjangoDriver

# The exceptions the backend raises, found as it finds them: Django 6's django.tasks when
# present, else the django-tasks backport's (both can be installed side by side).
try:
    from django.tasks.exceptions import (  # type: ignore[import-not-found, unused-ignore]
        InvalidTask as InvalidTaskError,
    )
    from django.tasks.exceptions import (  # type: ignore[import-not-found, unused-ignore]
        TaskResultDoesNotExist,
    )
except ImportError:
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
from tests.django.helpers import job_count, rows


class Boom(Exception):
    pass


def _work(pg_schema: str, **options: object) -> None:
    conf = {
        "SCHEMA": pg_schema,
        "QUEUES": {"default": 2, "urgent": 1},
        "CLIENT_OPTIONS": {"fetch_poll_interval": 0.1},
        **options,
    }
    with override_settings(RIVERBOAT=conf):
        call_command(
            "riverboat",
            "worker",
            "--exit-when-idle",
            "--log-level",
            "WARNING",
            stdout=io.StringIO(),
        )


def test_backend_is_riverboat(dj: str) -> None:
    backend = task_backends["default"]
    assert isinstance(backend, RiverboatBackend)
    assert backend.supports_get_result and backend.supports_defer


def test_enqueue_in_atomic_then_the_worker_runs_it(dj: str, pg_url: str, pg_schema: str) -> None:
    from tests.django.testapp import tasks
    from tests.django.testapp.models import Counter

    Counter.objects.create(name="tasks")
    with pytest.raises(Boom), transaction.atomic():
        tasks.add.enqueue(100, 100)
        raise Boom
    assert job_count(pg_url, pg_schema) == 0

    with transaction.atomic():
        result = tasks.add.enqueue(2, b=3)
    assert result.status == TaskResultStatus.READY
    job = rows(pg_url, pg_schema, "SELECT kind, args::text, priority, queue FROM river_job")
    assert job == [
        ("tests.django.testapp.tasks.add", '{"args": [2], "kwargs": {"b": 3}}', 2, "default")
    ]
    _work(pg_schema)
    assert Counter.objects.get(name="tasks").n == 5
    done = tasks.add.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 5
    assert done.args == [2] and done.kwargs == {"b": 3}
    assert done.finished_at is not None and done.worker_ids
    result.refresh()
    assert result.return_value == 5


def test_priority_queue_context_and_defer(dj: str, pg_url: str, pg_schema: str) -> None:
    from tests.django.testapp import tasks

    urgent = tasks.urgent.enqueue("hi")
    ctx = tasks.with_context.enqueue(4)
    later = tasks.urgent.using(run_after=datetime.now(UTC) + timedelta(hours=1)).enqueue("x")
    got = dict(rows(pg_url, pg_schema, "SELECT id::text, queue || ':' || priority FROM river_job"))
    assert got[urgent.id] == "urgent:1" and got[ctx.id] == "default:2"
    _work(pg_schema)
    assert tasks.urgent.get_result(urgent.id).return_value == {"echo": "hi"}
    assert tasks.with_context.get_result(ctx.id).return_value == 41
    assert tasks.urgent.get_result(later.id).status == TaskResultStatus.READY


def test_failure_is_recorded(dj: str, pg_schema: str) -> None:
    from tests.django.testapp import tasks

    with override_settings(
        TASKS={
            "default": {
                "BACKEND": "riverboat.contrib.django.tasks.RiverboatBackend",
                "OPTIONS": {"MAX_ATTEMPTS": 1},
            }
        }
    ):
        result = tasks.explode.enqueue()
        _work(pg_schema)
        failed = tasks.explode.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in failed.errors] == ["builtins.KeyError"]
    assert failed.errors[0].exception_class is KeyError
    assert "boom" in failed.errors[0].traceback


def test_unknown_ids_and_bad_queues(dj: str) -> None:
    from tests.django.testapp import tasks

    backend = task_backends["default"]
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("123456")
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("not-an-id")
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("99999999999999999999")  # past int64
    with pytest.raises(InvalidTaskError):
        tasks.add.using(queue_name="Not A Queue")


def test_task_workers_keep_the_workers_kind_aliases() -> None:
    base = riverboat.Workers()

    @base.register("renamed", kind_aliases=["old_name"])
    def work(job: riverboat.Job[dict[str, object]]) -> None: ...

    workers = TaskWorkers(base)
    renamed = base.get("renamed")
    assert renamed is not None
    assert workers.get("old_name") is renamed and "old_name" in workers
    assert workers.known_kinds() == ["old_name", "renamed"]
    with pytest.raises(riverboat.InvalidInputError, match="already registered"):
        TaskWorkers(base).update(base)


def test_the_worker_works_a_renamed_workers_old_kind(dj: str, pg_url: str, pg_schema: str) -> None:
    """RIVERBOAT['WORKERS'] goes through the tasks backend's registry (TaskWorkers); jobs
    inserted under a worker's former kind (its kind_aliases) are still worked."""
    from tests.django.testapp.models import Counter

    Counter.objects.create(name="aliased")
    client = riverboat.Client(DjangoDriver(schema=pg_schema))
    for kind in ("bump", "bump_before_rename"):
        client.insert({"name": "aliased"}, kind=kind)
    _work(pg_schema, WORKERS="tests.django.testapp.jobs:workers")
    assert Counter.objects.get(name="aliased").n == 2
    states = rows(pg_url, pg_schema, "SELECT state::text, count(*) FROM river_job GROUP BY 1")
    assert states == [("completed", 2)]


def test_priority_mapping() -> None:
    assert [django_priority_to_river(p) for p in (100, 1, 0, -1, -50, -51, -100)] == [
        1,
        1,
        2,
        3,
        3,
        4,
        4,
    ]


def test_a_kind_imports_only_modules_of_the_project() -> None:
    """A kind is data (any client's, a Go service's): one that names a module outside
    the installed apps and the settings' package is not imported to look for a task.
    ``this`` prints the Zen of Python when imported."""
    import sys

    workers = TaskWorkers(riverboat.Workers())
    assert "this" not in sys.modules
    assert workers.get("this.is_a_go_kind") is None
    assert "this" not in sys.modules
    assert workers.get("tests.django.testapp.tasks.add") is not None


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"MAX_ATTEMPT": 3}, "unknown option 'MAX_ATTEMPT'"),
        ({"QUEUE_MAP": ["a"]}, "['QUEUE_MAP'] must be a dict"),
        ({"MAX_ATTEMPTS": "3"}, "['MAX_ATTEMPTS'] must be an int from 1 to 32767"),
        ({"SCHEMA": 5}, "['SCHEMA'] must be a str"),
        (["x"], "must be a dict, not list"),
    ],
)
def test_backend_options_are_checked(options: object, said: str) -> None:
    """A misspelt option was ignored (jobs got 25 attempts); a list QUEUE_MAP was a bare
    ValueError; a str MAX_ATTEMPTS failed only at enqueue, not naming the setting."""
    from django.core.exceptions import ImproperlyConfigured

    from riverboat.contrib.django.tasks import backend_options

    with pytest.raises(ImproperlyConfigured, match=re.escape("TASKS['default']['OPTIONS']")):
        backend_options("default", options)
    with pytest.raises(ImproperlyConfigured, match=re.escape(said)):
        backend_options("default", options)
    assert backend_options("default", None)["MAX_ATTEMPTS"] == 25
