"""Pieces every SQLite statement module shares: the job column list, timestamps as River's
SQLite driver writes them, and the inlined unique-states bitmask.

They live here rather than in :mod:`riverboat.dialect.sqlite` so that the dialect's
per-entity mixins (:mod:`~riverboat.dialect.sqlite_admin`,
:mod:`~riverboat.dialect.sqlite_leadership`) can use them without an import cycle.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from riverboat._job import STATE_BY_NAME, AttemptError, JobState, decode_metadata
from riverboat._json import date_time_text, json_loads
from riverboat.dialect._rows import PREVIEW_ARGS_MAX, QUEUE_COLUMNS, JobReader, Read, select_list

__all__ = [
    "JOB_READER",
    "NOW",
    "QUEUE_SELECT",
    "format_timestamp",
    "job_columns",
    "parse_timestamp",
    "seconds_modifier",
    "state_in_bitmask",
    "ts_exact",
    "ts_key",
    "ts_or_none",
    "valid_json_or",
]

# json() raises on a value that is not JSON (text or JSONB), which would fail the whole
# statement: a claim would never succeed again while that row is due. Such a value reads
# as NULL instead, and the decoder names it (JobRow.decode_errors).
_JSON = "CASE WHEN json_valid({c}, 10) THEN json({c}) END"


def valid_json_or(column: str, default: str, json_type: str) -> str:
    """SQL: ``column`` when it is JSON of ``json_type`` ('array', 'object'), else
    ``default``. Writes that modify a JSON column go through this, so one malformed
    value another client wrote can't fail a whole batch of updates."""
    return (
        f"(CASE WHEN json_valid({column}, 10) AND json_type({column}) = '{json_type}'"
        f" THEN {column} ELSE {default} END)"
    )


def errors_append(column: str, error: str) -> str:
    """SQL: ``column`` (a job's errors) with the JSON ``error`` appended, as River 0.48
    appends: a value another client left that is not an array is kept as the first
    element of a new one (invalid JSON as a string), so nothing recorded is lost."""
    return f"""(CASE
        WHEN {column} IS NULL THEN jsonb_array(jsonb({error}))
        WHEN NOT json_valid({column}, 10)
        THEN jsonb_array(CAST({column} AS TEXT), jsonb({error}))
        WHEN json_type({column}) <> 'array' THEN jsonb_array(json({column}), jsonb({error}))
        ELSE jsonb_insert({column}, '$[#]', jsonb({error})) END)"""


def metadata_merge(doc: str, updates: str) -> str:
    """SQL: object ``doc`` with each top-level key of the JSON object ``updates`` set to
    its value, as River 0.50's SQLite driver and Postgres's ``||`` merge metadata: a
    nested object replaces the stored one whole, and a null is kept as null (where
    ``jsonb_patch`` would merge objects recursively and delete keys set to null). The
    keys are applied one ``jsonb_set`` at a time, in a recursive CTE over ``updates``."""
    return f"""(WITH RECURSIVE
        edit AS MATERIALIZED (
            SELECT row_number() OVER () AS n, fullkey AS path, {updates} -> fullkey AS value
            FROM json_each({updates})
        ),
        merged(n, doc) AS (
            SELECT 0, {doc}
            UNION ALL
            SELECT edit.n, jsonb_set(merged.doc, edit.path, jsonb(edit.value))
            FROM merged JOIN edit ON edit.n = merged.n + 1
        )
        SELECT doc FROM merged ORDER BY n DESC LIMIT 1)"""


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


_ROUNDS_UP_TO_MAX = datetime.max - timedelta(microseconds=500)


def format_timestamp(moment: datetime) -> str:
    """River's SQLite timestamp text: UTC, ``YYYY-MM-DD HH:MM:SS.sss``, rounded to the
    millisecond (naive datetimes are taken as UTC)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    # Go's Round(time.Millisecond) rounds halves up (but not past datetime.max, which a
    # worker's next_retry may return: its last millisecond is kept).
    if moment.replace(tzinfo=None) < _ROUNDS_UP_TO_MAX:
        moment = moment + timedelta(microseconds=500)
    return f"{date_time_text(moment, ' ')}.{moment.microsecond // 1000:03d}"


_fromisoformat = datetime.fromisoformat

# Every textual form Go's SQLite drivers bind a time.Time as, and the usual ISO ones: a
# date, optionally a time (space or T) with any number of fraction digits, then an
# optional zone: Z, UTC, +hh, +hhmm or +hh:mm (with or without a space before it), then
# Go's zone abbreviation ("UTC", "CET", "+05") and its monotonic reading (" m=+0.0013").
_TIMESTAMP_RE = re.compile(
    r"""\s*(?P<date>\d{4}-\d\d-\d\d)
    (?:[T ](?P<time>\d\d:\d\d(?::\d\d)?)(?:[.,](?P<frac>\d+))?)?
    \s*(?:(?P<utc>[Zz]|UTC)|(?P<sign>[+-])(?P<hh>\d\d)(?::?(?P<mm>\d\d))?(?::?(?P<ss>\d\d))?)?
    (?:\s+(?:[A-Za-z][A-Za-z0-9_/+-]*|[+-]\d\d(?:\d\d)?))?
    (?:\s+m=[+-]?\d+(?:\.\d+)?)?\s*\Z""",
    re.VERBOSE,
)


def parse_timestamp(value: Any) -> datetime | None:
    """A stored timestamp as an aware UTC datetime.

    Reads River's own text (``2026-12-02 16:57:15.092``, any number of fraction digits,
    no zone: UTC) on a fast path, and every other form Go River's drivers write (see
    docs/river-go.md, "Timestamps on SQLite"): Go's ``Time.String()`` (``... +0000 UTC``,
    with or without `` m=+0.0013``), ``+00:00``/``-07:00``/``Z`` suffixes, a ``T``
    separator, nanoseconds (truncated to microseconds). Numbers are Unix seconds; a
    datetime (a connection's own converter parsed it) is taken as it is, naive as UTC.
    Raises ValueError for anything else, and for years Python cannot hold (before 1 or
    after 9999)."""
    if value is None:
        return None
    if type(value) is str:
        # Fast path: "YYYY-MM-DD HH:MM:SS" plus up to 6 fraction digits, no zone.
        length = len(value)
        if (length == 19 or (21 <= length <= 26 and value[19] == ".")) and value[10] == " ":
            try:
                moment = _fromisoformat(value)
            except ValueError:
                pass  # the general parser decides, and says why
            else:
                if moment.tzinfo is None:
                    return moment.replace(tzinfo=UTC)
        return _parse_timestamp_text(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, datetime):
        # Already parsed by the connection: Django's SQLite backend registers converters
        # for columns declared timestamp (DjangoDriver reads through its connection).
        # Naive is UTC, as River's text is.
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    raise ValueError(f"unrecognised SQLite timestamp: {value!r}")


def _parse_timestamp_text(text: str) -> datetime:
    match = _TIMESTAMP_RE.match(text)
    if match is None:
        raise ValueError(f"unrecognised SQLite timestamp: {text!r}")
    date, clock, frac = match.group("date", "time", "frac")
    iso = date + "T" + (clock or "00:00")
    if frac:
        iso += "." + (frac[:6] + "00000")[:6]  # truncated to microseconds, as Python keeps
    try:
        moment = _fromisoformat(iso)
    except ValueError as exc:
        raise ValueError(f"unrecognised SQLite timestamp: {text!r} ({exc})") from None
    sign = match.group("sign")
    if sign is not None:
        hh, mm, ss = match.group("hh", "mm", "ss")
        offset = timedelta(hours=int(hh), minutes=int(mm or 0), seconds=int(ss or 0))
        if offset >= timedelta(hours=24):
            raise ValueError(f"unrecognised SQLite timestamp: {text!r} (offset out of range)")
        zone = timezone(offset if sign == "+" else -offset)
        try:
            return moment.replace(tzinfo=zone).astimezone(UTC)
        except OverflowError:
            raise ValueError(f"SQLite timestamp out of range in UTC: {text!r}") from None
    return moment.replace(tzinfo=UTC)


def _canonical(column: str) -> str:
    """SQL: ``column`` read by SQLite's date functions, as ``YYYY-MM-DD HH:MM:SS.sss`` in
    UTC. Go's ``Time.String()`` zone (``+0000 UTC``) is rewritten to ``+00:00`` first,
    since SQLite only parses the latter; numbers are Unix seconds (as
    :func:`parse_timestamp` reads them); NULL when SQLite can't read it."""
    c = column
    # Position of the space after the clock, where Go's String() puts its zone.
    space = f"(11 + instr(substr({c}, 12), ' '))"
    go_zone = f"substr({c}, {space} + 1, 5)"
    go_form = (
        f"substr({c}, 1, {space} - 1) || substr({go_zone}, 1, 3) || ':' || substr({go_zone}, 4, 2)"
    )
    return (
        f"coalesce(CASE WHEN typeof({c}) IN ('integer', 'real')"
        f" THEN strftime('%Y-%m-%d %H:%M:%f', {c}, 'unixepoch') END,"
        f" CASE WHEN {space} > 11 AND {go_zone} GLOB '[+-][0-9][0-9][0-9][0-9]'"
        f" THEN strftime('%Y-%m-%d %H:%M:%f', {go_form}) END,"
        f" strftime('%Y-%m-%d %H:%M:%f', {c}))"
    )


def ts_key(column: str, *, unreadable_first: bool = True) -> str:
    """SQL: ``column`` as text that compares correctly with River's own timestamp text
    (what :func:`format_timestamp` writes and ``datetime('now', 'subsec')`` returns).

    River compares timestamps as text, which is right only for its own form; rows Go
    wrote through another driver (a ``T``, an offset other than UTC, a ``Z``) would be
    claimed or rescued hours early or late. River's own text (naive UTC, space, any
    fraction) is returned as it is (cheap: no date parsing on the claim path), anything
    else is normalised. With ``unreadable_first`` a value SQLite cannot read at all is
    ``''``, before every time, so the job is picked up and failed by id instead of being
    silently never due; otherwise it stays NULL (compares as neither)."""
    c = column
    native = (
        f"(typeof({c}) = 'text' AND length({c}) BETWEEN 19 AND 29"
        f" AND substr({c}, 11, 1) = ' ' AND substr({c}, 5, 1) = '-'"
        f" AND substr({c}, 20) NOT GLOB '*[^0-9.]*')"
    )
    fallback = _canonical(c)
    if unreadable_first:  # NULL stays NULL, as in River's comparisons
        fallback = f"coalesce({fallback}, CASE WHEN {c} IS NOT NULL THEN '' END)"
    return f"(CASE WHEN {native} THEN {c} ELSE {fallback} END)"


def ts_exact(column: str) -> str:
    """SQL: ``column`` normalised to ``YYYY-MM-DD HH:MM:SS.sss`` UTC in every case (one
    spelling per instant), for ordering and keyset comparisons; NULL if unreadable."""
    c = column
    native = (
        f"typeof({c}) = 'text' AND length({c}) = 23 AND substr({c}, 11, 1) = ' '"
        f" AND substr({c}, 20, 1) = '.' AND substr({c}, 20) NOT GLOB '*[^0-9.]*'"
    )
    return f"(CASE WHEN {native} THEN {c} ELSE {_canonical(c)} END)"


def ts_or_none(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


def seconds_modifier(seconds: float | None) -> str | None:
    """A ``datetime()`` modifier adding ``seconds`` (River's ``'15.000 seconds'``, with an
    explicit sign); ``None`` stays ``None`` so the whole expression is NULL."""
    if seconds is None:
        return None
    return f"{float(seconds):+.3f} seconds"


# -- reading the job row ----------------------------------------------------------------
def _required(value: Any) -> Any:
    if value is None:
        raise ValueError("NULL in a NOT NULL column")
    return value


def _json_text(value: Any) -> Any:
    # The column list reads JSON SQLite can't parse as NULL (see job_columns).
    if value is None:
        raise ValueError("not valid JSON (or NULL)")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"not an integer: {value!r}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"not text: {value!r}")
    return value


def _json_list(value: Any) -> list[Any]:
    if value is None:
        return []
    decoded = json_loads(value)
    if not isinstance(decoded, list):
        raise TypeError(f"not a JSON array: {value!r}")
    return decoded


def _errors(value: Any) -> list[AttemptError]:
    return [AttemptError.from_json(e) for e in _json_list(value)]


def _time(value: Any) -> datetime:
    return _required(parse_timestamp(_required(value)))  # type: ignore[no-any-return]


def _state(value: Any) -> JobState:
    try:
        return STATE_BY_NAME[value]
    except (KeyError, TypeError):
        raise ValueError(f"not a job state: {value!r}") from None


def _unique_key(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _unique_states(value: Any) -> int | None:
    return None if value is None else _int(value)


# How SQLite reads the job row: JSON through json() (JSON another client stored as JSONB
# or as malformed text reads as NULL, see _JSON), timestamps parsed from text. The
# strict decoders also check each value's type: SQLite stores anything anywhere.
JOB_READER = JobReader(
    {
        "id": Read(strict=_int),
        "args": Read(sql=_JSON, check_null=True, strict=lambda v: _text(_json_text(v))),
        "attempt": Read(strict=_int),
        "attempted_at": Read(fast="parse_timestamp({v})", strict=parse_timestamp),
        "attempted_by": Read(sql=_JSON, fast="json_loads({v}) if {v} else []", strict=_json_list),
        "created_at": Read(fast="parse_timestamp({v})", check_null=True, strict=_time),
        "errors": Read(
            sql=_JSON,
            fast="[AttemptError.from_json(e) for e in json_loads({v})] if {v} else []",
            strict=_errors,
        ),
        "finalized_at": Read(fast="parse_timestamp({v})", strict=parse_timestamp),
        "kind": Read(strict=_text),
        "max_attempts": Read(strict=_int),
        "metadata": Read(
            sql=_JSON, fast="decode_metadata({v})", strict=lambda v: decode_metadata(_json_text(v))
        ),
        "priority": Read(strict=_int),
        "queue": Read(strict=_text),
        "state": Read(fast="STATE_BY_NAME[{v}]", strict=_state),
        "scheduled_at": Read(fast="parse_timestamp({v})", check_null=True, strict=_time),
        "tags": Read(sql=_JSON, fast="json_loads({v})", strict=lambda v: _json_list(_json_text(v))),
        "unique_key": Read(fast="bytes({v}) if {v} is not None else None", strict=_unique_key),
        "unique_states": Read(strict=_unique_states),
    },
    {
        "AttemptError": AttemptError,
        "STATE_BY_NAME": STATE_BY_NAME,
        "decode_metadata": decode_metadata,
        "json_loads": json_loads,
        "parse_timestamp": parse_timestamp,
    },
    {
        "args": f"substr({_JSON}, 1, {PREVIEW_ARGS_MAX + 1})",
        "metadata": "'{{}}'",
        # The last element of a valid array, as a one-element array.
        "errors": "CASE WHEN json_valid({c}, 10) AND json_type({c}) = 'array' "
        "AND json_array_length({c}) > 0 THEN json_array(json({c} -> '$[#-1]')) END",
    },
)
job_columns = JOB_READER.columns

#: The river_queue columns every queue-returning statement lists, in QueueRow order.
QUEUE_SELECT = select_list(QUEUE_COLUMNS, {"metadata": Read(sql="json({c})")})
