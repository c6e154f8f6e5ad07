"""Pieces every SQLite statement module shares: the job column list, timestamps as River's
SQLite driver writes them, the inlined unique-states bitmask, and :class:`StatementChain`.

They live here rather than in :mod:`riverboat.dialect.sqlite` so that the dialect's
per-entity mixins (:mod:`~riverboat.dialect.sqlite_admin`,
:mod:`~riverboat.dialect.sqlite_leadership`) can use them without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from riverboat._sql import Statement

__all__ = [
    "NOW",
    "StatementChain",
    "format_timestamp",
    "job_columns",
    "parse_timestamp",
    "seconds_modifier",
    "state_in_bitmask",
    "ts_or_none",
]

_COLUMN_EXPRS = (
    ("id", "{t}id"),
    ("args", "json({t}args)"),
    ("attempt", "{t}attempt"),
    ("attempted_at", "{t}attempted_at"),
    ("attempted_by", "json({t}attempted_by)"),
    ("created_at", "{t}created_at"),
    ("errors", "json({t}errors)"),
    ("finalized_at", "{t}finalized_at"),
    ("kind", "{t}kind"),
    ("max_attempts", "{t}max_attempts"),
    ("metadata", "json({t}metadata)"),
    ("priority", "{t}priority"),
    ("queue", "{t}queue"),
    ("state", "{t}state"),
    ("scheduled_at", "{t}scheduled_at"),
    ("tags", "json({t}tags)"),
    ("unique_key", "{t}unique_key"),
    ("unique_states", "{t}unique_states"),
)


def job_columns(table: str = "") -> str:
    """The SELECT/RETURNING list of every job-returning statement, in JobRow order."""
    prefix = f"{table}." if table else ""
    return ", ".join(f"{expr.format(t=prefix)} AS {name}" for name, expr in _COLUMN_EXPRS)


# SQLite's clock as River's timestamp text; constant within one statement.
NOW = "datetime('now', 'subsec')"


def state_in_bitmask(states: str, state: str) -> str:
    """Postgres's ``river_job_state_in_bitmask(states, state)``, inlined as River's SQLite
    schema does (the same bit per state)."""
    return f"""CASE {state}
            WHEN 'available' THEN {states} & (1 << 0)
            WHEN 'cancelled' THEN {states} & (1 << 1)
            WHEN 'completed' THEN {states} & (1 << 2)
            WHEN 'discarded' THEN {states} & (1 << 3)
            WHEN 'pending' THEN {states} & (1 << 4)
            WHEN 'retryable' THEN {states} & (1 << 5)
            WHEN 'running' THEN {states} & (1 << 6)
            WHEN 'scheduled' THEN {states} & (1 << 7)
            ELSE 0
          END >= 1"""


@dataclass(slots=True, frozen=True)
class StatementChain(Statement):
    """A statement whose rows are the result, followed by statements that must commit
    with it. SQLite allows no multi-table DML in one statement; a driver runs the chain in
    one transaction (or in the caller's) and returns the first statement's rows."""

    then: tuple[Statement, ...] = ()


def format_timestamp(moment: datetime) -> str:
    """River's SQLite timestamp text: UTC, ``YYYY-MM-DD HH:MM:SS.sss``, rounded to the
    millisecond (naive datetimes are taken as UTC)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    # Go's Round(time.Millisecond) rounds halves up.
    moment = moment + timedelta(microseconds=500)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{moment.microsecond // 1000:03d}"


def parse_timestamp(value: Any) -> datetime | None:
    """A stored timestamp as an aware UTC datetime. Accepts River's text (with or
    without fractional seconds, ``T`` or space, with or without an offset) and, for rows
    written by other tools, Unix seconds."""
    if value is None:
        return None
    if isinstance(value, str):
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            return moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, UTC)
    raise ValueError(f"unrecognised SQLite timestamp: {value!r}")


def ts_or_none(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


def seconds_modifier(seconds: float | None) -> str | None:
    """A ``datetime()`` modifier adding ``seconds`` (River's ``'15.000 seconds'``, with an
    explicit sign); ``None`` stays ``None`` so the whole expression is NULL."""
    if seconds is None:
        return None
    return f"{float(seconds):+.3f} seconds"
