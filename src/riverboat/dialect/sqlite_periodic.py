"""SQLite statements for riverboat's durable periodic jobs, the twins of
:mod:`~riverboat.dialect.postgres_periodic` (same method names, arguments and rows).
Times are UTC text with microseconds, so that a tick read back is the tick written."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, ClassVar

from riverboat._json import date_time_text
from riverboat.dialect._periodic_common import (
    PeriodicJobDeclaration,
    PeriodicJobWrite,
    PeriodicStatements,
    periodic_queries,
)
from riverboat.dialect._sqlite_common import NOW, parse_timestamp

__all__ = ["SqlitePeriodic"]

# The rows come as one JSON array (see _rows_json). "WHERE true" keeps SQLite's parser
# from reading the ON CONFLICT of the upsert as a join constraint of the SELECT.
QUERIES = periodic_queries(
    template="json(template)",
    save_rows="""SELECT value ->> '$.id', value ->> '$.schedule', value ->> '$.catch_up',
       value ->> '$.next_run_at', value ->> '$.last_run_at'
FROM json_each(:rows)
WHERE true""",
    declare_rows="""SELECT value ->> '$.id', value ->> '$.schedule', value ->> '$.catch_up',
       CASE WHEN value ->> '$.template' IS NOT NULL THEN jsonb(value -> '$.template') END
FROM json_each(:rows)
WHERE true""",
    now=NOW,
    in_ids="id IN (SELECT value FROM json_each(:ids))",
)


def _stored(value: Any) -> Any:
    # A time as the fixed-width UTC text the table holds; anything else as JSON has it.
    if isinstance(value, datetime):
        moment = value.astimezone(UTC)
        return f"{date_time_text(moment, ' ')}.{moment.microsecond:06d}"
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
