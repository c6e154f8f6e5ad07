"""Flow control: when a queue's jobs may start, enforced by the database for every
riverboat process that works the queue (docs/flow-control.md).

Declared per queue on :class:`~riverboat.QueueConfig`, each control is checked inside the
claim statement, so no process ever starts a job the control forbids:

- :class:`ConcurrencyLimit`: at most ``global_limit`` jobs of the queue running at once
  across every process (and at most ``local_limit`` in this one), optionally per
  partition (by kind and/or by the values of some args keys);
- :class:`RateLimit`: at most ``limit`` job starts per ``period`` (sliding), optionally
  per partition;
- ``sequences=True``: jobs inserted with the same sequence key
  (``InsertOpts(sequence="...")``) run one at a time, in id (insertion) order.

A held-back job stays ``available``: it is not claimed, so no attempt is counted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from riverboat._json import check_text_param
from riverboat._seconds import is_seconds
from riverboat.errors import InvalidInputError

__all__ = [
    "FLOW_CLAIM_LINE_VERSION",
    "SEQUENCE_METADATA_KEY",
    "ConcurrencyLimit",
    "FlowControl",
    "LimitUse",
    "RateLimit",
    "check_args_keys",
    "check_sequence_key",
    "limit_uses",
    "local_limit_uses",
    "merge_number_forms",
    "partition_args_keys",
    "partition_of",
    "sequence_uses",
]

SEQUENCE_METADATA_KEY = "riverboat_sequence"
# The version of riverboat's migration line whose function the Postgres claim calls
# (riverboat_flow_claim_jobs_v3).
FLOW_CLAIM_LINE_VERSION = 5
SEQUENCE_KEY_MAX = 255
ARGS_KEY_MAX = 100
LIMIT_MAX = 1_000_000


def _positive_int(value: object, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= LIMIT_MAX:
        raise InvalidInputError(field_name, f"must be an int from 1 to {LIMIT_MAX}, not {value!r}")
    return value


def _args_keys(value: object, field_name: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidInputError(field_name, "must be a list of args keys (str)")
    keys = tuple(value)
    for key in keys:
        if not isinstance(key, str) or not 0 < len(key) <= ARGS_KEY_MAX:
            raise InvalidInputError(field_name, f"args keys must be str of 1 to {ARGS_KEY_MAX}")
        # No args key has a NUL or a lone surrogate (inserts refuse them); the claim
        # would fail on every fetch instead (Postgres), or end the producer (SQLite).
        check_text_param(key, field_name)
    if len(set(keys)) != len(keys):
        raise InvalidInputError(field_name, "lists an args key twice")
    return keys


@dataclass(slots=True, frozen=True)
class ConcurrencyLimit:
    """At most ``global_limit`` jobs of the queue running at once across the fleet, and
    at most ``local_limit`` in this client; each per partition when ``by_kind`` or
    ``by_args`` is set (e.g. ``by_args=["customer_id"]``: at most N per customer). A
    job whose args lack a ``by_args`` key is in the partition of ``null``."""

    global_limit: int | None = None
    local_limit: int | None = None
    by_kind: bool = False
    by_args: Sequence[str] = ()

    def __post_init__(self) -> None:
        if self.global_limit is None and self.local_limit is None:
            raise InvalidInputError("ConcurrencyLimit", "needs global_limit or local_limit")
        if self.global_limit is not None:
            _positive_int(self.global_limit, "global_limit")
        if self.local_limit is not None:
            _positive_int(self.local_limit, "local_limit")
        _bool(self.by_kind, "by_kind")
        object.__setattr__(self, "by_args", _args_keys(self.by_args, "by_args"))


def _bool(value: object, field_name: str) -> None:
    # A string reached the claim as the partition flag: Postgres failed every claim of
    # the queue on "x" (the job waited for good), and took "false" as false where
    # SQLite took any non-empty string as true.
    if not isinstance(value, bool):
        raise InvalidInputError(field_name, f"must be True or False, not {value!r}")


@dataclass(slots=True, frozen=True)
class RateLimit:
    """At most ``limit`` job starts in any ``period`` (a sliding window, seconds or a
    timedelta) across the fleet, per partition when ``by_kind``/``by_args`` is set."""

    limit: int
    period: timedelta | float
    by_kind: bool = False
    by_args: Sequence[str] = ()

    def __post_init__(self) -> None:
        _positive_int(self.limit, "limit")
        seconds = self.period.total_seconds() if isinstance(self.period, timedelta) else self.period
        if not is_seconds(seconds, at_least=0.001) or seconds > 86_400 * 7:
            raise InvalidInputError("period", "must be from 1 ms to 7 days")
        _bool(self.by_kind, "by_kind")
        object.__setattr__(self, "by_args", _args_keys(self.by_args, "by_args"))

    @property
    def seconds(self) -> float:
        if isinstance(self.period, timedelta):
            return self.period.total_seconds()
        return float(self.period)


@dataclass(slots=True, frozen=True)
class FlowControl:
    """What a queue's claim must respect; built from its QueueConfig."""

    concurrency: ConcurrencyLimit | None = None
    rate: RateLimit | None = None
    sequences: bool = False
    # A discarded job releases its sequence (True) or halts it until retried or
    # cancelled (False, the default).
    sequence_continue: bool = False

    @property
    def scans_ahead(self) -> bool:
        """Whether the claim must look past the first ``max_to_lock`` candidates: with
        partitions or sequences a candidate may have no room while a later one has."""
        con, rate = self.concurrency, self.rate
        return (
            self.sequences
            or (con is not None and (con.by_kind or bool(con.by_args)))
            or (rate is not None and (rate.by_kind or bool(rate.by_args)))
        )

    @property
    def whole_queue_concurrency(self) -> bool:
        """Only a concurrency limit over the whole queue (no partitions, rate limit or
        sequences): what a client can count by how many of its jobs are in flight,
        without reading the table (dialect/postgres_flow.py)."""
        con = self.concurrency
        return (
            con is not None
            and not con.by_kind
            and not con.by_args
            and self.rate is None
            and not self.sequences
        )

    def describe(self) -> dict[str, Any]:
        """The limits as JSON, for riverboat's registry of live workers (what
        ``riverboat queues limits`` and the dashboard show)."""
        out: dict[str, Any] = {}
        con, rate = self.concurrency, self.rate
        if con is not None:
            limits = {"global_limit": con.global_limit, "local_limit": con.local_limit}
            out["concurrency"] = {**limits, **_partition(con)}
        if rate is not None:
            out["rate"] = {"limit": rate.limit, "period": rate.seconds, **_partition(rate)}
        if self.sequences:
            out["sequences"] = "continue" if self.sequence_continue else "halt"
        return out

    def params(self) -> dict[str, Any]:
        """The limit parameters the flow-controlled claim statement binds (both
        dialects name them alike)."""
        out: dict[str, Any] = {}
        con, rate = self.concurrency, self.rate
        if con is not None and con.global_limit is not None:
            out["global_limit"] = con.global_limit
        if con is not None and con.local_limit is not None:
            out["local_limit"] = con.local_limit
        if rate is not None:
            out["rate_limit"] = rate.limit
            out["rate_period"] = rate.seconds
        if self.sequences:
            out["sequence_continue"] = self.sequence_continue
        return out

    @classmethod
    def of(cls, config: Any) -> FlowControl | None:
        """The flow control a QueueConfig asks for, or None (the plain claim)."""
        concurrency = getattr(config, "concurrency", None)
        rate = getattr(config, "rate_limit", None)
        sequences = getattr(config, "sequences", False)
        on_discard = getattr(config, "sequence_on_discard", "halt")
        if on_discard not in ("halt", "continue"):
            raise InvalidInputError("sequence_on_discard", "must be 'halt' or 'continue'")
        if concurrency is None and rate is None and not sequences:
            return None
        if concurrency is not None and not isinstance(concurrency, ConcurrencyLimit):
            raise InvalidInputError("concurrency", "must be a riverboat.ConcurrencyLimit")
        if rate is not None and not isinstance(rate, RateLimit):
            raise InvalidInputError("rate_limit", "must be a riverboat.RateLimit")
        if not isinstance(sequences, bool):
            raise InvalidInputError("sequences", "must be True or False")
        return cls(concurrency, rate, sequences, on_discard == "continue")


def partition_of(by_kind: bool, by_args: Sequence[str], kind: str, args: Any) -> list[Any]:
    """A job's partition as the claim statement computes it (for display and tests)."""
    out: list[Any] = [kind] if by_kind else []
    for key in by_args:
        out.append(args.get(key) if isinstance(args, dict) else None)
    return out


def check_sequence_key(value: object, field: str = "opts.sequence") -> str:
    """A sequence key a job may carry: refused naming ``field`` (the caller gave no
    metadata, so a key with a NUL or a lone surrogate must not be blamed on it)."""
    if not isinstance(value, str) or not 0 < len(value) <= SEQUENCE_KEY_MAX:
        raise InvalidInputError(
            field, f"must be a str of 1 to {SEQUENCE_KEY_MAX} characters, not {value!r:.80}"
        )
    return check_text_param(value, field)


def partition_args_keys(queues: Mapping[str, Any] | None) -> dict[str, tuple[str, ...]]:
    """Per queue of ``queues`` (a client's QueueConfigs), the args keys its limits are
    partitioned by (``by_args``): the keys every job inserted into it must have."""
    out: dict[str, tuple[str, ...]] = {}
    for name, config in (queues or {}).items():
        flow = FlowControl.of(config)
        if flow is None:
            continue
        keys: list[str] = []
        for limit in (flow.concurrency, flow.rate):
            if limit is not None:
                keys += [key for key in limit.by_args if key not in keys]
        if keys:
            out[name] = tuple(keys)
    return out


def check_args_keys(
    required: Mapping[str, tuple[str, ...]], jobs: Sequence[Any], *, many: bool
) -> None:
    """Refuse a job whose args lack a key its queue's limits are partitioned by
    (``required``, from :func:`partition_args_keys`): the claim would put it in the
    partition of ``null``, shared with every other job without the key."""
    for index, job in enumerate(jobs):
        keys = required.get(job.queue)
        if not keys:
            continue
        args = json.loads(job.encoded_args)
        for key in keys:
            if not isinstance(args, dict) or key not in args:
                field = f"params[{index}].args" if many else "args"
                raise InvalidInputError(
                    field,
                    f"has no {key!r}, which the limits of queue {job.queue!r} are "
                    "partitioned by (by_args)",
                )


SEQUENCE_USE_ROWS = 100


@dataclass(slots=True, frozen=True)
class LimitUse:
    """One limit of a queue (as its live workers report it) in one partition: how much of
    it is in use and how many due jobs it holds back now.

    ``limit`` is one of:

    - ``"concurrency"``: ``in_use`` is the jobs running across the fleet, against
      ``global_limit``;
    - ``"local"``: one row per live ``worker`` (its client id): ``in_use`` is the jobs
      that worker runs, against its ``local_limit``; ``due`` and ``held_back`` are the
      partition's, held back when no worker has local room left;
    - ``"rate"``: ``in_use`` is the jobs started in the last ``period`` seconds;
    - ``"sequence"``: one row per sequence key with jobs running or due (``partition``
      is ``[key]``, ``value`` 1): a due job that is not the head of its sequence, or
      whose head is running or halted, is held back.

    ``partition`` is the kind (when ``by_kind``) then the value of each ``by_args`` key,
    empty for a limit on the whole queue. ``held_back``: available jobs already due that
    the limit keeps from starting (those beyond the room it has left)."""

    queue: str
    limit: str
    value: int
    period: float | None
    partition: list[Any]
    in_use: int
    due: int
    held_back: int
    worker: str | None = None


def limit_uses(
    queue: str, described: Mapping[str, Any], rows: Sequence[Sequence[Any]], *, rate: bool
) -> list[LimitUse]:
    """:class:`LimitUse` per partition from a dialect's ``flow_use`` rows, for the
    concurrency limit (``rate`` False) or the rate limit of a queue's ``described``
    flow control (:meth:`FlowControl.describe`)."""
    spec = described.get("rate" if rate else "concurrency") or {}
    value = spec.get("limit" if rate else "global_limit")
    if not isinstance(value, int):
        return []
    out = []
    for part_kind, part_args, running, started, due in rows:
        partition = _partition_key(spec, part_kind, part_args)
        in_use = int(started if rate else running)
        room = max(0, value - in_use)
        out.append(
            LimitUse(
                queue,
                "rate" if rate else "concurrency",
                value,
                spec.get("period") if rate else None,
                partition,
                in_use,
                int(due),
                max(0, int(due) - room),
            )
        )
    return _most_held_back_first(out)


def _most_held_back_first(uses: list[LimitUse]) -> list[LimitUse]:
    """The order every use list is shown in: most held back, then most in use, then by
    partition."""
    uses.sort(key=lambda use: (-use.held_back, -use.in_use, json.dumps(use.partition)))
    return uses


def _partition_key(spec: Mapping[str, Any], part_kind: Any, part_args: Any) -> list[Any]:
    partition: list[Any] = [part_kind] if spec.get("by_kind") else []
    if spec.get("by_args"):
        values = json.loads(part_args) if isinstance(part_args, str) else part_args
        partition += list(values or [])
    return partition


def merge_number_forms(
    rows: Sequence[Sequence[Any]], args_at: int, counts_from: int
) -> list[Sequence[Any]]:
    """Use rows (a dialect's ``flow_use`` or ``flow_local_use``) whose partitions are
    one for a claim that compares JSON numbers by value (Postgres: ``1`` and ``1.0``),
    joined into one row, their counts (the columns from ``counts_from``) added, each
    number written as its exact value (``1.0`` as ``1``). The statements group
    partitions by their text: the limits view showed two rows for one partition, each
    with part of its jobs (the one with ``1.0`` in use 0, while the claim held its jobs
    back as the partition was full). ``args_at``: the column of the partition's args
    values (JSON text)."""
    merged: dict[str, list[Any]] = {}
    for row in rows:
        out = list(row)
        values = out[args_at]
        if isinstance(values, str):
            values = json.loads(values, parse_float=Decimal, parse_int=Decimal)
        # One text for one value, in every statement's rows (the local limit's rows are
        # matched to the use rows by it); the key also reads objects' keys in any order.
        out[args_at] = _number_text(values)
        by_value = [*out[:args_at], _number_text(values, sort_keys=True), *out[args_at + 1 :]]
        key = json.dumps(by_value[:counts_from], default=str)
        if key in merged:
            into = merged[key]
            for i in range(counts_from, len(out)):
                into[i] = int(into[i]) + int(out[i])
        else:
            merged[key] = out
    joined: list[Sequence[Any]] = list(merged.values())
    return joined


def _number_text(value: Any, *, sort_keys: bool = False) -> str:
    """``value`` (decoded JSON, numbers as Decimal) as JSON text that is one text for
    one value as Postgres's jsonb equality sees it: each number as its exact value (a
    whole one as an integer, another in plain decimal notation: floats would join 0.1
    and 0.10000000000000001, and part 9007199254740993 from its .0 form); true is not
    1, and "1" is not 1. With ``sort_keys``, objects' keys are sorted (any order is one
    value), else kept in the order given."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = Decimal(repr(value))
    if isinstance(value, Decimal):
        exact = value.normalize()
        return str(int(exact)) if exact == exact.to_integral_value() else format(exact, "f")
    if isinstance(value, list):
        return "[" + ", ".join(_number_text(item, sort_keys=sort_keys) for item in value) + "]"
    if isinstance(value, dict):
        pairs = sorted(value.items()) if sort_keys else value.items()
        items = (f"{json.dumps(str(k))}: {_number_text(v, sort_keys=sort_keys)}" for k, v in pairs)
        return "{" + ", ".join(items) + "}"
    return json.dumps(value)


def local_limit_uses(
    queue: str,
    described: Mapping[str, Any],
    use_rows: Sequence[Sequence[Any]],
    local_rows: Sequence[Sequence[Any]],
    workers: Sequence[str],
) -> list[LimitUse]:
    """:class:`LimitUse` rows of a queue's local concurrency limit: per partition, one
    row per live worker of ``workers`` (the client ids that report this flow control)
    running jobs in it, or one without a worker when none does. ``use_rows`` are the
    dialect's ``flow_use`` rows (for the partitions' due jobs), ``local_rows`` its
    ``flow_local_use`` rows (worker, kind, args values, running)."""
    spec = described.get("concurrency") or {}
    value = spec.get("local_limit")
    if not isinstance(value, int) or not workers:
        return []
    due: dict[str, tuple[list[Any], int]] = {}
    for part_kind, part_args, _running, _started, part_due in use_rows:
        partition = _partition_key(spec, part_kind, part_args)
        due[json.dumps(partition)] = (partition, int(part_due))
    running: dict[str, dict[str, int]] = {}
    for worker, part_kind, part_args, count in local_rows:
        if worker in workers:
            partition = _partition_key(spec, part_kind, part_args)
            key = json.dumps(partition)
            due.setdefault(key, (partition, 0))
            running.setdefault(key, {})[worker] = int(count)
    out = []
    for key, (partition, part_due) in due.items():
        per_worker = running.get(key, {})
        room = sum(max(0, value - per_worker.get(w, 0)) for w in workers)
        held_back = max(0, part_due - room)
        use = LimitUse(queue, "local", value, None, partition, 0, part_due, held_back)
        if not per_worker:  # due jobs that no worker runs one of yet
            out.append(use)
        for worker, in_use in sorted(per_worker.items()):
            out.append(replace(use, in_use=in_use, worker=worker))
    return _most_held_back_first(out)


def sequence_uses(queue: str, rows: Sequence[Sequence[Any]]) -> list[LimitUse]:
    """:class:`LimitUse` rows of a queue's sequences from the dialect's
    ``flow_sequence_use`` rows (key, running, due, head id, first due id): at most
    :data:`SEQUENCE_USE_ROWS`, those holding back most first."""
    out = []
    for key, running, due, head, first_due in rows:
        startable = int(running) == 0 and head is not None and head == first_due
        held_back = max(0, int(due) - (1 if startable else 0))
        out.append(LimitUse(queue, "sequence", 1, None, [key], int(running), int(due), held_back))
    return _most_held_back_first(out)[:SEQUENCE_USE_ROWS]


def _partition(limit: ConcurrencyLimit | RateLimit) -> dict[str, Any]:
    """How a limit splits a queue's jobs, as :meth:`FlowControl.describe` writes it."""
    return {"by_kind": limit.by_kind, "by_args": list(limit.by_args)}
