"""Turning user args and options into validated, encoded insert parameters (no I/O)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from riverboat._job import InsertManyParams, InsertOpts, JobState, RawArgs, UniqueOpts
from riverboat._json import MAX_JSON_DEPTH, check_json_value, go_compact, go_json_dumps, utc_now
from riverboat._unique import unique_key, unique_states_bitmask, validate_unique_opts
from riverboat.errors import InvalidArgsError, InvalidInputError
from riverboat.flow import SEQUENCE_METADATA_KEY, check_sequence_key

__all__ = [
    "InsertDefaults",
    "InsertParams",
    "chosen_unique_opts",
    "encode_args",
    "resolve_insert",
    "validate_kind",
    "validate_queue",
]

# River's validation patterns (client.go, insert_opts.go). Go's \w is ASCII-only.
_KIND_RE = re.compile(r"\A[\w][\w\-\[\]<>\/.·:+]+\Z", re.ASCII)
# Python's "$" also matches before a trailing newline (Go's does not), so anchor with \Z.
# River's queue pattern is ^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$: Go's engine runs it in
# linear time, Python's backtracks exponentially on it ("a" * 27 + "!" took 5 s, on the
# dashboard's event loop). This one is the same language, unambiguous: runs of [a-z0-9]
# joined by single separators.
_QUEUE_RE = re.compile(r"\A[a-z0-9]+(?:[_|\-][a-z0-9]+)*\Z")
_TAG_RE = re.compile(r"\A[\w][\w\-]+[\w]\Z", re.ASCII)
QUEUE_NAME_MAX = 64
KIND_MAX = 127
TAG_MAX = 255
SMALLINT_MAX = 32767


@dataclass(slots=True, frozen=True)
class InsertDefaults:
    """Client-level defaults (River's Config.MaxAttempts and friends)."""

    queue: str = "default"
    priority: int = 1
    max_attempts: int = 25


@dataclass(slots=True)
class InsertParams:
    """One job ready for a dialect's insert statement."""

    kind: str
    encoded_args: str
    queue: str
    priority: int
    max_attempts: int
    scheduled_at: datetime | None
    state: JobState
    tags: list[str]
    encoded_metadata: str
    unique_key: bytes | None
    unique_states: int | None
    # A job id given before the insert (a workflow's tasks name each other by id in their
    # metadata); None: the database assigns it, as for every other insert.
    id: int | None = None


# Names already found valid: an insert_many of thousands of jobs names a few kinds and
# queues, and the regular expressions are a visible share of resolving a job. Bounded,
# so a caller inventing names can't grow them without limit.
_KNOWN_NAMES_MAX = 1024
_known_kinds: set[str] = set()
_known_queues: set[str] = set()


def _validate_name(
    value: object, field: str, known: set[str], max_len: int, pattern: re.Pattern[str], rule: str
) -> str:
    if type(value) is str and value in known:
        return value
    if not isinstance(value, str):
        raise InvalidInputError(field, f"must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidInputError(field, "must not be empty")
    if len(value) > max_len:
        raise InvalidInputError(field, f"must be at most {max_len} characters")
    if not pattern.match(value):
        raise InvalidInputError(field, f"{value!r} {rule}")
    if type(value) is str and len(known) < _KNOWN_NAMES_MAX:
        known.add(value)
    return value


_KIND_RULE = f"does not match River's kind format {_KIND_RE.pattern}"
_QUEUE_RULE = "must be lowercase letters and digits separated by - or _"


def validate_kind(kind: object, field: str = "kind") -> str:
    return _validate_name(kind, field, _known_kinds, KIND_MAX, _KIND_RE, _KIND_RULE)


def validate_queue(queue: object, field: str = "queue") -> str:
    return _validate_name(queue, field, _known_queues, QUEUE_NAME_MAX, _QUEUE_RE, _QUEUE_RULE)


def _validate_int(value: object, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(field, f"must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidInputError(field, f"must be between {low} and {high}, got {value}")
    return value


def _validate_tags(tags: object, field: str) -> list[str]:
    if isinstance(tags, (str, bytes)) or not isinstance(tags, Sequence):
        raise InvalidInputError(field, "must be a list of str")
    out = []
    for tag in tags:
        if not isinstance(tag, str):
            raise InvalidInputError(field, f"tags must be str, not {type(tag).__name__}")
        if len(tag) > TAG_MAX:
            raise InvalidInputError(field, f"a tag must be at most {TAG_MAX} characters")
        if not _TAG_RE.match(tag):
            raise InvalidInputError(
                field, f"tag {tag!r} must be 3+ characters of letters, digits, _ or -"
            )
        out.append(tag)
    return out


# Times every reader can hold: Python's datetime has years 1 to 9999 only, and a session
# in any time zone must be able to show the value (Postgres drivers convert timestamptz
# to the session's zone). SQLite writes years below 1000 unpadded, which sort after
# every later year, so they are refused too.
TIME_MIN = datetime(1000, 1, 1, tzinfo=UTC)
# The highest time Postgres reads hand back unclamped (dialect/_pg_common.py): a job
# scheduled past it read back a day early.
TIME_MAX = datetime(9999, 12, 29, tzinfo=UTC)


def validate_time(value: object, field: str) -> datetime:
    """A time a user passes that riverboat will store: aware, and in
    :data:`TIME_MIN`..:data:`TIME_MAX` once in UTC (so it round-trips through either
    database and back into Python)."""
    if not isinstance(value, datetime):
        raise InvalidInputError(field, f"must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInputError(field, "must be timezone-aware (naive datetimes are ambiguous)")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not TIME_MIN <= utc <= TIME_MAX:
        raise InvalidInputError(
            field,
            f"{value.isoformat()} is outside the storable range "
            f"({TIME_MIN:%Y-%m-%d} to {TIME_MAX:%Y-%m-%d} in UTC)",
        )
    return value


def encode_metadata(metadata: object, field: str = "opts.metadata") -> str:
    if not isinstance(metadata, Mapping):
        raise InvalidInputError(field, f"must be a mapping, not {type(metadata).__name__}")
    try:
        return go_json_dumps(dict(metadata), allow_sets=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(field, f"is not JSON serialisable: {exc}") from None


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _check_object_text(text: str, field: str) -> str:
    """Validate JSON text from ``to_json()``/pydantic and re-encode it as Go's
    ``json.Marshal`` does with a ``MarshalJSON`` result (compact, HTML-escaped), so the
    stored args and the unique key do not depend on how the text was spaced or escaped."""
    try:
        decoded = json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_object_without_twins
        )
    except ValueError as exc:
        raise InvalidArgsError(field, f"is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidArgsError(
            field, f"is nested deeper than {MAX_JSON_DEPTH} levels, the most riverboat reads back"
        ) from None
    if not isinstance(decoded, dict):
        raise InvalidArgsError(
            field, f"must encode to a JSON object, not a JSON {type(decoded).__name__}"
        )
    try:
        check_json_value(decoded)
        return go_json_dumps(decoded)
    except ValueError as exc:
        raise InvalidArgsError(field, f"is not JSON serialisable: {exc}") from None


def _object_without_twins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys; the first value would be lost unseen.
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"key {key!r} appears twice in one object")
            seen.add(key)
    return out


def _encode_raw_args(args: RawArgs, kind: str | None) -> tuple[str, str]:
    """:class:`RawArgs`: checked like any args text, then kept as written (compacted as
    Go compacts a ``json.RawMessage``), not re-encoded."""
    if args.kind is not None and kind is not None and kind != args.kind:
        raise InvalidArgsError("kind", f"{kind!r} contradicts the args' own kind {args.kind!r}")
    own_kind = args.kind if args.kind is not None else kind
    if own_kind is None:
        raise InvalidArgsError("kind", "RawArgs need a kind (RawArgs(text, kind=...) or kind=)")
    validate_kind(own_kind)
    text = args.text
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError as exc:
            raise InvalidArgsError("args", f"is not UTF-8: {exc}") from None
    if not isinstance(text, str):
        raise InvalidArgsError(
            "args", f"RawArgs text must be str or bytes, not {type(text).__name__}"
        )
    _check_object_text(text, "args")  # refuses what any args text may not hold
    return own_kind, go_compact(text)


def encode_args(args: object, kind: str | None = None) -> tuple[str, str]:
    """Return ``(kind, encoded JSON)`` for any supported args shape.

    Supported: a mapping with an explicit ``kind``; an object with ``kind`` and
    ``to_json()``; a pydantic model with ``kind``; a dataclass with ``kind``.
    """
    if isinstance(args, RawArgs):
        return _encode_raw_args(args, kind)
    if type(args) is dict or isinstance(args, Mapping):
        if kind is None:
            raise InvalidArgsError("kind", "dict args need an explicit kind=")
        validate_kind(kind)
        try:
            plain = args if type(args) is dict else dict(args)
            return kind, go_json_dumps(plain, allow_sets=False)
        except (TypeError, ValueError) as exc:
            raise InvalidArgsError("args", f"is not JSON serialisable: {exc}") from None
    own_kind = getattr(args, "kind", None)
    if own_kind is None:
        if kind is None:
            raise InvalidArgsError(
                "args",
                f"{type(args).__name__} has no kind; give it a `kind` attribute or pass kind=",
            )
        own_kind = kind
    elif kind is not None and kind != own_kind:
        raise InvalidArgsError("kind", f"{kind!r} contradicts the args' own kind {own_kind!r}")
    validate_kind(own_kind)
    to_json = getattr(args, "to_json", None)
    try:
        if callable(to_json):
            raw = to_json()
            if isinstance(raw, bytes):
                raw = raw.decode()
            if isinstance(raw, Mapping):
                return own_kind, go_json_dumps(dict(raw), allow_sets=False)
            if not isinstance(raw, str):
                raise InvalidArgsError("args", "to_json() must return str, bytes or a dict")
            return own_kind, _check_object_text(raw, "args")
        model_dump_json = getattr(args, "model_dump_json", None)
        if callable(model_dump_json):
            return own_kind, _check_object_text(model_dump_json(), "args")
        if dataclasses.is_dataclass(args) and not isinstance(args, type):
            fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(args)}
            return own_kind, go_json_dumps(fields, allow_sets=False)
    except InvalidArgsError:
        raise
    except (TypeError, ValueError) as exc:
        raise InvalidArgsError("args", f"is not JSON serialisable: {exc}") from None
    raise InvalidArgsError(
        "args",
        f"{type(args).__name__} is not a supported args type "
        "(a dataclass, a pydantic model, an object with to_json(), or a dict with kind=)",
    )


def _pick(*values: Any) -> Any:
    for value in values:
        if value is not None:
            return value
    return None


_NO_OPTS = InsertOpts()  # frozen: shared by every job inserted without options


def chosen_unique_opts(opts: InsertOpts | None, own: InsertOpts | None) -> object:
    """The unique options a job is inserted with, from the insert's ``opts`` and the
    args' own ``insert_opts()`` (``own``): River's rule, the per-insert UniqueOpts win
    unless they are empty, then the args' own. Not checked here (anything given)."""
    unique = opts.unique_opts if opts is not None else None
    if unique is None or (isinstance(unique, UniqueOpts) and unique.is_empty()):
        unique = own.unique_opts if own is not None else None
    return unique


def _check_sequence_metadata(value: object) -> None:
    """A sequence given through ``opts.metadata`` (a job's metadata copied onto a new
    insert) as ``opts.sequence`` would write it. A key that was not a string was stored
    as given: the Postgres claim, which compares keys as text, put no two of those jobs
    in one sequence and ran them all at once."""
    if not (isinstance(value, dict) and set(value) == {"key"}):
        raise InvalidInputError(
            "opts.metadata",
            f"{SEQUENCE_METADATA_KEY!r} must be {{'key': <sequence key>}} (or use opts.sequence)",
        )
    check_sequence_key(value["key"], "opts.metadata")


def resolve_insert(
    args: object,
    opts: InsertOpts | None,
    kind: str | None,
    defaults: InsertDefaults,
    now: datetime | None = None,
) -> InsertParams:
    """Validate and encode one job; raises before anything reaches the database."""
    if opts is not None and not isinstance(opts, InsertOpts):
        raise InvalidInputError("opts", f"must be InsertOpts, not {type(opts).__name__}")
    job_kind, encoded_args = encode_args(args, kind)
    own_opts = None
    # A dict has no insert_opts; skipping the failed attribute lookup saves a little on
    # every job of a big insert_many.
    own = None if type(args) is dict else getattr(args, "insert_opts", None)
    if callable(own):
        own_opts = own()
        if own_opts is not None and not isinstance(own_opts, InsertOpts):
            raise InvalidInputError("args.insert_opts()", "must return InsertOpts or None")
    o = opts or _NO_OPTS
    a = own_opts or _NO_OPTS

    queue = validate_queue(_pick(o.queue, a.queue, defaults.queue), "opts.queue")
    priority = _validate_int(
        _pick(o.priority, a.priority, defaults.priority), "opts.priority", 1, 4
    )
    max_attempts = _validate_int(
        _pick(o.max_attempts, a.max_attempts, defaults.max_attempts),
        "opts.max_attempts",
        1,
        SMALLINT_MAX,
    )
    tags_value = o.tags if o.tags is not None else a.tags
    tags = _validate_tags(tags_value, "opts.tags") if tags_value is not None else []
    sequence = _pick(o.sequence, a.sequence)
    if sequence is not None:
        metadata = dict(o.metadata or {})
        if SEQUENCE_METADATA_KEY in metadata:
            raise InvalidInputError(
                "opts.metadata", f"{SEQUENCE_METADATA_KEY!r} is riverboat's own key"
            )
        metadata[SEQUENCE_METADATA_KEY] = {"key": check_sequence_key(sequence)}
        encoded_metadata = encode_metadata(metadata)
    else:
        if o.metadata is not None and SEQUENCE_METADATA_KEY in o.metadata:
            _check_sequence_metadata(o.metadata[SEQUENCE_METADATA_KEY])
        encoded_metadata = "{}" if o.metadata is None else encode_metadata(o.metadata)

    scheduled_value = _pick(o.scheduled_at, a.scheduled_at)
    scheduled_at = None
    state = JobState.AVAILABLE
    if scheduled_value is not None:
        scheduled_at = validate_time(scheduled_value, "opts.scheduled_at")
        state = JobState.SCHEDULED  # River: any explicit time means scheduled, even if past
    for given in (o.pending, a.pending):
        if not isinstance(given, bool):  # "no" is truthy: a job nothing would ever claim
            raise InvalidInputError("opts.pending", f"must be a bool, got {type(given).__name__}")
    if o.pending or a.pending:
        state = JobState.PENDING

    key = None
    states = None
    unique = chosen_unique_opts(o, a)
    if unique is not None and not isinstance(unique, UniqueOpts):
        raise InvalidInputError(
            "opts.unique_opts", f"must be UniqueOpts, not {type(unique).__name__}"
        )
    if unique is not None and not unique.is_empty():
        validate_unique_opts(unique)
        key = unique_key(
            unique,
            kind=job_kind,
            encoded_args=encoded_args,
            queue=queue,
            # River 0.48: the period the job is scheduled in, not the one it's inserted in.
            now=scheduled_at or now or utc_now(),
            unique_fields=getattr(args, "unique_fields", None),
            args=args,
        )
        states = unique_states_bitmask(unique.by_state)

    return InsertParams(
        kind=job_kind,
        encoded_args=encoded_args,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        scheduled_at=scheduled_at,
        state=state,
        tags=tags,
        encoded_metadata=encoded_metadata,
        unique_key=key,
        unique_states=states,
    )


def _default_placement(defaults: InsertDefaults) -> tuple[str, int, int]:
    """The queue, priority and max_attempts of a job without options, validated as
    :func:`resolve_insert` validates them."""
    return (
        validate_queue(defaults.queue, "opts.queue"),
        _validate_int(defaults.priority, "opts.priority", 1, 4),
        _validate_int(defaults.max_attempts, "opts.max_attempts", 1, SMALLINT_MAX),
    )


def resolve_many(
    items: Sequence[object], defaults: InsertDefaults, now: datetime | None = None
) -> list[InsertParams]:
    """Resolve every job of an ``insert_many`` call; all are checked before any is sent."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise InvalidInputError("params", "must be a list of args or InsertManyParams")
    if not items:
        raise InvalidInputError("params", "must contain at least one job")
    now = now or utc_now()
    out = []
    # The usual bulk insert is dict args with a kind and no options: everything but the
    # kind and the args then comes from the client's defaults, the same for every job,
    # so those are validated once (on the first such job) instead of per job.
    queue_priority_attempts: tuple[str, int, int] | None = None
    available = JobState.AVAILABLE
    for index, item in enumerate(items):
        try:
            if isinstance(item, InsertManyParams):
                args, opts, kind = item.args, item.opts, item.kind
            else:
                args, opts, kind = item, None, None
            if opts is not None or type(args) is not dict or kind is None:
                out.append(resolve_insert(args, opts, kind, defaults, now))
                continue
            if queue_priority_attempts is None:
                queue_priority_attempts = _default_placement(defaults)
            queue, priority, max_attempts = queue_priority_attempts
            kind, encoded_args = encode_args(args, kind)
            out.append(
                InsertParams(
                    kind, encoded_args, queue, priority, max_attempts, None, available, [], "{}",
                    None, None,
                )
            )  # fmt: skip
        except InvalidInputError as exc:
            raise type(exc)(f"params[{index}].{exc.field}", str(exc).split(": ", 1)[-1]) from None
    return out
