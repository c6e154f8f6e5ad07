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
    periodic_job_declare_sql,
    periodic_job_list_sql,
    periodic_job_save_sql,
)

__all__ = ["PostgresPeriodic"]

QUERIES: dict[str, str] = {}

QUERIES["periodic_job_list"] = periodic_job_list_sql("template")

QUERIES["periodic_job_save"] = periodic_job_save_sql(
    """SELECT * FROM unnest(:ids::text[], :schedules::text[], :catch_ups::text[],
                     :next_run_ats::timestamptz[], :last_run_ats::timestamptz[])""",
    now="now()",
)

QUERIES["periodic_job_declare"] = periodic_job_declare_sql(
    """SELECT id, schedule, catch_up, template::jsonb
FROM unnest(:ids::text[], :schedules::text[], :catch_ups::text[], :templates::text[])
    AS t (id, schedule, catch_up, template)""",
    now="now()",
)

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
