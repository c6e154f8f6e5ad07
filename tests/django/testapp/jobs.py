"""Work functions for the Django tests; ORM use inside sync jobs is the point."""

from __future__ import annotations

import threading
from typing import Any

from django.db import connections
from django.db.models import F

from riverboat import Job, Workers

workers = Workers()
# (thread ident, that thread's Django connection wrapper) for every bump job run.
seen: list[tuple[int, Any]] = []


@workers.register("bump", kind_aliases=["bump_before_rename"])
def bump(job: Job[dict[str, Any]]) -> None:
    from tests.django.testapp.models import Counter

    Counter.objects.filter(name=job.args["name"]).update(n=F("n") + 1)
    seen.append((threading.get_ident(), connections["default"]))
