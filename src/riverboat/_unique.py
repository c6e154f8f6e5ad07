"""River-compatible unique keys and unique-state bitmasks.

The key is ``sha256`` over ``&kind=..&args=..&period=..&queue=..`` exactly as River's Go
client (and the riverqueue-ruby gem) build it, so riverboat, Go River and Ruby deduplicate
against each other. States are not part of the key (they live in ``unique_states``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from riverboat._job import STATE_BY_NAME, JobState, UniqueOpts
from riverboat._json import go_json_canonical
from riverboat.errors import InvalidInputError

__all__ = [
    "DEFAULT_UNIQUE_STATES",
    "REQUIRED_UNIQUE_STATES",
    "STATE_BITS",
    "unique_key",
    "unique_states_bitmask",
    "validate_unique_opts",
]

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


def validate_unique_opts(opts: UniqueOpts, field: str = "opts.unique_opts") -> None:
    """Apply River's validation: period ≥ 1s, known states, the four required states."""
    if opts.is_empty():
        return
    if opts.by_period is not None and opts.by_period != 0:
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
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


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


def _lookup(value: object, path: list[str]) -> object:
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _check_unique_fields(unique_fields: object) -> list[str]:
    if isinstance(unique_fields, str) or not isinstance(unique_fields, Sequence):
        raise InvalidInputError("args.unique_fields", "must be a list of dotted JSON paths")
    for path in unique_fields:
        if not isinstance(path, str) or not path or "" in path.split("."):
            raise InvalidInputError(
                "args.unique_fields", f"{path!r} is not a dotted JSON path such as 'a.b'"
            )
    return sorted(unique_fields)


def _args_for_unique(encoded_args: str, unique_fields: Sequence[str] | None) -> str:
    """The ``&args=`` part: River's sorted (or ``river:"unique"``-filtered) args object.

    Go copies each value's raw bytes from its own encoding of the args. riverboat's
    encoded args may differ from those bytes (``to_json()`` output, floats such as
    ``1.0`` that Go writes as ``1``), so values are re-encoded the way Go's encoder
    writes them, which is what Go's raw bytes are.
    """
    decoded = json.loads(encoded_args)
    if not isinstance(decoded, dict):
        raise InvalidInputError("args", "must encode to a JSON object")
    paths = _check_unique_fields(unique_fields) if unique_fields is not None else []
    if not paths:
        return _object((k, go_json_canonical(decoded[k])) for k in sorted(decoded))
    # Nested paths become nested objects, built in sorted-path order as sjson builds them.
    tree: dict[str, object] = {}
    for path in paths:
        parts = path.split(".")
        found = _lookup(decoded, parts)
        if found is _MISSING:
            continue  # Go skips fields absent from the encoded args (omitempty)
        node = tree
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                break  # a parent path was already taken as a whole value
            node = child
        else:
            node[parts[-1]] = go_json_canonical(found)

    def emit(node: dict[str, object]) -> str:
        return _object((k, emit(v) if isinstance(v, dict) else str(v)) for k, v in node.items())

    return emit(tree)


def unique_key(
    opts: UniqueOpts,
    *,
    kind: str,
    encoded_args: str,
    queue: str,
    now: datetime,
    unique_fields: Sequence[str] | None = None,
) -> bytes:
    """The 32-byte ``unique_key`` River stores for a job with these options.

    ``now`` is the insert time: River's Go client truncates the current time, not the
    job's ``scheduled_at``, for ``by_period`` keys, and riverboat follows it so keys match.
    """
    parts: list[str] = []
    if not opts.exclude_kind:
        parts.append("&kind=" + kind)
    if opts.by_args:
        parts.append("&args=" + _args_for_unique(encoded_args, unique_fields))
    if opts.by_period:
        bound = _truncate(now, _period_seconds(opts.by_period))
        parts.append("&period=" + _format_rfc3339(bound))
    if opts.by_queue:
        parts.append("&queue=" + queue)
    return hashlib.sha256("".join(parts).encode()).digest()
