"""The worker side of the Django integration: the worker registry and the AsyncClient
``riverboat worker`` (and ``manage.py riverboat worker``) run.

Apart from :mod:`riverboat.contrib.django.settings` (the insert side, which
:mod:`~riverboat.contrib.django.tasks` uses), so that no module of the integration
imports one that imports it back.
"""

from __future__ import annotations

import logging
from typing import Any

from riverboat.client import AsyncClient
from riverboat.contrib.django.settings import get_driver, get_settings, load_object
from riverboat.errors import InvalidInputError
from riverboat.runtime.worker import Workers

__all__ = ["get_workers", "make_async_client", "unserved_task_queues"]

log = logging.getLogger("riverboat.django")
_BACKEND = "riverboat.contrib.django.tasks.RiverboatBackend"


def get_workers() -> Workers:
    """The configured worker registry, falling back to Django tasks' kinds when the
    tasks framework is installed (see :mod:`riverboat.contrib.django.tasks`)."""
    conf = get_settings()
    base: Workers | None = None
    if conf.workers:
        obj = load_object(conf.workers)
        if callable(obj) and not isinstance(obj, Workers):
            obj = obj()
        if not isinstance(obj, Workers):
            raise InvalidInputError(
                "RIVERBOAT['WORKERS']", f"{conf.workers} is a {type(obj).__name__}, not Workers"
            )
        base = obj
    try:  # an optional dependency: django.tasks (Django 6) or the django-tasks backport
        from riverboat.contrib.django.tasks import TaskWorkers
    except ImportError:  # neither is installed
        return base if base is not None else Workers()
    return TaskWorkers(base)


def make_async_client(**overrides: Any) -> AsyncClient:
    """An AsyncClient with the configured queues and workers, on an async psycopg driver
    built from the Django database settings (the runtime does not use Django's
    thread-bound connections). A zero-argument factory for ``riverboat worker``."""
    import django
    from django.apps import apps

    if not apps.ready:  # a fresh process (riverboat worker --processes N)
        django.setup()
    conf = get_settings()
    driver = get_driver().async_driver()
    options: dict[str, Any] = {"queues": conf.queues, "workers": get_workers()}
    options.update(conf.client_options)
    options.update(overrides)
    # The driver was made here: client.close() closes it.
    client = AsyncClient(driver, **options, owns_driver=True)
    for backend, django_queue, river_queue in unserved_task_queues(set(options["queues"])):
        log.warning(
            "TASKS[%r] sends Django queue %r to River queue %r, which this worker does not "
            "work (its queues: %s): such tasks stay available until a worker serves %r "
            "(add it to RIVERBOAT['QUEUES'] or fix QUEUE_MAP)",
            backend,
            django_queue,
            river_queue,
            ", ".join(sorted(options["queues"])) or "none",
            river_queue,
        )
    return client


def unserved_task_queues(worked: set[str]) -> list[tuple[str, str, str]]:
    """``(TASKS alias, Django queue, River queue)`` for each queue a riverboat task
    backend names (``QUEUES``, mapped through ``QUEUE_MAP``) that ``worked`` lacks."""
    from django.conf import settings

    out = []
    for alias, conf in dict(getattr(settings, "TASKS", None) or {}).items():
        if not isinstance(conf, dict) or conf.get("BACKEND") != _BACKEND:
            continue
        from riverboat.contrib.django.tasks import backend_options  # needs Django's tasks

        queue_map = backend_options(alias, conf.get("OPTIONS"))["QUEUE_MAP"]
        for django_queue in [*(conf.get("QUEUES") or []), *queue_map]:
            river_queue = queue_map.get(django_queue, django_queue)
            if river_queue not in worked and (alias, django_queue, river_queue) not in out:
                out.append((alias, django_queue, river_queue))
    return out
