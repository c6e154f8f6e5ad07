"""Registering work functions and classes, and the signals a job can raise.

A worker is registered per job kind. Its function may be ``async def`` (run on the event
loop) or a plain ``def`` (run in the queue's thread pool). It receives a :class:`Job`
whose ``args`` are decoded once into the worker's args type: a dataclass, a pydantic
model, or ``dict`` for raw args.
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import json
import logging
import types
import typing
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from riverboat._insert import validate_kind
from riverboat._job import AttemptError, JobRow
from riverboat._json import go_json_storable
from riverboat._seconds import is_seconds
from riverboat.errors import CALLBACK_FAILURES, InvalidInputError
from riverboat.runtime.outcomes import JobCancel, JobSnooze
from riverboat.runtime.process_reference import args_type_reference, process_reference

__all__ = [
    "Job",
    "JobCancel",
    "JobSnooze",
    "Worker",
    "Workers",
    "record_output",
    "set_metadata",
]

T = TypeVar("T")

log = logging.getLogger("riverboat.executor")

OUTPUT_MAX_BYTES = 32 * 1024 * 1024  # River's limit for recorded output


@dataclass(slots=True)
class _WorkContext:
    metadata_updates: dict[str, Any] = dataclasses.field(default_factory=dict)
    resumable: Any = None  # riverboat.resumable.ResumableState, made by the first step
    # job_complete_tx wrote the job completed in the caller's transaction (which may
    # have committed): a failure after it is logged as what it may be.
    completed_in_tx: bool = False


_work_context: contextvars.ContextVar[_WorkContext | None] = contextvars.ContextVar(
    "riverboat_work_context", default=None
)


def _staged_value(key: object, value: Any) -> Any:
    if not isinstance(key, str) or not key:
        raise InvalidInputError("key", "metadata keys must be non-empty strings")
    # A copy, and non-JSON values fail here. Text Postgres can't store (NUL, lone
    # surrogates) is replaced once, here, so what is staged is what will be stored.
    try:
        return json.loads(go_json_storable(value, check_depth=True))
    # A circular or too deeply nested value; bytes, a set, a naive datetime (TypeError).
    except (ValueError, TypeError) as exc:
        raise InvalidInputError(f"metadata[{key!r}]", str(exc)) from None


def set_metadata(key: str, value: Any) -> None:
    """Stage ``metadata[key] = value`` for the job being worked (River's ``MetadataSet``):
    it is written with the job's outcome, in the same statement, whatever the outcome.
    The same as ``job.set_metadata(key, value)``, for code that has no ``job`` at hand."""
    ctx = _work_context.get()
    if ctx is None:
        raise RuntimeError("set_metadata() can only be called while a job is being worked")
    ctx.metadata_updates[key] = _staged_value(key, value)


def record_output(value: Any) -> None:
    """Store ``value`` (JSON-serialisable) as the job's output in ``metadata["output"]``,
    written with the job's completion, as River's ``RecordOutput`` does."""
    ctx = _work_context.get()
    if ctx is None:
        raise RuntimeError("record_output() can only be called while a job is being worked")
    try:
        encoded = go_json_storable(value, check_depth=True)
    except (ValueError, TypeError) as exc:  # TypeError: bytes, a set, a naive datetime
        raise InvalidInputError("output", str(exc)) from None
    check_output_size(encoded)
    ctx.metadata_updates["output"] = json.loads(encoded)


def check_output_size(encoded: str) -> None:
    """Refuse an output whose JSON text passes River's limit for recorded output (its
    JobUpdate's too): record_output's check, and the admin's job_update(output=)."""
    if len(encoded.encode()) > OUTPUT_MAX_BYTES:
        raise InvalidInputError("output", "must encode to at most 32 MB of JSON")


V = TypeVar("V")


class _RowField(Generic[V]):
    """A read-only attribute of :class:`Job` that is its row's field of the same name."""

    __slots__ = ("_name",)

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @typing.overload
    def __get__(self, job: None, owner: type) -> _RowField[V]: ...
    @typing.overload
    def __get__(self, job: Job[Any], owner: type | None = None) -> V: ...
    def __get__(self, job: Job[Any] | None, owner: type | None = None) -> V | _RowField[V]:
        if job is None:  # read on the class (help(), inspect)
            return self
        return getattr(job.row, self._name)  # type: ignore[no-any-return]


class Job(Generic[T]):
    """What a work function receives: the row, plus args decoded into the worker's type."""

    __slots__ = ("_cancel_requested", "_ctx", "args", "row")

    def __init__(self, row: JobRow, args: T, _ctx: _WorkContext | None = None) -> None:
        self.row = row
        self.args = args
        self._cancel_requested = False
        self._ctx = _ctx

    # The row's fields a work function reads most, typed as the row types them.
    id = _RowField[int]()
    kind = _RowField[str]()
    queue = _RowField[str]()
    attempt = _RowField[int]()
    max_attempts = _RowField[int]()
    priority = _RowField[int]()
    tags = _RowField[list[str]]()
    metadata = _RowField[dict[str, Any]]()
    created_at = _RowField[datetime]()
    scheduled_at = _RowField[datetime]()
    attempted_at = _RowField[datetime | None]()
    errors = _RowField[list[AttemptError]]()

    @property
    def is_being_worked(self) -> bool:
        """True while a client (or ``riverboat.testing.work_job``) works this job, so
        :meth:`set_metadata` and the resumable steps can stage what they write."""
        return self._ctx is not None

    @property
    def cancel_requested(self) -> bool:
        """True once someone cancelled this running job remotely. Sync work functions
        cannot be interrupted, so long-running ones should check this and stop."""
        return self._cancel_requested

    def set_metadata(self, key: str, value: Any) -> None:
        """Stage ``metadata[key] = value`` (JSON-serialisable), written with the job's
        outcome in the same statement as its completion, retry, snooze or cancellation
        (River's ``MetadataSet``). Callable from the work function and from middleware,
        before or after ``call_next``. A later value for the same key wins; keys the
        worker doesn't stage keep their stored values."""
        if self._ctx is None:
            raise RuntimeError("set_metadata() works only on a job the client is working")
        self._ctx.metadata_updates[key] = _staged_value(key, value)

    def _resumable(self) -> Any:
        if self._ctx is None:
            raise RuntimeError("resumable steps work only on a job the client is working")
        if self._ctx.resumable is None:
            from riverboat.resumable import ResumableState

            self._ctx.resumable = ResumableState(self.row.metadata)
        return self._ctx.resumable

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` as the resumable step ``name`` (River's ``ResumableStep``), or
        skip it when an earlier attempt got past it; returns ``fn``'s result (``None``
        when skipped). An ``async def`` step returns an awaitable: ``await job.step(...)``.
        Step names must be unique within the work function. See
        :mod:`riverboat.resumable`."""
        return self._resumable().step(name, fn, False)

    def step_cursor(self, name: str, fn: Callable[[Any], Any]) -> Any:
        """A resumable step that receives the cursor an earlier attempt recorded for it
        with :meth:`set_cursor` (``None`` the first time), River's ``ResumableStepCursor``."""
        return self._resumable().step(name, fn, True)

    def set_cursor(self, value: Any) -> None:
        """Record ``value`` (JSON-serialisable) as the running cursor step's position,
        stored if this attempt doesn't succeed (River's ``ResumableSetCursor``)."""
        self._resumable().set_cursor(value)

    @property
    def staged_metadata(self) -> dict[str, Any]:
        """What this attempt has staged so far (a copy), as it will be merged."""
        return dict(self._ctx.metadata_updates) if self._ctx is not None else {}

    def __repr__(self) -> str:
        return f"Job(id={self.row.id}, kind={self.row.kind!r}, attempt={self.row.attempt})"


WorkFn = Callable[[Job[Any]], Any]
# What a work middleware calls to run the rest of the chain (riverboat.middleware).
CallNext = Callable[[], Awaitable[None]]


def _float_fields(args_type: type, names: set[str]) -> frozenset[str]:
    """The init fields of a dataclass declared ``float`` (or ``float | None``)."""
    try:
        hints = typing.get_type_hints(args_type)
    except Exception:  # a forward reference that doesn't resolve: decode as is
        return frozenset()
    found = set()
    for name in names:
        hint = hints.get(name)
        if hint is float or (
            typing.get_origin(hint) in (typing.Union, types.UnionType)
            and float in typing.get_args(hint)
            and int not in typing.get_args(hint)
        ):
            found.add(name)
    return frozenset(found)


def _decoder_for(args_type: Any) -> Callable[[JobRow], Any]:
    if args_type is None or args_type is dict:
        return lambda row: row.args
    validate_json = getattr(args_type, "model_validate_json", None)
    if callable(validate_json):  # pydantic: parse straight from the raw JSON text
        return lambda row: validate_json(row.encoded_args)
    if dataclasses.is_dataclass(args_type) and isinstance(args_type, type):
        names = {f.name for f in dataclasses.fields(args_type) if f.init}
        floats = _float_fields(args_type, names)

        def decode_dataclass(row: JobRow) -> Any:
            data = row.args
            if not isinstance(data, dict):
                raise TypeError(f"args must be a JSON object, got {type(data).__name__}")
            # River args may carry fields this worker doesn't know; ignore them like Go's
            # json.Unmarshal does, rather than failing the job.
            cls: Any = args_type
            values = {k: v for k, v in data.items() if k in names}
            for name in floats.intersection(values):
                value = values[name]
                if type(value) is int:
                    # jsonb stores numbers in their shortest form: 1e16 comes back as
                    # 10000000000000000, an int to json; the field says float.
                    values[name] = float(value)
            return cls(**values)

        return decode_dataclass
    from_json = getattr(args_type, "from_json", None)
    if callable(from_json):
        return lambda row: from_json(row.encoded_args)
    raise InvalidInputError(
        "args_type",
        f"{args_type!r} must be a dataclass, a pydantic model, a class with from_json(), or dict",
    )


class Worker(Generic[T]):
    """Base class for class-based workers.

    Set ``kind`` (or ``args_type`` with a ``kind`` attribute), implement ``work`` (sync or
    async), and optionally ``timeout`` (seconds; ``None`` = client default, ``-1`` = none;
    or a method ``timeout(self, job)`` returning one of those per job, River's
    ``Worker.Timeout(job)``)
    and ``next_retry(job)`` returning a datetime (``None`` = the default policy), and
    ``middleware``, a list wrapping this worker's jobs (see :mod:`riverboat.middleware`).
    """

    kind: str | None = None
    args_type: Any = None
    timeout: float | None = None
    middleware: Sequence[Any] = ()
    kind_aliases: Sequence[str] = ()
    executor: str | None = None  # "thread", "process" or None (the queue's)

    def work(self, job: Job[T]) -> Any | Awaitable[Any]:
        raise NotImplementedError

    def next_retry(self, job: Job[T]) -> datetime | None:
        return None


@dataclass(slots=True)
class RegisteredWorker:
    kind: str
    fn: WorkFn
    is_async: bool
    decode: Callable[[JobRow], Any]
    timeout: float | None
    next_retry: Callable[[Job[Any]], datetime | None] | None
    middleware: tuple[Any, ...] = ()
    # A per-job timeout (River's Worker.Timeout(job)): Worker.timeout as a method, or
    # register(timeout=fn). Used instead of ``timeout`` when set.
    timeout_fn: Callable[[Job[Any]], float | None] | None = None
    # Where a sync job runs: "thread", "process" (riverboat.runtime.process_pool), or
    # None for its queue's executor. For the process executor, the references a child
    # imports the function and args type by (set when known to be needed).
    executor: str | None = None
    process_reference: str | None = None
    process_args_type: str | None = None
    args_type: Any = None


class Workers:
    """The registry of work functions by kind (River's Workers bundle)."""

    def __init__(self) -> None:
        self._by_kind: dict[str, RegisteredWorker] = {}
        # Old kinds still worked by a renamed worker (River's JobArgsWithKindAliases).
        self._aliases: dict[str, RegisteredWorker] = {}

    def _add(
        self,
        kind: str,
        fn: WorkFn,
        args_type: Any,
        timeout: float | Callable[[Job[Any]], float | None] | None,
        next_retry: Callable[[Job[Any]], datetime | None] | None,
        middleware: Sequence[Any] | None = None,
        kind_aliases: Sequence[str] | None = None,
        executor: str | None = None,
    ) -> None:
        validate_kind(kind)
        if executor not in EXECUTORS:
            raise InvalidInputError("executor", 'must be "thread", "process" or None')
        if kind in self:
            raise InvalidInputError("kind", f"a worker for {kind!r} is already registered")
        timeout_fn = None
        if callable(timeout):
            timeout_fn, timeout = timeout, None
        aliases = _kind_aliases(kind_aliases, kind)
        for alias in aliases:
            if alias in self:
                raise InvalidInputError(
                    "kind_aliases", f"a worker for {alias!r} is already registered"
                )
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float))
        ):
            raise InvalidInputError("timeout", "must be seconds (a number), -1 or None")
        if timeout is not None and timeout != -1 and not is_seconds(timeout, positive=True):
            raise InvalidInputError("timeout", "must be positive, -1 (no timeout) or None")
        if executor == "process":
            # What can be told now (a closure, a lambda, an async function...); that the
            # name leads back to the function is checked when a client is made.
            process_reference(fn, kind, resolve=False)
        registered = self._by_kind[kind] = RegisteredWorker(
            kind=kind,
            fn=fn,
            is_async=inspect.iscoroutinefunction(fn),
            decode=_decoder_for(args_type),
            timeout=timeout,
            next_retry=next_retry,
            middleware=_middleware(middleware, kind),
            timeout_fn=timeout_fn,
            executor=executor,
            args_type=args_type,
        )
        for alias in aliases:
            self._aliases[alias] = registered

    def register(
        self,
        kind_or_args: str | type | None = None,
        *,
        args_type: Any = None,
        timeout: float | Callable[[Job[Any]], float | None] | None = None,
        next_retry: Callable[[Job[Any]], datetime | None] | None = None,
        middleware: Sequence[Any] | None = None,
        kind_aliases: Sequence[str] | None = None,
        executor: str | None = None,
    ) -> Callable[[WorkFn], WorkFn]:
        """Decorator: ``@workers.register("email")`` or ``@workers.register(EmailArgs)``.
        ``middleware`` wraps this kind's jobs inside the client's own. ``kind_aliases``
        (default: the args type's ``kind_aliases`` attribute) are former kinds this
        worker still works, River's ``JobArgsWithKindAliases``: rename a kind by keeping
        the old name as an alias until no job of it is left. ``executor`` runs a plain
        ``def`` worker's jobs in threads (``"thread"``) or child processes
        (``"process"``, see docs/process-executor.md) whatever its queue's executor;
        ``None`` (the default) takes the queue's."""
        if isinstance(kind_or_args, type):
            args_type = kind_or_args
            kind = getattr(kind_or_args, "kind", None)
        else:
            kind = kind_or_args if kind_or_args is not None else getattr(args_type, "kind", None)
        if not isinstance(kind, str):
            raise InvalidInputError("kind", "give a kind, or an args type with a kind attribute")

        if kind_aliases is None:
            kind_aliases = getattr(args_type, "kind_aliases", None)

        def decorate(fn: WorkFn) -> WorkFn:
            self._add(kind, fn, args_type, timeout, next_retry, middleware, kind_aliases, executor)
            return fn

        return decorate

    def add(self, worker: Worker[Any]) -> None:
        """Register a :class:`Worker` instance."""
        kind = worker.kind or getattr(worker.args_type, "kind", None)
        if not isinstance(kind, str):
            raise InvalidInputError("kind", f"{type(worker).__name__} needs a kind")
        custom_retry = type(worker).next_retry is not Worker.next_retry
        self._add(
            kind,
            worker.work,
            worker.args_type,
            worker.timeout,
            worker.next_retry if custom_retry else None,
            worker.middleware,
            getattr(worker, "kind_aliases", None)
            or getattr(worker.args_type, "kind_aliases", None),
            worker.executor,
        )

    def update(self, other: Workers) -> None:
        """Register every worker of ``other`` here too, kind aliases included."""
        for kind in other:
            if kind in self:
                raise InvalidInputError("kind", f"a worker for {kind!r} is already registered")
        for alias in other._aliases:
            if alias in self:
                raise InvalidInputError(
                    "kind_aliases", f"a worker for {alias!r} is already registered"
                )
        self._by_kind.update(other._by_kind)
        self._aliases.update(other._aliases)

    def get(self, kind: str) -> RegisteredWorker | None:
        worker = self._by_kind.get(kind)
        if worker is None and self._aliases:
            return self._aliases.get(kind)
        return worker

    def kinds(self) -> list[str]:
        return sorted(self._by_kind)

    def known_kinds(self) -> list[str]:
        """Every kind a worker here takes, aliases included, sorted."""
        return sorted({*self._by_kind, *self._aliases})

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_kind or kind in self._aliases

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_kind)

    def __len__(self) -> int:
        return len(self._by_kind)


EXECUTORS = (None, "thread", "process")


def prepare_for_process(worker: RegisteredWorker) -> None:
    """Check that a child process can import ``worker``'s function and args type by
    reference, and keep the references; a clear InvalidInputError when it can't."""
    reference = process_reference(worker.fn, worker.kind)
    worker.process_args_type = args_type_reference(worker.args_type, worker.kind)
    worker.process_reference = reference


def call_timeout_fn(worker: RegisteredWorker, job: Job[Any]) -> float | None:
    """The worker's timeout for ``job`` from its per-job function: seconds, -1 (none) or
    None (the client's default). A function that fails or returns something else is
    logged and the default applies."""
    assert worker.timeout_fn is not None
    try:
        value = worker.timeout_fn(job)
    except CALLBACK_FAILURES:
        log.exception("job %d (%s): the worker's timeout(job) failed", job.id, job.kind)
        return None
    if value is None or value == -1 or is_seconds(value, positive=True):
        return value
    log.error(
        "job %d (%s): timeout(job) returned %r; expected seconds, -1 or None",
        job.id,
        job.kind,
        value,
    )
    return None


def _kind_aliases(items: Sequence[str] | None, kind: str) -> tuple[str, ...]:
    if not items:
        return ()
    if isinstance(items, str) or not isinstance(items, Sequence):
        raise InvalidInputError("kind_aliases", "must be a list of kinds")
    aliases = tuple(items)
    for alias in aliases:
        validate_kind(alias, "kind_aliases")
    if kind in aliases or len(set(aliases)) != len(aliases):
        raise InvalidInputError("kind_aliases", f"repeat neither {kind!r} nor an alias")
    return aliases


def _middleware(items: Sequence[Any] | None, kind: str) -> tuple[Any, ...]:
    if not items:
        return ()
    return normalize_many(items, f"workers[{kind!r}].middleware")


# -- middleware lists, checked when they are given ---------------------------------------
# Here rather than in riverboat.middleware (which imports this module for Job and
# RegisteredWorker), so a worker's list is checked at registration without a circle.


class _AsyncFn:
    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[Job[Any], CallNext], Awaitable[None]]) -> None:
        self._fn = fn

    async def work(self, job: Job[Any], call_next: CallNext) -> None:
        await self._fn(job, call_next)

    def __repr__(self) -> str:
        return repr(self._fn)


_METHODS = (
    "insert_begin",
    "insert_many",
    "insert_many_sync",
    "work",
    "work_sync",
    "handle_error",
    "metric_emit",
    "attach",
)


def normalize_one(item: object, field: str) -> object:
    if inspect.iscoroutinefunction(item):
        return _AsyncFn(item)
    found = False
    for name in _METHODS:
        method = getattr(item, name, None)
        if method is None:
            continue
        if not callable(method):
            raise InvalidInputError(field, f"{item!r}.{name} is not callable")
        is_async = inspect.iscoroutinefunction(method)
        if name in ("work", "insert_many") and not is_async:
            raise InvalidInputError(
                field,
                f"{item!r}.{name} must be async def; a sync one is spelt {name}_sync",
            )
        if name not in ("work", "insert_many", "handle_error") and is_async:
            raise InvalidInputError(field, f"{item!r}.{name} must be a plain def")
        found = True
    if not found:
        raise InvalidInputError(
            field,
            f"{item!r} is not a middleware: give it insert_begin, insert_many, "
            "insert_many_sync, work, work_sync, handle_error, metric_emit or attach, "
            "or pass an async def (job, call_next)",
        )
    return item


def normalize_many(items: Sequence[object] | None, field: str) -> tuple[object, ...]:
    """Check every middleware of a list; plain async functions are wrapped."""
    if items is None:
        return ()
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise InvalidInputError(field, "must be a list of middleware")
    return tuple(normalize_one(item, f"{field}[{i}]") for i, item in enumerate(items))
