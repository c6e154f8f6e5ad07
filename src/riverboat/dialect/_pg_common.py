"""Pieces every Postgres statement module shares: how Postgres reads the job and queue
rows (their column lists and decoder), and the channel."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from riverboat._channels import CHANNEL_MAX, SHORT_TOPICS
from riverboat._job import STATE_BY_NAME, AttemptError, decode_metadata
from riverboat.dialect._rows import PREVIEW_ARGS_MAX, QUEUE_COLUMNS, JobReader, Read, select_list

__all__ = [
    "CHANNEL",
    "CLAIM_SET",
    "JOB_READER",
    "QUEUE_SELECT",
    "TIME_HIGH",
    "TIME_LOW",
    "UNIQUE_CONFLICT",
    "channel_sql",
    "clamped",
    "job_columns",
    "state_in_bitmask",
    "unnest_arrays",
]

# Python's datetime holds years 1 to 9999 only, and every Postgres driver fails the whole
# fetch on a timestamptz outside them ('infinity', '-infinity', a year BC, or year 1
# shown in a session time zone west of UTC): one such row written by raw SQL would make
# every claim, rescue or listing that meets it fail. Each timestamp is therefore read
# clamped to a range any session time zone can show ("long past" / "never" keep their
# meaning); comparisons in WHERE clauses still see the stored value.
TIME_LOW = "'0001-01-03 00:00:00+00'::timestamptz"
TIME_HIGH = "'9999-12-29 00:00:00+00'::timestamptz"
_CLAMPED = (
    "CASE WHEN {c} < "
    + TIME_LOW
    + " THEN "
    + TIME_LOW
    + " WHEN {c} > "
    + TIME_HIGH
    + " THEN "
    + TIME_HIGH
    + " ELSE {c} END"
)


def clamped(expression: str) -> str:
    """``expression`` (a timestamptz) read clamped as every column read is: for the
    aggregates (min, max) that hand a stored value back."""
    return _CLAMPED.format(c=expression)


def _cast(sql_type: str, **read: Any) -> Read:
    """A column read cast to ``sql_type``, so every driver hands back the same type."""
    return Read(sql="{c}::" + sql_type, returns=sql_type, **read)


def _errors(value: Any) -> list[AttemptError]:
    return [AttemptError.from_json(e) for e in value] if value else []


# How Postgres reads the job columns that need more than the stored value: JSON and the
# enum as text, bit(8) as integer, timestamps clamped. Postgres's types guarantee almost
# everything; the strict decoders are for what they don't (a driver's odd value).
_CLAMPED_TIME = Read(sql=_CLAMPED)
JOB_READER = JobReader(
    {
        "args": _cast("text"),
        "attempted_at": _CLAMPED_TIME,
        "attempted_by": Read(fast="{v} or []", strict=lambda v: v or []),
        "created_at": _CLAMPED_TIME,
        "errors": _cast(
            "text[]",
            fast="[AttemptError.from_json(e) for e in {v}] if {v} else []",
            strict=_errors,
        ),
        "finalized_at": _CLAMPED_TIME,
        "metadata": _cast("text", fast="decode_metadata({v})", strict=decode_metadata),
        "state": _cast("text", fast="STATE_BY_NAME[{v}]", strict=lambda v: STATE_BY_NAME[v]),
        "scheduled_at": _CLAMPED_TIME,
        "tags": _cast("text[]"),
        "unique_key": Read(
            fast="bytes({v}) if {v} is not None else None",
            strict=lambda v: None if v is None else bytes(v),
        ),
        "unique_states": _cast("integer"),
    },
    {
        "AttemptError": AttemptError,
        "STATE_BY_NAME": STATE_BY_NAME,
        "decode_metadata": decode_metadata,
    },
    {
        "args": f"left({{c}}::text, {PREVIEW_ARGS_MAX + 1})",
        "metadata": "'{{}}'::text",
        "errors": "({c}[array_upper({c}, 1):])::text[]",
    },
)
job_columns = JOB_READER.columns

#: The river_queue columns every queue-returning statement lists, in QueueRow order.
QUEUE_SELECT = select_list(QUEUE_COLUMNS, {"metadata": _cast("text")})

# The NOTIFY channel for a topic: River's "<schema>.<topic>", with current_schema() when
# no schema is configured.
CHANNEL = "concat(coalesce(:schema::text, current_schema()), '.{topic}')"


def channel_sql(topic: str) -> str:
    """The SQL for ``topic``'s channel, as riverboat._channels.channel_name names it."""
    short = SHORT_TOPICS.get(topic)
    if short is None:
        return CHANNEL.format(topic=topic)
    room = CHANNEL_MAX - len(f".{topic}".encode())
    return (
        f"(CASE WHEN octet_length(coalesce(:schema::text, current_schema())) > {room}"
        f" THEN {CHANNEL.format(topic=short)} ELSE {CHANNEL.format(topic=topic)} END)"
    )


# What a claim writes to each row it takes (River's JobGetAvailable): the next attempt,
# when (the client's clock when :now is given) and by whom, keeping the last
# :max_attempted_by names. Column name to expression, for the claim's SET and for a
# workflow promotion that claims the tasks it makes ready (postgres_workflow.py).
CLAIM_SET = {
    "attempt": "least(river_job.attempt::integer + 1, 32767)",
    "attempted_at": "coalesce(:now::timestamptz, now())",
    "attempted_by": """array_append(
        CASE WHEN array_length(river_job.attempted_by, 1) >= :max_attempted_by::integer
             THEN river_job.attempted_by[
                array_length(river_job.attempted_by, 1) + 2 - :max_attempted_by::integer:]
             ELSE river_job.attempted_by
        END,
        :attempted_by::text)""",
}


def state_in_bitmask(states: str, state: str) -> str:
    """River's ``river_job_state_in_bitmask(states, state)`` (the twin of
    _sqlite_common's, which SQLite spells out)."""
    return f"<schema>river_job_state_in_bitmask({states}, {state})"


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
