"""Configure Django once per test process against the test Postgres, and point it at
one migrated schema per test (search_path for the ORM, RIVERBOAT["SCHEMA"] for riverboat).
Shared by tests/django and the driver conformance adapter."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg.conninfo

APP_PREFIX = "rbdj_"

_configured: str | None = None


def configure(pg_url: str) -> None:
    """``settings.configure(...)`` and ``django.setup()``, once per process."""
    global _configured
    if _configured is not None:
        assert _configured == pg_url, "Django is already configured for another server"
        return
    import django
    from django.conf import settings

    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        SECRET_KEY="riverboat-tests",
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": info.get("dbname", "postgres"),
                "USER": info.get("user", ""),
                "PASSWORD": info.get("password", ""),
                "HOST": info.get("host", ""),
                "PORT": str(info.get("port", "")),
                "OPTIONS": {"options": "-c search_path=public", "application_name": APP_PREFIX},
            }
        },
        INSTALLED_APPS=["riverboat.contrib.django", "django_tasks", "tests.django.testapp"],
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        TASKS={
            "default": {
                "BACKEND": "riverboat.contrib.django.tasks.RiverboatBackend",
                "QUEUES": ["default", "urgent"],
            }
        },
        RIVERBOAT={},
    )
    django.setup()
    _configured = pg_url


@contextmanager
def use_schema(schema: str, **riverboat: Any) -> Iterator[str]:
    """Point Django's default database and riverboat at ``schema``; yields the
    application_name its Django connections use (to find them in pg_stat_activity)."""
    from django.db import connections
    from django.test import override_settings

    app_name = APP_PREFIX + schema
    connections.close_all()
    options = connections.settings["default"]["OPTIONS"]
    saved = dict(options)
    options["options"] = f"-c search_path={schema}"
    options["application_name"] = app_name
    conf = {"SCHEMA": schema, **riverboat}
    try:
        with override_settings(RIVERBOAT=conf):
            yield app_name
    finally:
        connections.close_all()
        options.clear()
        options.update(saved)
