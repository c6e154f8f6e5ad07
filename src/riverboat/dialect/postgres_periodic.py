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
    periodic_queries,
)

__all__ = ["PostgresPeriodic"]

QUERIES = periodic_queries(
    template="template",
    save_rows="""SELECT * FROM unnest(:ids::text[], :schedules::text[], :catch_ups::text[],
                     :next_run_ats::timestamptz[], :last_run_ats::timestamptz[])""",
    declare_rows="""SELECT id, schedule, catch_up, template::jsonb
FROM unnest(:ids::text[], :schedules::text[], :catch_ups::text[], :templates::text[])
    AS t (id, schedule, catch_up, template)""",
    now="now()",
    in_ids="id = any(:ids::text[])",
)


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
