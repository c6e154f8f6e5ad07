"""Pieces every Postgres statement module shares: the job column list and the channel."""

from __future__ import annotations

__all__ = ["CHANNEL", "JOB_COLUMNS", "UNIQUE_CONFLICT", "job_columns"]

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

_COLUMN_EXPRS = (
    ("id", "{t}id"),
    ("args", "{t}args::text"),
    ("attempt", "{t}attempt"),
    ("attempted_at", _CLAMPED.format(c="{t}attempted_at")),
    ("attempted_by", "{t}attempted_by"),
    ("created_at", _CLAMPED.format(c="{t}created_at")),
    ("errors", "{t}errors::text[]"),
    ("finalized_at", _CLAMPED.format(c="{t}finalized_at")),
    ("kind", "{t}kind"),
    ("max_attempts", "{t}max_attempts"),
    ("metadata", "{t}metadata::text"),
    ("priority", "{t}priority"),
    ("queue", "{t}queue"),
    ("state", "{t}state::text"),
    ("scheduled_at", _CLAMPED.format(c="{t}scheduled_at")),
    ("tags", "{t}tags::text[]"),
    ("unique_key", "{t}unique_key"),
    ("unique_states", "{t}unique_states::integer"),
)
JOB_COLUMNS = tuple(name for name, _ in _COLUMN_EXPRS)


def job_columns(table: str = "") -> str:
    """The RETURNING/SELECT list every job-returning statement uses, in JobRow order."""
    prefix = f"{table}." if table else ""
    return ", ".join(f"{expr.format(t=prefix)} AS {name}" for name, expr in _COLUMN_EXPRS)


# The NOTIFY channel for a topic: River's "<schema>.<topic>", with current_schema() when
# no schema is configured.
CHANNEL = "concat(coalesce(:schema::text, current_schema()), '.{topic}')"
UNIQUE_CONFLICT = """ON CONFLICT (unique_key)
    WHERE unique_key IS NOT NULL
      AND unique_states IS NOT NULL
      AND <schema>river_job_state_in_bitmask(unique_states, state)"""
