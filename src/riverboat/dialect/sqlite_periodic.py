"""SQLite statements for riverboat's durable periodic jobs, the twins of
:mod:`~riverboat.dialect.postgres_periodic` (same method names, arguments and rows).
Times are UTC text with microseconds, so that a tick read back is the tick written."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, ClassVar

from riverboat.dialect._periodic_common import (
    PeriodicJobDeclaration,
    PeriodicJobWrite,
    PeriodicStatements,
    periodic_job_list_sql,
)
from riverboat.dialect._sqlite_common import NOW, parse_timestamp

__all__ = ["SqlitePeriodic"]

QUERIES: dict[str, str] = {}

QUERIES["periodic_job_list"] = periodic_job_list_sql("json(template)")

# See the Postgres twin. Stored times are fixed-width text, so they compare as times.
QUERIES["periodic_job_save"] = f"""
INSERT INTO <schema>riverboat_periodic_job AS stored
    (id, schedule, catch_up, next_run_at, last_run_at)
SELECT value ->> '$.id', value ->> '$.schedule', value ->> '$.catch_up',
       value ->> '$.next_run_at', value ->> '$.last_run_at'
FROM json_each(:rows)
WHERE true
ON CONFLICT (id) DO UPDATE
SET schedule = excluded.schedule, catch_up = excluded.catch_up,
    next_run_at = excluded.next_run_at,
    last_run_at = coalesce(excluded.last_run_at, stored.last_run_at),
    updated_at = {NOW}
WHERE CASE WHEN stored.schedule <> excluded.schedule THEN stored.template IS NULL
           ELSE stored.next_run_at IS NULL
                OR excluded.next_run_at IS NULL
                OR stored.next_run_at <= excluded.next_run_at END
"""

# See the Postgres twin.
QUERIES["periodic_job_declare"] = f"""
INSERT INTO <schema>riverboat_periodic_job AS stored (id, schedule, catch_up, template)
SELECT value ->> '$.id', value ->> '$.schedule', value ->> '$.catch_up',
       CASE WHEN value ->> '$.template' IS NOT NULL THEN jsonb(value -> '$.template') END
FROM json_each(:rows)
WHERE true
ON CONFLICT (id) DO UPDATE
SET schedule = excluded.schedule, catch_up = excluded.catch_up, template = excluded.template,
    removed_at = NULL, updated_at = {NOW},
    next_run_at = CASE WHEN stored.schedule = excluded.schedule THEN stored.next_run_at END
"""

QUERIES["periodic_job_remove"] = f"""
UPDATE <schema>riverboat_periodic_job SET removed_at = {NOW}, updated_at = {NOW}
WHERE id IN (SELECT value FROM json_each(:ids)) AND removed_at IS NULL
"""

QUERIES["periodic_job_delete"] = """
DELETE FROM <schema>riverboat_periodic_job
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id
"""


def _stored(value: Any) -> Any:
    # A time as the fixed-width UTC text the table holds; anything else as JSON has it.
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return value


def _rows_json(rows: Sequence[PeriodicJobWrite] | Sequence[PeriodicJobDeclaration]) -> str:
    """The rows as the JSON array the statements read with json_each: one object per row,
    keyed by the row's field names."""
    return json.dumps([{f.name: _stored(getattr(r, f.name)) for f in fields(r)} for r in rows])


class SqlitePeriodic(PeriodicStatements):
    _queries: ClassVar[dict[str, str]] = QUERIES

    def periodic_rows_param(self, rows: Sequence[PeriodicJobWrite]) -> dict[str, Any]:
        return {"rows": _rows_json(rows)}

    def periodic_declarations_param(self, rows: Sequence[PeriodicJobDeclaration]) -> dict[str, Any]:
        return {"rows": _rows_json(rows)}

    def periodic_ids_param(self, ids: Sequence[str]) -> dict[str, Any]:
        return {"ids": json.dumps(list(ids))}

    def periodic_time(self, value: Any) -> datetime | None:
        return parse_timestamp(value)
