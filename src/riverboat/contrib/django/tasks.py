"""A backend for Django's tasks framework (``django.tasks``, or the ``django-tasks``
backport before Django 6.0) that stores tasks as riverboat (River) jobs::

    TASKS = {
        "default": {
            "BACKEND": "riverboat.contrib.django.tasks.RiverboatBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"MAX_ATTEMPTS": 25},
        }
    }

* A task is a job whose **kind** is the task function's module path
  (``myapp.tasks.send_email``) and whose **args** are ``{"args": [...], "kwargs": {...}}``
  (the task's JSON-normalised arguments).
* ``enqueue`` inserts on the calling thread's Django connection: inside
  ``transaction.atomic()`` the job commits or rolls back with the surrounding rows, so
  there is nothing to defer to ``on_commit`` (a job is never lost or run early), and the
  result's ``id`` (the River job ID, as a string) is known at once.
* Queues: the Django queue name is the River queue, or ``OPTIONS["QUEUE_MAP"]`` maps it.
* Priorities: Django's -100..100 (higher first) map onto River's 1..4 (1 first):
  above 0 -> 1, 0 (the default) -> 2, -1..-50 -> 3, below -50 -> 4. The Django
  priority is kept in the job's metadata.
* ``run_after`` becomes the job's ``scheduled_at``. A failing task is retried by River's
  backoff up to ``MAX_ATTEMPTS`` (default 25; ``1`` gives Django's "fail once" semantics);
  its result is ``READY`` while a retry is pending, ``FAILED`` once discarded or
  cancelled.
* ``get_result(id)`` reads the job back: status, times, worker IDs (``attempted_by``),
  errors and the return value (stored as the job's recorded output).
* ``python manage.py riverboat worker`` runs tasks: its registry falls back to
  :class:`TaskWorkers`, which resolves a kind to the task by importing its module path.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from riverboat._insert import SMALLINT_MAX, validate_kind, validate_queue
from riverboat._job import FAILED_STATES, InsertOpts, JobRow, JobState
from riverboat.contrib.django.settings import get_client
from riverboat.errors import InvalidInputError, NotFoundError
from riverboat.runtime.worker import (
    Job,
    RegisteredWorker,
    Workers,
    record_output,
)

try:  # Django 6.0+
    from django.tasks import TaskContext, TaskResult, TaskResultStatus  # type: ignore[import-not-found, unused-ignore]
    from django.tasks.backends.base import BaseTaskBackend  # type: ignore[import-not-found, unused-ignore]
    from django.tasks.base import Task, TaskError  # type: ignore[import-not-found, unused-ignore]
    from django.tasks.exceptions import (  # type: ignore[import-not-found, unused-ignore]
        InvalidTask as InvalidTaskError,
    )
    from django.tasks.exceptions import TaskResultDoesNotExist  # type: ignore[import-not-found, unused-ignore]
    from django.tasks.signals import (  # type: ignore[import-not-found, unused-ignore]
        task_enqueued,
        task_finished,
        task_started,
    )
except ImportError:  # the django-tasks backport
    from django_tasks import TaskContext, TaskResult, TaskResultStatus
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

__all__ = ["RiverboatBackend", "TaskWorkers", "django_priority_to_river"]

ERROR_CLASSES_KEY = "django_task_error_classes"
PRIORITY_KEY = "django_task_priority"

_READY_STATES = frozenset(
    {JobState.AVAILABLE, JobState.SCHEDULED, JobState.PENDING, JobState.RETRYABLE}
)


def django_priority_to_river(priority: int) -> int:
    """Django's -100..100 (higher runs first) onto River's 1..4 (1 runs first)."""
    if priority > 0:
        return 1
    if priority == 0:
        return 2
    if priority >= -50:
        return 3
    return 4


def _normalize_json(value: Any) -> Any:
    try:
        from django.tasks.base import normalize_json  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        try:
            from django.utils.json import normalize_json  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            from django_tasks.utils import normalize_json
    return normalize_json(value)


def _module_path(value: Any) -> str:
    return f"{value.__module__}.{value.__qualname__}"


def _may_import(module_name: str) -> bool:
    """Whether a kind's module may be imported to look for a task: one already imported,
    or one inside an installed app or the settings' package. A kind is data from the
    database (any client's, River's Go services' too): importing whatever module it
    names ran that module's import-time code in the worker."""
    if module_name in sys.modules:
        return True
    from django.apps import apps
    from django.conf import settings

    roots = {config.name for config in apps.get_app_configs()}
    settings_module = getattr(settings, "SETTINGS_MODULE", None)
    if settings_module:
        roots.add(settings_module.split(".")[0])
    return any(module_name == root or module_name.startswith(root + ".") for root in roots)


def _resolve_task(kind: str) -> Any:
    """The module-level Task object a kind (``pkg.module.func``) names, or None."""
    module_name, _, attr = kind.rpartition(".")
    if not module_name or not _may_import(module_name):
        return None
    try:
        obj = getattr(importlib.import_module(module_name), attr, None)
    except ImportError:
        return None
    return obj if isinstance(obj, Task) else None


def _status(row: JobRow) -> Any:
    if row.state == JobState.RUNNING:
        return TaskResultStatus.RUNNING
    if row.state == JobState.COMPLETED:
        return TaskResultStatus.SUCCESSFUL
    if row.state in FAILED_STATES:
        return TaskResultStatus.FAILED
    return TaskResultStatus.READY


def _result_from_row(task: Any, backend_alias: str, row: JobRow, status: Any = None) -> Any:
    raw = row.args if isinstance(row.args, Mapping) else {}
    classes = row.metadata.get(ERROR_CLASSES_KEY) or []
    errors = [
        TaskError(
            exception_class_path=classes[i] if i < len(classes) else "builtins.Exception",
            traceback=e.trace or e.error,
        )
        for i, e in enumerate(row.errors)
    ]
    result = TaskResult(
        task=task,
        id=str(row.id),
        status=status if status is not None else _status(row),
        enqueued_at=row.created_at,
        started_at=row.attempted_at,
        finished_at=row.finalized_at,
        last_attempted_at=row.attempted_at,
        args=list(raw.get("args") or []),
        kwargs=dict(raw.get("kwargs") or {}),
        backend=backend_alias,
        errors=errors,
        worker_ids=list(row.attempted_by or []),
    )
    if row.state == JobState.COMPLETED:
        object.__setattr__(result, "_return_value", row.metadata.get("output"))
    return result


# TASKS[alias]["OPTIONS"] of a RiverboatBackend, with their defaults.
BACKEND_OPTIONS: dict[str, Any] = {
    "DATABASE_ALIAS": None,
    "SCHEMA": None,
    "MAX_ATTEMPTS": 25,
    "QUEUE_MAP": None,
}


def backend_options(alias: str, given: Any) -> dict[str, Any]:
    """``TASKS[alias]["OPTIONS"]`` checked, with defaults filled in: a misspelt key (it
    was ignored: jobs got 25 attempts), a list for ``QUEUE_MAP`` (a bare ValueError from
    dict()) or a str for ``MAX_ATTEMPTS`` (refused only at enqueue, not naming the
    setting) is an ImproperlyConfigured naming the setting."""
    from django.core.exceptions import ImproperlyConfigured

    where = f"TASKS[{alias!r}]['OPTIONS']"
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise ImproperlyConfigured(f"{where} must be a dict, not {type(given).__name__}")
    unknown = sorted(str(key) for key in given if key not in BACKEND_OPTIONS)
    if unknown:
        raise ImproperlyConfigured(
            f"{where}: unknown option {unknown[0]!r} (known: {', '.join(BACKEND_OPTIONS)})"
        )
    options = {**BACKEND_OPTIONS, **given}
    for key in ("DATABASE_ALIAS", "SCHEMA"):
        if options[key] is not None and not isinstance(options[key], str):
            raise ImproperlyConfigured(f"{where}['{key}'] must be a str")
    attempts = options["MAX_ATTEMPTS"]
    if attempts is not None and (
        isinstance(attempts, bool)
        or not isinstance(attempts, int)
        or not 1 <= attempts <= SMALLINT_MAX
    ):
        raise ImproperlyConfigured(
            f"{where}['MAX_ATTEMPTS'] must be an int from 1 to {SMALLINT_MAX}"
        )
    queue_map = options["QUEUE_MAP"] or {}
    if not isinstance(queue_map, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in queue_map.items()
    ):
        raise ImproperlyConfigured(
            f"{where}['QUEUE_MAP'] must be a dict of Django queue names to River queue names"
        )
    options["QUEUE_MAP"] = dict(queue_map)
    return options


class RiverboatBackend(BaseTaskBackend):  # type: ignore[misc]
    """Django tasks as River jobs, inserted on Django's connection (see the module)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = backend_options(alias, self.options)
        self.database_alias: str | None = options["DATABASE_ALIAS"]
        self.schema: str | None = options["SCHEMA"]
        self.max_attempts: int | None = options["MAX_ATTEMPTS"]
        self.queue_map: dict[str, str] = options["QUEUE_MAP"]

    def _client(self) -> Any:
        return get_client(self.database_alias, self.schema)

    def river_queue(self, queue_name: str) -> str:
        return self.queue_map.get(queue_name, queue_name)

    def validate_task(self, task: Any) -> None:
        super().validate_task(task)
        try:
            validate_kind(task.module_path)
            validate_queue(self.river_queue(task.queue_name))
        except InvalidInputError as exc:
            raise InvalidTaskError(str(exc)) from None

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        job_args = {"args": _normalize_json(list(args)), "kwargs": _normalize_json(dict(kwargs))}
        opts = InsertOpts(
            queue=self.river_queue(task.queue_name),
            priority=django_priority_to_river(task.priority),
            max_attempts=self.max_attempts,
            scheduled_at=task.run_after,
            metadata={PRIORITY_KEY: task.priority},
        )
        inserted = self._client().insert(job_args, opts, kind=task.module_path)
        result = _result_from_row(task, self.alias, inserted.job)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        try:
            row = self._client().job_get(job_id)
        except (NotFoundError, InvalidInputError):  # InvalidInputError: past int64
            raise TaskResultDoesNotExist(result_id) from None
        task = _resolve_task(row.kind)
        if task is None:
            raise TaskResultDoesNotExist(f"job {result_id} ({row.kind}) is not a Django task")
        return _result_from_row(task, self.alias, row)


def run_task(job: Job[Any]) -> Any:
    """The sync work function of every task kind: call the task, record its return
    value as the job's output, remember an exception's class for ``get_result``."""
    task = _resolve_task(job.kind)
    if task is None:
        raise LookupError(f"{job.kind} is not a Django task")
    backend = task.get_backend()
    args = job.args if isinstance(job.args, Mapping) else {}
    call_args = list(args.get("args") or [])
    call_kwargs = dict(args.get("kwargs") or {})
    result = _result_from_row(task, backend.alias, job.row, TaskResultStatus.RUNNING)
    task_started.send(type(backend), task_result=result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *call_args, **call_kwargs)
        else:
            value = task.call(*call_args, **call_kwargs)
        record_output(_normalize_json(value))
    except BaseException as exc:
        if job.is_being_worked:
            previous = job.row.metadata.get(ERROR_CLASSES_KEY) or []
            job.set_metadata(ERROR_CLASSES_KEY, [*previous, _module_path(type(exc))])
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        task_finished.send(type(backend), task_result=result)
        raise
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "_return_value", value)
    task_finished.send(type(backend), task_result=result)
    return value


class TaskWorkers(Workers):
    """A worker registry that also works Django tasks: a kind not registered in
    ``base`` is imported as a module path, and if it names a task on a
    :class:`RiverboatBackend` it is worked by :func:`run_task`."""

    def __init__(self, base: Workers | None = None) -> None:
        super().__init__()
        self._tasks: dict[str, RegisteredWorker] = {}  # kinds resolved as tasks so far
        if base is not None:
            self.update(base)  # its workers and their kind aliases

    def get(self, kind: str) -> RegisteredWorker | None:
        found = super().get(kind) or self._tasks.get(kind)
        if found is not None:
            return found
        task = _resolve_task(kind)
        if task is None or not isinstance(task.get_backend(), RiverboatBackend):
            return None
        worker = RegisteredWorker(
            kind=kind,
            fn=run_task,
            is_async=False,
            decode=lambda row: row.args,
            timeout=None,
            next_retry=None,
        )
        self._tasks[kind] = worker
        return worker

    def __contains__(self, kind: object) -> bool:
        return isinstance(kind, str) and self.get(kind) is not None

    def __len__(self) -> int:
        # Never "empty": tasks are resolved on demand.
        return max(1, super().__len__() + len(self._tasks))

    def __iter__(self) -> Iterator[str]:
        yield from super().__iter__()
        yield from self._tasks
