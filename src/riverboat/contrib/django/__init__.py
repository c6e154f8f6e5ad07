"""riverboat for Django: add ``"riverboat.contrib.django"`` to ``INSTALLED_APPS``.

* :func:`get_client` — an insert-only :class:`~riverboat.Client` on Django's connection
  (:class:`~riverboat.drivers.django.DjangoDriver`), so inserts join ``atomic()``.
* ``python manage.py riverboat migrate up|down|list`` and ``riverboat worker``.
* Connection hygiene: once the app is ready, every sync job's worker thread hands back
  its Django connections when the job ends (:func:`~riverboat.contrib.django.reclaim_connections`).
* :class:`riverboat.contrib.django.tasks.RiverboatBackend` — a backend for Django's tasks
  framework (``django.tasks`` / the ``django-tasks`` backport).

Settings (all optional)::

    RIVERBOAT = {
        "DATABASE_ALIAS": "default",
        "SCHEMA": None,                       # River's tables: default the search_path
        "QUEUES": {"default": {"max_workers": 10}},
        "WORKERS": "myapp.jobs:workers",      # a riverboat.Workers (or a factory)
        "CLIENT_OPTIONS": {"job_timeout": 60},  # extra AsyncClient keyword arguments
        "CLOSE_CONNECTIONS": "obsolete",      # or "always": close after every job
    }
"""

from __future__ import annotations

from riverboat.contrib.django.connections import insert_async, reclaim_connections
from riverboat.contrib.django.runtime import get_workers, make_async_client
from riverboat.contrib.django.settings import (
    RiverboatSettings,
    get_client,
    get_driver,
    get_settings,
)

__all__ = [
    "RiverboatSettings",
    "get_client",
    "get_driver",
    "get_settings",
    "get_workers",
    "insert_async",
    "make_async_client",
    "reclaim_connections",
]
