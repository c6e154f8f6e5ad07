"""Django tasks for the backend tests (module level, as the framework requires)."""

from __future__ import annotations

from typing import Any

from django.db.models import F

try:
    from django.tasks import task  # type: ignore[import-not-found, unused-ignore]
except ImportError:
    from django_tasks import task


@task()
def add(a: int, b: int, *, name: str = "tasks") -> int:
    from tests.django.testapp.models import Counter

    Counter.objects.filter(name=name).update(n=F("n") + a + b)
    return a + b


@task(priority=10, queue_name="urgent")
def urgent(value: str) -> dict[str, Any]:
    return {"echo": value}


@task(takes_context=True)
def with_context(context: Any, value: int) -> int:
    return value * 10 + int(context.attempt)


@task()
def explode() -> None:
    raise KeyError("boom")
