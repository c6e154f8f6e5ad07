"""Pieces every Postgres statement module shares: the job column list and the channel."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from riverboat.dialect._common import JOB_COLUMNS, select_job_columns

__all__ = ["CHANNEL", "JOB_COLUMNS", "UNIQUE_CONFLICT", "job_columns", "unnest_arrays"]

# Python's datetime holds years 1 to 9999 only, and every Postgres driver fails the whole
# fetch on a timestamptz outside them ('infinity', '-infinity', a year BC, or year 1
# shown in a session time zone west of UTC): one such row written by raw SQL would make
# every claim, rescue or listing that meets it fail. Each timestamp is therefore read
# clamped to a range any session time zone can show ("long past" / "never" keep their
# meaning); comparisons in WHERE clauses still see the stored value.
_TIME_LOW = "'0001-01-03 00:00:00+00'::timestamptz"
_TIME_HIGH = "'9999-12-29 00:00:00+00'::timestamptz"
_CLAMPED = (
    "CASE WHEN {c} < "
    + _TIME_LOW
    + " THEN "
    + _TIME_LOW
    + " WHEN {c} > "
    + _TIME_HIGH
    + " THEN "
    + _TIME_HIGH
    + " ELSE {c} END"
)

# How Postgres reads the job columns that need more than the stored value.
_READ_AS = {
    "args": "{c}::text",
    "attempted_at": _CLAMPED,
    "created_at": _CLAMPED,
    "errors": "{c}::text[]",
    "finalized_at": _CLAMPED,
    "metadata": "{c}::text",
    "state": "{c}::text",
    "scheduled_at": _CLAMPED,
    "tags": "{c}::text[]",
    "unique_states": "{c}::integer",
}


def job_columns(table: str = "") -> str:
    """The RETURNING/SELECT list every job-returning statement uses, in JobRow order."""
    return select_job_columns(_READ_AS, table)


# The NOTIFY channel for a topic: River's "<schema>.<topic>", with current_schema() when
# no schema is configured.
CHANNEL = "concat(coalesce(:schema::text, current_schema()), '.{topic}')"
UNIQUE_CONFLICT = """ON CONFLICT (unique_key)
    WHERE unique_key IS NOT NULL
      AND unique_states IS NOT NULL
      AND <schema>river_job_state_in_bitmask(unique_states, state)"""


def unnest_arrays(names: Sequence[str], rows: Iterable[Sequence[Any]]) -> dict[str, list[Any]]:
    """Parameters for a statement over ``unnest`` of parallel arrays: one list per name,
    from rows whose values are in ``names`` order (a batch written as rows, bound as
    columns)."""
    columns = list(zip(*rows, strict=True))
    if not columns:
        return {name: [] for name in names}
    return {name: list(column) for name, column in zip(names, columns, strict=True)}
