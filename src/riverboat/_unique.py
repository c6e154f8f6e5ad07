"""River-compatible unique keys and unique-state bitmasks.

The key is ``sha256`` over ``&kind=..&args=..&period=..&queue=..`` exactly as River's Go
client (and the riverqueue-ruby gem) build it, so riverboat, Go River and Ruby deduplicate
against each other. States are not part of the key (they live in ``unique_states``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from riverboat._job import STATE_BY_NAME, JobState, RawArgs, UniqueOpts
from riverboat._json import date_time_text, go_json_canonical, split_object
from riverboat.errors import InvalidInputError

__all__ = [
    "DEFAULT_UNIQUE_STATES",
    "REQUIRED_UNIQUE_STATES",
    "STATE_BITS",
    "KeyedRawArgs",
    "args_unique_part",
    "unique_key",
    "unique_states_bitmask",
    "validate_unique_opts",
]


@dataclasses.dataclass(slots=True, frozen=True)
class KeyedRawArgs(RawArgs):
    """:class:`RawArgs` whose ``&args=`` unique-key part was worked out where the args
    object was (:func:`args_unique_part`): a periodic job's stored template, run by a
    leader without the job's code, has the args' encoded text but not the object that
    says how Go would order and encode its values (a dataclass's fields in order, a
    nested dict's keys sorted, ``1.0`` as ``1``)."""

    unique_part: str = ""


def args_unique_part(
    encoded_args: str, unique_fields: Sequence[str | Sequence[str]] | None, args: object
) -> str:
    """The ``&args=`` part of a by_args unique key for these args (see unique_key)."""
    return _args_for_unique(encoded_args, unique_fields, args)


# Bit values as River's uniquestates package assigns them (available = 1 ... scheduled = 128).
STATE_BITS: dict[JobState, int] = {
    JobState.AVAILABLE: 1 << 0,
    JobState.CANCELLED: 1 << 1,
    JobState.COMPLETED: 1 << 2,
    JobState.DISCARDED: 1 << 3,
    JobState.PENDING: 1 << 4,
    JobState.RETRYABLE: 1 << 5,
    JobState.RUNNING: 1 << 6,
    JobState.SCHEDULED: 1 << 7,
}
DEFAULT_UNIQUE_STATES = (
    JobState.AVAILABLE,
    JobState.COMPLETED,
    JobState.PENDING,
    JobState.RETRYABLE,
    JobState.RUNNING,
    JobState.SCHEDULED,
)
# River refuses custom state lists without these: a unique job must not be duplicated while
# it moves between them, or the producer's own state changes would hit the unique index.
REQUIRED_UNIQUE_STATES = frozenset(
    {JobState.AVAILABLE, JobState.PENDING, JobState.RUNNING, JobState.SCHEDULED}
)
_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)


def _period_seconds(period: timedelta | float) -> timedelta:
    if isinstance(period, timedelta):
        return period
    return timedelta(seconds=float(period))


def _no_period(period: object) -> bool:
    """A zero period: River's ByPeriod 0, "no period" (is_empty() and unique_key() skip
    it too). timedelta(0) is one, not a period "less than 1 second"."""
    return period == 0 or period == timedelta(0)


def validate_unique_opts(opts: UniqueOpts, field: str = "opts.unique_opts") -> None:
    """Apply River's validation: period ≥ 1s, known states, the four required states."""
    if opts.is_empty():
        return
    if opts.by_period is not None and not _no_period(opts.by_period):
        if isinstance(opts.by_period, bool) or not isinstance(
            opts.by_period, (timedelta, int, float)
        ):
            raise InvalidInputError(f"{field}.by_period", "must be a timedelta or seconds")
        if isinstance(opts.by_period, float) and not math.isfinite(opts.by_period):
            raise InvalidInputError(f"{field}.by_period", "must be a finite number of seconds")
        try:
            period = _period_seconds(opts.by_period)
        except OverflowError:
            raise InvalidInputError(f"{field}.by_period", "is too large") from None
        if period < timedelta(seconds=1):
            raise InvalidInputError(f"{field}.by_period", "must not be less than 1 second")
    if opts.exclude_kind and not (opts.by_args or opts.by_period or opts.by_queue):
        raise InvalidInputError(
            f"{field}.exclude_kind", "requires by_args, by_queue or by_period (River 0.48)"
        )
    if isinstance(opts.by_state, str):
        raise InvalidInputError(f"{field}.by_state", "must be a list of job states, not a str")
    if opts.by_state:  # River treats an empty list like no list: the default states
        states = []
        for state in opts.by_state:
            found = STATE_BY_NAME.get(state) if isinstance(state, str) else None
            if found is None:
                raise InvalidInputError(f"{field}.by_state", f"unknown job state {state!r}")
            states.append(found)
        missing = REQUIRED_UNIQUE_STATES.difference(states)
        if missing:
            names = ", ".join(sorted(s.value for s in missing))
            raise InvalidInputError(
                f"{field}.by_state", f"must include every one of the required states: {names}"
            )


def unique_states_bitmask(states: Iterable[JobState | str] | None) -> int:
    """River's ``unique_states`` value for ``by_state`` (the default set when ``None``)."""
    chosen = states or DEFAULT_UNIQUE_STATES
    mask = 0
    for state in chosen:
        mask |= STATE_BITS[STATE_BY_NAME[state]]
    return mask


def _truncate(moment: datetime, period: timedelta) -> datetime:
    # Go's Time.Truncate rounds down to a multiple of the period since the zero time
    # (0001-01-01 UTC), not since the Unix epoch; they differ for periods such as 7 days.
    since_zero = moment.astimezone(UTC) - _ZERO_TIME
    micros = since_zero // timedelta(microseconds=1)
    step = period // timedelta(microseconds=1)
    return _ZERO_TIME + timedelta(microseconds=micros - micros % step)


def _format_rfc3339(moment: datetime) -> str:
    # Go's time.RFC3339 layout has no fractional seconds at all (only RFC3339Nano does), so a
    # bound that falls on a fraction (a 1.5s period) still prints whole seconds.
    return date_time_text(moment) + "Z"


def _sjson_key(key: str) -> str:
    # River assembles the object with sjson, which writes a key verbatim between quotes
    # unless it holds a control character, a non-ASCII byte, a quote or a backslash; only
    # then does it go through Go's encoder (which also HTML-escapes). So an ASCII key "a<b"
    # stays "a<b" while the same text as a value becomes "a\u003cb".
    if key.isascii() and not any(ch < " " or ch in '"\\' for ch in key):
        return '"' + key + '"'
    return go_json_canonical(key)


def _object(items: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(_sjson_key(k) + ":" + v for k, v in items) + "}"


_MISSING = object()
_OPAQUE = object()  # args whose JSON riverboat did not build (to_json() text): kept as is


def _child(original: object, key: str) -> object:
    """The Python value that encoded to ``original``'s JSON member ``key``."""
    if isinstance(original, Mapping):
        if key in original:
            return original[key]
        for candidate, value in original.items():  # int or enum keys, as json.dumps wrote them
            if (
                not isinstance(candidate, str)
                and str(getattr(candidate, "value", candidate)) == key
            ):
                return value
        return _MISSING
    if dataclasses.is_dataclass(original) and not isinstance(original, type):
        return getattr(original, key, _MISSING)
    fields = getattr(type(original), "model_fields", None)
    if isinstance(fields, Mapping):  # a pydantic model: members are fields, maybe aliased
        for name, info in fields.items():
            if key in (
                name,
                getattr(info, "alias", None),
                getattr(info, "serialization_alias", None),
            ):
                return getattr(original, name, _MISSING)
    return _MISSING


def _is_struct(original: object) -> bool:
    if dataclasses.is_dataclass(original) and not isinstance(original, type):
        return True
    return isinstance(getattr(type(original), "model_fields", None), Mapping)


def go_order(original: object, decoded: Any) -> Any:
    """``decoded`` (the args' JSON, decoded) with its objects in the order Go writes them.

    Go's encoding/json writes a map's keys sorted and a struct's fields in declaration
    order. A dict (any Mapping) is riverboat's map and a dataclass or pydantic model its
    struct, at every depth, so the original Python value says which objects to sort. An
    object whose origin is unknown (text from ``to_json()``, or nested in it) keeps its
    order, as Go keeps a ``json.Marshaler``'s output.
    """
    if isinstance(decoded, list):
        items = original if isinstance(original, (list, tuple)) else None
        if items is not None and len(items) == len(decoded):
            return [go_order(o, d) for o, d in zip(items, decoded, strict=True)]
        return [go_order(_OPAQUE, d) for d in decoded]
    if not isinstance(decoded, dict):
        return decoded
    if isinstance(original, Mapping):
        keys = sorted(decoded)
    elif _is_struct(original):
        keys = list(decoded)
    else:
        return {k: go_order(_OPAQUE, v) for k, v in decoded.items()}
    ordered = {}
    for key in keys:
        child = _child(original, key)
        ordered[key] = go_order(_OPAQUE if child is _MISSING else child, decoded[key])
    return ordered


def _lookup(value: object, path: list[str]) -> object:
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _lookup_raw(text: str, path: list[str]) -> str | None:
    """The raw text of the member at ``path`` (gjson's ``Raw``), or None when absent."""
    for part in path:
        if not text.startswith("{"):
            return None
        for key, raw in split_object(text):
            if key == part:
                text = raw
                break
        else:
            return None
    return text


def _gjson_escape(component: str) -> str:
    # gjson.Escape: a backslash before every ASCII byte that is path syntax (all but
    # letters, digits, "_", "-", ":" and bytes up to the space); River adds one before
    # a leading ":" too.
    escaped = "".join(
        ch
        if (ch.isascii() and (ch.isalnum() or ch <= " " or ch in "_-:")) or ch > "~"
        else "\\" + ch
        for ch in component
    )
    return "\\" + escaped if escaped.startswith(":") else escaped


def _split_path(path: str) -> list[str]:
    """A dotted path into its names; a backslash makes the next character literal, as
    in River's gjson paths (``"user\\.id"`` is the one name ``user.id``)."""
    parts: list[str] = []
    current: list[str] = []
    chars = iter(path)
    for ch in chars:
        if ch == "\\":
            current.append(next(chars, "\\"))
        elif ch == ".":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _check_unique_fields(unique_fields: object) -> list[list[str]]:
    """The fields as lists of JSON names, in River's order: sorted by the names joined
    with ".", then by River's escaped path (structtag.SortedFieldsWithTag)."""
    if isinstance(unique_fields, str) or not isinstance(unique_fields, Sequence):
        raise InvalidInputError(
            "args.unique_fields", "must be a list of dotted JSON paths or tuples of names"
        )
    found: list[tuple[str, str, list[str]]] = []
    for field in unique_fields:
        if isinstance(field, str):
            names = _split_path(field)
        elif (
            isinstance(field, (tuple, list))
            and field
            and all(isinstance(name, str) for name in field)
        ):
            names = list(field)
        else:
            raise InvalidInputError(
                "args.unique_fields",
                f"{field!r} is not a dotted JSON path such as 'a.b' nor a tuple of names",
            )
        for name in names:
            if not name:
                raise InvalidInputError(
                    "args.unique_fields", f"{field!r} has an empty name (River's can't)"
                )
            if name.isascii() and name.isdigit():
                # River's key builder (sjson) reads an all-digit name as an array index
                # and writes an array, or fails the insert.
                raise InvalidInputError(
                    "args.unique_fields",
                    f"{field!r}: an all-digit name can't be a unique field",
                )
        escaped = ".".join(_gjson_escape(name) for name in names)
        found.append((".".join(names), escaped, names))
    found.sort(key=lambda entry: (entry[0], entry[1]))
    return [names for _, _, names in found]


def _args_for_unique(
    encoded_args: str,
    unique_fields: Sequence[str | Sequence[str]] | None,
    args: object = _OPAQUE,
) -> str:
    """The ``&args=`` part: River's sorted (or ``river:"unique"``-filtered) args object.

    Go copies each value's raw bytes from its own encoding of the args. riverboat's
    encoded args may differ from those bytes (``to_json()`` output, floats such as
    ``1.0`` that Go writes as ``1``, dict keys in insertion order where Go sorts a map's),
    so values are re-encoded the way Go's encoder writes them, which is what Go's raw
    bytes are; :class:`RawArgs` are Go's raw bytes, copied as they are. With
    ``unique_fields``, River starts from empty bytes, not ``{}``: when no field is
    present (absent, or its path runs through null) the part is ``&args=``.
    """
    if isinstance(args, KeyedRawArgs):
        return args.unique_part
    raw = isinstance(args, RawArgs)
    paths = _check_unique_fields(unique_fields) if unique_fields is not None else []
    decoded: Any = None
    if not raw:
        decoded = json.loads(encoded_args)
        if not isinstance(decoded, dict):
            raise InvalidInputError("args", "must encode to a JSON object")
        decoded = go_order(args, decoded)
    if not paths:
        if raw:
            pairs = sorted(split_object(encoded_args), key=lambda pair: pair[0])
            return _object(pairs)
        return _object((k, go_json_canonical(decoded[k])) for k in sorted(decoded))
    # Nested paths become nested objects, built in sorted-path order as sjson builds them.
    tree: dict[str, object] = {}
    for parts in paths:
        value: str
        if raw:
            found_raw = _lookup_raw(encoded_args, parts)
            if found_raw is None:
                continue
            value = found_raw
        else:
            found = _lookup(decoded, parts)
            if found is _MISSING:
                continue  # Go skips fields absent from the encoded args (omitempty)
            value = go_json_canonical(found)
        node = tree
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                # sjson replaces a value taken whole by the object the longer path needs.
                child = node[part] = {}
            node = child
        node[parts[-1]] = value

    def emit(node: dict[str, object]) -> str:
        return _object((k, emit(v) if isinstance(v, dict) else str(v)) for k, v in node.items())

    return emit(tree) if tree else ""


def unique_key(
    opts: UniqueOpts,
    *,
    kind: str,
    encoded_args: str,
    queue: str,
    now: datetime,
    unique_fields: Sequence[str | Sequence[str]] | None = None,
    args: object = _OPAQUE,
) -> bytes:
    """The 32-byte ``unique_key`` River stores for a job with these options.

    ``now`` is the job's effective scheduled time (``scheduled_at``, else the insert
    time), which River 0.48 truncates for ``by_period`` keys, in UTC.
    ``args`` is the args object ``encoded_args`` came from: it tells which JSON objects
    were dicts (whose keys Go would sort) and which dataclasses or models (kept in field
    order, like a Go struct). Without it every object keeps its encoded order below the
    top level.
    """
    parts: list[str] = []
    if not opts.exclude_kind:
        parts.append("&kind=" + kind)
    if opts.by_args:
        parts.append("&args=" + _args_for_unique(encoded_args, unique_fields, args))
    if opts.by_period:
        bound = _truncate(now, _period_seconds(opts.by_period))
        parts.append("&period=" + _format_rfc3339(bound))
    if opts.by_queue:
        parts.append("&queue=" + queue)
    return hashlib.sha256("".join(parts).encode()).digest()
