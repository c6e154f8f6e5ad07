"""The job model: River's row, states, error entries and insert options."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from riverboat._json import date_time_text, json_loads, storable_json

__all__ = [
    "AttemptError",
    "InsertManyParams",
    "InsertOpts",
    "InsertResult",
    "JobRow",
    "JobState",
    "UniqueOpts",
    "format_rfc3339_nano",
]


class JobState(StrEnum):
    """River's job states (the ``river_job_state`` enum)."""

    AVAILABLE = "available"
    CANCELLED = "cancelled"
    COMPLETED = "completed"
    DISCARDED = "discarded"
    PENDING = "pending"
    RETRYABLE = "retryable"
    RUNNING = "running"
    SCHEDULED = "scheduled"


# The error entry River's rescuer (and riverboat's) gives every job it rescues: River's
# own text, so either's rescue is recognised (runtime/outcomes.py, dialect/sqlite_fleet.py).
RESCUE_ERROR = "Stuck job rescued by JobRescuer"

FINALIZED_STATES = frozenset({JobState.CANCELLED, JobState.COMPLETED, JobState.DISCARDED})
# The ends that are not a success: what a workflow's dependency failing means, what a
# retry of a workflow takes up again.
FAILED_STATES = FINALIZED_STATES - {JobState.COMPLETED}
# A job's life in the order River UI's state tabs show it (the dashboard's tabs, the CLI's
# counts): waiting, working, then the three ends.
LIFECYCLE_ORDER = (
    JobState.PENDING,
    JobState.SCHEDULED,
    JobState.AVAILABLE,
    JobState.RUNNING,
    JobState.RETRYABLE,
    JobState.CANCELLED,
    JobState.DISCARDED,
    JobState.COMPLETED,
)
# A plain dict lookup is several times cheaper than JobState(value) on the hot path.
STATE_BY_NAME: dict[str, JobState] = {s.value: s for s in JobState}


def format_rfc3339_nano(moment: datetime) -> str:
    """Format like Go's time.RFC3339Nano in UTC: trailing fractional zeros are dropped."""
    moment = moment.astimezone(UTC)
    text = date_time_text(moment)
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    return text + "Z"


def parse_rfc3339(text: str) -> datetime:
    """Parse the timestamps River writes into JSON (RFC3339 with up to nanoseconds)."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    # Go writes up to 9 fractional digits; Python keeps 6.
    dot = value.find(".")
    if dot != -1:
        end = dot + 1
        while end < len(value) and value[end].isdigit():
            end += 1
        digits = value[dot + 1 : end][:6]
        value = value[: dot + 1] + digits + value[end:]
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


@dataclass(slots=True, frozen=True)
class AttemptError:
    """One entry of a job's ``errors`` list, in River's shape."""

    at: datetime
    attempt: int
    error: str
    trace: str = ""

    def to_json(self) -> str:
        """The entry as River writes it; a NUL or lone surrogate in the message or the
        trace (an exception can carry any text) becomes U+FFFD, so Postgres can store
        it (:func:`~riverboat._json.storable_json`)."""
        return storable_json(
            json.dumps(
                {
                    "at": format_rfc3339_nano(self.at),
                    "attempt": self.attempt,
                    "error": self.error,
                    "trace": self.trace,
                },
                ensure_ascii=False,
                separators=(",", ":"),
            )
        )

    @classmethod
    def from_json(cls, raw: Any) -> AttemptError:
        """One entry: its JSON text (Postgres hands each element of a jsonb[] so, and
        River's SQLite driver stores each as a string in the array), or a value already
        decoded. A string that is not JSON text is such a value (another client wrote a
        bare string: parsing it failed, and the job showed none of its errors); see
        :meth:`from_value`."""
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError:
                pass
        return cls.from_value(raw)

    @classmethod
    def from_value(cls, data: Any) -> AttemptError:
        """One entry, decoded. Lenient: another client may have written any JSON here.
        An entry that is not an object keeps its JSON text as the error; fields of the
        wrong type are dropped. A row must always decode, or the batch it was claimed in
        would be stranded."""
        if not isinstance(data, Mapping):
            return cls(datetime.min, 0, json.dumps(data), "")
        at_raw = data.get("at")
        try:
            at = parse_rfc3339(at_raw) if isinstance(at_raw, str) else datetime.min
        except ValueError:
            at = datetime.min
        attempt = data.get("attempt")
        return cls(
            at=at,
            attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0,
            error=_text(data.get("error")),
            trace=_text(data.get("trace")),
        )


def _text(value: object) -> str:
    """An error entry's text field as stored: a string, "" for a missing or null one
    (not "None"), other JSON as its text."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def decode_metadata(raw: str | bytes) -> dict[str, Any]:
    """A job's metadata; anything but a JSON object (written by another client) reads as
    empty, since every reader expects an object."""
    if raw == "{}" or raw == b"{}":
        return {}  # most jobs: skip the parser (a fresh dict, since callers may mutate it)
    value = json_loads(raw)
    return value if isinstance(value, dict) else {}


_UNDECODED: Any = object()


@dataclass(slots=True, eq=False)
class JobRow:
    """A ``river_job`` row, decoded positionally from a statement's RETURNING list: the
    fields up to ``unique_states`` are the columns of
    :data:`riverboat.dialect._rows.JOB_COLUMNS`, in its order.

    ``encoded_args`` stays the raw JSON text from the database; :attr:`args` decodes it
    on first use and keeps the result, so a job's args are parsed at most once.
    """

    id: int
    encoded_args: str
    attempt: int
    attempted_at: datetime | None
    attempted_by: list[str]
    created_at: datetime
    errors: list[AttemptError]
    finalized_at: datetime | None
    kind: str
    max_attempts: int
    metadata: dict[str, Any]
    priority: int
    queue: str
    state: JobState
    scheduled_at: datetime
    tags: list[str]
    unique_key: bytes | None
    unique_states: int | None
    _args: Any = field(default=_UNDECODED, repr=False)
    #: Empty for every row riverboat could read. Otherwise one ``"column: problem"`` per
    #: value it could not decode (a timestamp, JSON or state another client wrote); those
    #: fields then hold placeholders, and the runtime fails such a job instead of running
    #: it (see docs/reliability.md).
    decode_errors: tuple[str, ...] = field(default=(), repr=False)

    @property
    def args(self) -> Any:
        """The job's args decoded from JSON (a dict for every job River writes)."""
        if self._args is _UNDECODED:
            self._args = json_loads(self.encoded_args)
        return self._args

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JobRow):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in _COMPARED_FIELDS)

    __hash__ = None  # type: ignore[assignment]


_COMPARED_FIELDS = tuple(
    n for n in JobRow.__dataclass_fields__ if n not in ("_args", "decode_errors")
)


@dataclass(slots=True, frozen=True)
class UniqueOpts:
    """River's unique-job options.

    A job is unique when any of ``by_args``, ``by_period``, ``by_queue`` or ``by_state``
    is set. ``exclude_kind`` needs one of ``by_args``, ``by_period`` or ``by_queue``
    (River 0.48 refuses it otherwise, where earlier releases ignored it).
    ``by_period`` accepts a :class:`datetime.timedelta` or seconds; the period is the
    one the job is scheduled in (``scheduled_at``, else the insert time), in UTC.
    """

    by_args: bool = False
    by_period: timedelta | float | None = None
    by_queue: bool = False
    by_state: Sequence[JobState | str] | None = None
    exclude_kind: bool = False

    def is_empty(self) -> bool:
        return (
            not self.by_args
            and not self.by_period
            and not self.by_queue
            and (self.by_state is None)
            and not self.exclude_kind
        )


@dataclass(slots=True, frozen=True)
class RawArgs:
    """Job args given as JSON text, kept as written: Go's ``json.RawMessage``.

    The text (a JSON object) is stored as Go's ``json.Marshal`` writes a raw message
    (white space outside strings removed, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped
    inside them) and the unique key copies its values byte for byte, so ``1e21``,
    ``1.0`` or ``"\u00e9"`` stay as they are, as in River, where re-encoding a dict
    would write ``1e+21``, ``1`` and ``"é"``. ``kind`` may be given here or to
    ``insert(..., kind=)``; ``unique_fields`` narrows ``UniqueOpts(by_args=True)`` as on
    an args class.
    """

    text: str | bytes
    kind: str | None = None
    unique_fields: Sequence[str | Sequence[str]] | None = None


@dataclass(slots=True, frozen=True)
class InsertOpts:
    """Per-insert options; ``None`` means "use the args' or the client's default"."""

    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    scheduled_at: datetime | None = None
    tags: Sequence[str] | None = None
    metadata: Mapping[str, Any] | None = None
    pending: bool = False
    unique_opts: UniqueOpts | None = None
    # riverboat's sequences (riverboat.flow): jobs sharing this key in a queue whose
    # workers set QueueConfig(sequences=True) run one at a time, in insertion order.
    sequence: str | None = None


@dataclass(slots=True, frozen=True)
class InsertManyParams:
    """One job for :meth:`Client.insert_many`: args, options, and a kind for dict args."""

    args: Any
    opts: InsertOpts | None = None
    kind: str | None = None


@dataclass(slots=True, frozen=True)
class InsertResult:
    """The inserted (or, for a unique duplicate, the existing) job."""

    job: JobRow
    unique_skipped_as_duplicate: bool
