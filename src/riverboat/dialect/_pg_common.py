"""Pieces every Postgres statement module shares: the job column list and the channel."""

from __future__ import annotations

__all__ = ["CHANNEL", "JOB_COLUMNS", "UNIQUE_CONFLICT", "job_columns"]

_COLUMN_EXPRS = (
    ("id", "{t}id"),
    ("args", "{t}args::text"),
    ("attempt", "{t}attempt"),
    ("attempted_at", "{t}attempted_at"),
    ("attempted_by", "{t}attempted_by"),
    ("created_at", "{t}created_at"),
    ("errors", "{t}errors::text[]"),
    ("finalized_at", "{t}finalized_at"),
    ("kind", "{t}kind"),
    ("max_attempts", "{t}max_attempts"),
    ("metadata", "{t}metadata::text"),
    ("priority", "{t}priority"),
    ("queue", "{t}queue"),
    ("state", "{t}state::text"),
    ("scheduled_at", "{t}scheduled_at"),
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
