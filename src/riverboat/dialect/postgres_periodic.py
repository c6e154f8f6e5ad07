"""Postgres statements for riverboat's durable periodic jobs (``riverboat_periodic_job``,
from riverboat's own migration line). A mixin of
:class:`~riverboat.dialect.postgres.PostgresDialect`; the SQLite twin is
:mod:`~riverboat.dialect.sqlite_periodic` (same method names, arguments and rows)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

from riverboat.dialect._periodic_common import (
    PeriodicJobDeclaration,
    PeriodicJobWrite,
    PeriodicStatements,
    periodic_job_list_sql,
)

__all__ = ["PostgresPeriodic"]

QUERIES: dict[str, str] = {}

QUERIES["periodic_job_list"] = periodic_job_list_sql("template")

# One row per periodic job the leader advanced. Under an unchanged schedule next_run_at
# only moves forward, and last_run_at is kept when this write inserted nothing. A new
# schedule from the leader's own code (a deploy) replaces the stored one; but a row with a
# template was declared at runtime by a client (periodic_job_declare), maybe after the
# leader read it: that declaration wins, and the leader's write under the schedule it read
# is dropped (it starts the declared schedule at its next read).
QUERIES["periodic_job_save"] = """
INSERT INTO <schema>riverboat_periodic_job AS stored
    (id, schedule, catch_up, next_run_at, last_run_at)
SELECT * FROM unnest(:ids::text[], :schedules::text[], :catch_ups::text[],
                     :next_run_ats::timestamptz[], :last_run_ats::timestamptz[])
ON CONFLICT (id) DO UPDATE
SET schedule = excluded.schedule, catch_up = excluded.catch_up,
    next_run_at = excluded.next_run_at,
    last_run_at = coalesce(excluded.last_run_at, stored.last_run_at),
    updated_at = now()
WHERE CASE WHEN stored.schedule <> excluded.schedule THEN stored.template IS NULL
           ELSE stored.next_run_at IS NULL
                OR excluded.next_run_at IS NULL
                OR stored.next_run_at <= excluded.next_run_at END
"""

# A client's periodic jobs, at its start or added at runtime: the latest declaration of
# an id defines it (schedule, catch-up, template), and clears a removal.
QUERIES["periodic_job_declare"] = """
INSERT INTO <schema>riverboat_periodic_job AS stored (id, schedule, catch_up, template)
SELECT id, schedule, catch_up, template::jsonb
FROM unnest(:ids::text[], :schedules::text[], :catch_ups::text[], :templates::text[])
    AS t (id, schedule, catch_up, template)
ON CONFLICT (id) DO UPDATE
SET schedule = excluded.schedule, catch_up = excluded.catch_up, template = excluded.template,
    removed_at = NULL, updated_at = now(),
    next_run_at = CASE WHEN stored.schedule = excluded.schedule THEN stored.next_run_at END
"""

QUERIES["periodic_job_remove"] = """
UPDATE <schema>riverboat_periodic_job SET removed_at = now(), updated_at = now()
WHERE id = any(:ids::text[]) AND removed_at IS NULL
"""

QUERIES["periodic_job_delete"] = """
DELETE FROM <schema>riverboat_periodic_job WHERE id = any(:ids::text[]) RETURNING id
"""


class PostgresPeriodic(PeriodicStatements):
    _queries: ClassVar[dict[str, str]] = QUERIES

    def periodic_rows_param(self, rows: Sequence[PeriodicJobWrite]) -> dict[str, Any]:
        return {
            "ids": [r.id for r in rows],
            "schedules": [r.schedule for r in rows],
            "catch_ups": [r.catch_up for r in rows],
            "next_run_ats": [r.next_run_at for r in rows],
            "last_run_ats": [r.last_run_at for r in rows],
        }

    def periodic_declarations_param(self, rows: Sequence[PeriodicJobDeclaration]) -> dict[str, Any]:
        return {
            "ids": [r.id for r in rows],
            "schedules": [r.schedule for r in rows],
            "catch_ups": [r.catch_up for r in rows],
            "templates": [None if r.template is None else json.dumps(r.template) for r in rows],
        }

    def periodic_ids_param(self, ids: Sequence[str]) -> dict[str, Any]:
        return {"ids": list(ids)}

    def periodic_time(self, value: Any) -> datetime | None:
        return value  # type: ignore[no-any-return]  # psycopg/asyncpg decode timestamptz
