"""Django configured once (``settings.configure``) against the test Postgres; each test
gets its own migrated schema (``pg_schema``) as the ORM's search_path and riverboat's
schema, with the test app's table created in it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("django")
pytest.importorskip("django_tasks")

from tests.django import djsetup


@pytest.fixture(scope="session")
def django_configured(pg_url: str) -> str:
    djsetup.configure(pg_url)
    return pg_url


@pytest.fixture
def dj(django_configured: str, pg_schema: str) -> Iterator[str]:
    """Django and riverboat on ``pg_schema``; yields the Django connections'
    application_name."""
    from django.db import connection

    from tests.django.testapp import jobs
    from tests.django.testapp.models import Counter

    with djsetup.use_schema(pg_schema) as app_name:
        with connection.schema_editor() as editor:
            editor.create_model(Counter)
        connection.close()  # tests count Django's backends: start from none
        jobs.seen.clear()
        yield app_name
