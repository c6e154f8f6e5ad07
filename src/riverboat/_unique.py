"""River-compatible unique keys and unique-state bitmasks.

The key is ``sha256`` over ``&kind=..&args=..&period=..&queue=..`` exactly as River's Go
client (and the riverqueue-ruby gem) build it, so riverboat, Go River and Ruby deduplicate
against each other. States are not part of the key (they live in ``unique_states``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from riverboat._job import STATE_BY_NAME, JobState, UniqueOpts
from riverboat._json import split_object
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
        if _period_seconds(opts.by_period) < timedelta(seconds=1):
            raise InvalidInputError(f"{field}.by_period", "must not be less than 1 second")
    if opts.by_state is not None:
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
    chosen = DEFAULT_UNIQUE_STATES if states is None else states
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
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:  # RFC3339 (not Nano) omits the fraction only when it is zero
        text += f".{moment.microsecond:06d}".rstrip("0")
    return text + "Z"


def _args_for_unique(encoded_args: str, unique_fields: Sequence[str] | None) -> str:
    if unique_fields:
        return _subset_json(encoded_args, sorted(unique_fields))
    pairs = split_object(encoded_args)
    pairs.sort(key=lambda pair: pair[0])
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + v for k, v in pairs) + "}"


def _lookup(encoded: str, path: list[str]) -> str | None:
    raw = encoded
    for part in path:
        try:
            pairs = split_object(raw)
        except ValueError:
            return None
        for key, value in pairs:
            if key == part:
                raw = value
                break
        else:
            return None
    return raw


def _subset_json(encoded_args: str, paths: list[str]) -> str:
    """Build the object River builds from ``river:"unique"`` fields: sorted dotted paths."""
    tree: dict[str, object] = {}
    for path in paths:
        parts = path.split(".")
        raw = _lookup(encoded_args, parts)
        if raw is None:
            continue
        node = tree
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            assert isinstance(child, dict)
            node = child
        node[parts[-1]] = raw

    def emit(node: dict[str, object]) -> str:
        items = []
        for key, value in node.items():
            text = emit(value) if isinstance(value, dict) else str(value)
            items.append(json.dumps(key, ensure_ascii=False) + ":" + text)
        return "{" + ",".join(items) + "}"

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
