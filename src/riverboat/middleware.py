"""Insert hooks and work middleware: the place for tracing, context and error reporting.

A middleware is an object with any of these methods (River's ``HookInsertBegin`` and
worker middleware):

``insert_begin(job: InsertingJob) -> None``
    Called for every job before it is encoded and inserted, in the inserting thread.
    It may add to ``job.metadata`` (a dict) and change the queue, priority,
    max_attempts, scheduled_at and tags. Keep it quick and free of I/O: it runs inside
    ``insert``/``insert_many``/``*_tx`` and the leader's periodic inserts.

``async insert_many(jobs, call_next) -> list[InsertResult]``
    River's ``JobInsertMiddleware``: wraps a whole insert call (``insert``,
    ``insert_many``, their ``_tx`` forms, ``insert_many_fast`` and the leader's
    periodic inserts). ``jobs`` is a list of :class:`InsertingJob`, one per job of the
    call, whose fields it may change as ``insert_begin`` may, before calling
    ``await call_next()``; that inserts them (running the ``insert_begin`` hooks on the
    way, as River runs its hooks inside the middleware) and returns one
    :class:`~riverboat.InsertResult` per job, with the row as written and
    ``unique_skipped_as_duplicate``. It returns them (or raises: the call then fails,
    even though an insert outside a transaction has committed). ``insert_many_fast``
    has no rows to return: there ``call_next()`` returns an empty list.

``insert_many_sync(jobs, call_next) -> list[InsertResult]``
    The same for the sync :class:`~riverboat.Client`, a plain def whose ``call_next()``
    is a plain call. Each side uses its own spelling when a middleware has both; a
    middleware with only the other one still runs (a sync one in a thread, with
    ``call_next`` handing back to the loop, as the leader's periodic inserts need; an
    async one in its own event loop), so one written for one client works for both.
    Layers nest in list order, the first listed outermost.

``async work(job, call_next) -> None``
    Wraps a job's execution on the event loop: ``await call_next()`` runs the job (and
    raises what it raised). For a sync job it wraps the time its thread runs, and
    context variables it sets (an OpenTelemetry span, say) are visible inside the
    thread, since the thread runs in a copy of the context taken inside ``call_next``.

``work_sync(job, call_next) -> None``
    Wraps a *sync* job inside its worker thread (for thread-bound state such as
    ``threading.local`` scopes). When a middleware has both, ``work_sync`` wraps sync
    jobs and ``work`` async ones, so each middleware wraps each job once.

``handle_error(job_row, exc)``
    An error handler (River's ``ErrorHandler``), plain or async: sees every failed
    attempt and may cancel the job; see :mod:`riverboat.error_handler`.

``metric_emit(metric) -> None``
    River's ``HookMetricEmit``: called by each producer after every fetch with a
    :class:`~riverboat.metrics.JobGetAvailableDurationMetric` and a
    :class:`~riverboat.metrics.JobGetAvailableCountMetric`, on the runtime's loop. A
    plain def, quick and free of I/O; see :mod:`riverboat.metrics`.

``attach(runtime) -> None``
    Called once the client's runtime has started (its producers and elector running):
    for exporters that sample the runtime, or ``runtime.elector.on_change(callback)``
    to hear when this client gains or loses leadership.

A plain ``async def mw(job, call_next)`` is a work middleware; :func:`insert_hook`,
:func:`metric_hook` and :func:`sync_work_middleware` turn plain functions into the
other kinds.

Order. Insert hooks run in list order: the client's ``middleware``, then the args type's
``insert_middleware`` (a class attribute); each sees what the earlier ones added. Work
middleware nests in list order, the first listed outermost: the client's, then the
worker's (``Workers.register(..., middleware=[...])`` or ``Worker.middleware``). For a sync
job, the ``work`` layers (on the loop) are all outside the ``work_sync`` layers (in the
thread); each group keeps that order.

A middleware's exception becomes the job's error, as the job's own would; raising
``JobCancel`` or ``JobSnooze`` from it decides the outcome the same way. Let
``asyncio.CancelledError`` through: it is how a hard stop or a remote cancel arrives.
The ``job`` is the :class:`~riverboat.Job` the worker gets (args already decoded), so an
unknown kind or args that fail to decode fail before any middleware runs. With no
middleware configured, none of this costs anything: the executor takes its plain path.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from riverboat._insert import encode_metadata
from riverboat.errors import CALLBACK_FAILURES, InvalidInputError
from riverboat.metrics import JobGetAvailableCountMetric, JobGetAvailableDurationMetric, Metric
from riverboat.runtime.outcomes import JobCancel, JobSnooze
from riverboat.runtime.worker import (
    CallNext,
    Job,
    RegisteredWorker,
    normalize_many,
    normalize_one,
)

if TYPE_CHECKING:
    from riverboat._insert import InsertParams
    from riverboat._job import InsertResult

__all__ = [
    "InsertManyMiddleware",
    "InsertMiddleware",
    "InsertingJob",
    "MetricEmitter",
    "MiddlewareStack",
    "SyncWorkMiddleware",
    "WorkMiddleware",
    "insert_hook",
    "metric_hook",
    "outcome_of",
    "sync_work_middleware",
]

SyncCallNext = Callable[[], Any]
InsertCallNext = Callable[[], Awaitable["list[InsertResult]"]]
SyncInsertCallNext = Callable[[], "list[InsertResult]"]

log = logging.getLogger("riverboat.middleware")


@runtime_checkable
class InsertMiddleware(Protocol):
    def insert_begin(self, job: InsertingJob) -> None: ...


@runtime_checkable
class InsertManyMiddleware(Protocol):
    async def insert_many(
        self, jobs: list[InsertingJob], call_next: InsertCallNext
    ) -> list[InsertResult]: ...


@runtime_checkable
class MetricEmitter(Protocol):
    def metric_emit(self, metric: Metric) -> None: ...


@runtime_checkable
class WorkMiddleware(Protocol):
    async def work(self, job: Job[Any], call_next: CallNext) -> None: ...


@runtime_checkable
class SyncWorkMiddleware(Protocol):
    def work_sync(self, job: Job[Any], call_next: SyncCallNext) -> Any: ...


@dataclass(slots=True)
class InsertingJob:
    """A job about to be inserted, as an insert hook (or, one per job of the batch, an
    ``insert_many`` middleware) sees it. ``metadata``, ``queue``,
    ``priority``, ``max_attempts``, ``scheduled_at`` and ``tags`` are written back
    (checked as ``InsertOpts`` would be; a unique job's queue can't change, as it is
    part of its unique key, and riverboat's own metadata keys, a workflow task's or a
    sequence's, must stay as they are); ``kind``, ``args`` and ``state`` are for
    reading."""

    kind: str
    args: object
    queue: str
    priority: int
    max_attempts: int
    state: str
    scheduled_at: datetime | None
    tags: list[str]
    metadata: dict[str, Any]


class _FunctionMiddleware:
    """A middleware made of one function (``insert_hook(fn)`` and friends): each
    subclass names the method the function stands for, and the factory that made it."""

    __slots__ = ("_fn",)
    factory: ClassVar[str]

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn

    def __repr__(self) -> str:
        return f"{self.factory}({self._fn!r})"


class _InsertHook(_FunctionMiddleware):
    __slots__ = ()
    factory = "insert_hook"

    def insert_begin(self, job: InsertingJob) -> None:
        self._fn(job)


class _SyncWork(_FunctionMiddleware):
    __slots__ = ()
    factory = "sync_work_middleware"

    def work_sync(self, job: Job[Any], call_next: SyncCallNext) -> Any:
        return self._fn(job, call_next)


def insert_hook(fn: Callable[[InsertingJob], None]) -> InsertMiddleware:
    """A middleware whose ``insert_begin`` is ``fn``."""
    return _InsertHook(fn)


class _MetricHook(_FunctionMiddleware):
    __slots__ = ()
    factory = "metric_hook"

    def metric_emit(self, metric: Metric) -> None:
        self._fn(metric)


def metric_hook(fn: Callable[[Metric], None]) -> MetricEmitter:
    """A middleware whose ``metric_emit`` is ``fn`` (River's ``HookMetricEmitFunc``)."""
    return _MetricHook(fn)


def sync_work_middleware(fn: Callable[[Job[Any], SyncCallNext], Any]) -> SyncWorkMiddleware:
    """A middleware whose ``work_sync`` is ``fn(job, call_next)``."""
    return _SyncWork(fn)


@dataclass(slots=True, frozen=True)
class _Chain:
    """One worker's middleware with a client's, worked out once per kind."""

    source: RegisteredWorker  # the registered worker this chain was built for
    worker: RegisteredWorker  # the same, its fn wrapped by the work_sync layers
    around: tuple[Callable[[Job[Any], CallNext], Awaitable[None]], ...]


def _sync_wrapped(
    fn: Callable[[Job[Any]], Any], layers: Sequence[Callable[[Job[Any], SyncCallNext], Any]]
) -> Callable[[Job[Any]], Any]:
    def run(job: Job[Any]) -> Any:
        def call(index: int) -> Any:
            if index == len(layers):
                return fn(job)
            return layers[index](job, lambda: call(index + 1))

        return call(0)

    return run


class MiddlewareStack:
    """A client's middleware, split by kind. The executor asks :meth:`chain_for` only
    when the client or the worker has work middleware."""

    def __init__(self, items: Sequence[object] | None = None) -> None:
        self.items: tuple[object, ...] = normalize_many(items, "middleware")
        self._chains: dict[str, _Chain] = {}
        self._own_hooks: dict[type, tuple[Callable[[InsertingJob], None], ...]] = {}
        self._split()

    def _split(self) -> None:
        self.insert_hooks = tuple(m.insert_begin for m in self.items if hasattr(m, "insert_begin"))
        # River's JobInsertMiddleware; empty (the usual case) keeps inserts on their path.
        self.insert_layers = tuple(
            m for m in self.items if hasattr(m, "insert_many") or hasattr(m, "insert_many_sync")
        )
        self.has_work = any(hasattr(m, "work") or hasattr(m, "work_sync") for m in self.items)
        # riverboat.error_handler: objects with handle_error see every failed attempt
        self.error_handlers = tuple(
            m.handle_error for m in self.items if hasattr(m, "handle_error")
        )
        self.metric_hooks: tuple[Callable[[Metric], None], ...] = tuple(
            m.metric_emit for m in self.items if hasattr(m, "metric_emit")
        )
        self._chains.clear()

    def fetch_metrics(self) -> Callable[[str, float, int], None] | None:
        """What a producer calls after each fetch with (queue, seconds, jobs claimed),
        or None when no middleware has ``metric_emit`` (the producer then skips it)."""
        hooks = self.metric_hooks
        if not hooks:
            return None

        def emit(queue: str, duration: float, count: int) -> None:
            metrics = (
                JobGetAvailableDurationMetric(queue, duration),
                JobGetAvailableCountMetric(queue, count),
            )
            for hook in hooks:
                for metric in metrics:
                    try:
                        hook(metric)
                    except CALLBACK_FAILURES:
                        # An exporter's failure must not stop the queue's fetch loop.
                        log.exception("metric_emit hook %r failed on %s", hook, metric.name)

        return emit

    def on_start(self, runtime: object) -> None:
        """Runtime start hook: middleware with ``attach(runtime)`` (metrics exporters)
        get the running runtime, its producers and its elector."""
        for m in self.items:
            attach = getattr(m, "attach", None)
            if callable(attach):
                attach(runtime)

    def add(self, middleware: object) -> None:
        """Append one middleware (before the client starts)."""
        self.items = (*self.items, normalize_one(middleware, "middleware"))
        self._split()

    # -- inserts -----------------------------------------------------------------------
    def _hooks_of(self, args_type: type) -> tuple[Callable[[InsertingJob], None], ...]:
        hooks = self._own_hooks.get(args_type)
        if hooks is None:
            own = getattr(args_type, "insert_middleware", None)
            items = normalize_many(own, f"{args_type.__name__}.insert_middleware") if own else ()
            hooks = tuple(m.insert_begin for m in items if hasattr(m, "insert_begin"))
            self._own_hooks[args_type] = hooks
        return hooks

    def apply_insert(self, jobs: Sequence[InsertParams], args: Sequence[object]) -> bool:
        """Run the insert hooks on each job and re-encode the metadata they changed;
        returns whether any hook ran (a job may then be in another queue)."""

        client_hooks = self.insert_hooks
        hooks_of = self._hooks_of
        ran = False
        for job, job_args in zip(jobs, args, strict=True):
            own = hooks_of(type(job_args))
            hooks = client_hooks + own if own else client_hooks
            if not hooks:
                continue
            ran = True
            view = _view_of(job, job_args)
            for hook in hooks:
                hook(view)
            _apply_view(job, view, "middleware insert_begin")
        return ran

    async def wrap_insert_async(
        self,
        jobs: Sequence[InsertParams],
        args: Sequence[object],
        inner: Callable[[], Awaitable[list[InsertResult]]],
        *,
        rows: bool = True,
    ) -> list[InsertResult]:
        """Run ``inner`` (the insert itself) inside the ``insert_many`` layers. What they
        change in their views is written to ``jobs`` just before ``inner`` runs. With
        ``rows`` the result must be one per job (False: ``insert_many_fast``)."""
        views = [_view_of(job, job_args) for job, job_args in zip(jobs, args, strict=True)]
        layers = self.insert_layers
        loop = asyncio.get_running_loop()

        async def call(index: int) -> list[InsertResult]:
            if index == len(layers):
                _check_same_batch(views, len(jobs))
                for job, view in zip(jobs, views, strict=True):
                    _apply_view(job, view, "middleware insert_many")
                return await inner()
            layer = layers[index]

            def call_next() -> Coroutine[Any, Any, list[InsertResult]]:
                return call(index + 1)

            own = getattr(layer, "insert_many", None)
            if own is not None:
                return _checked(await own(views, call_next), len(jobs), rows)

            # A sync-only middleware: in a thread, handing the rest back to this loop.
            def bridge() -> list[InsertResult]:
                return asyncio.run_coroutine_threadsafe(call_next(), loop).result()

            sync_fn = layer.insert_many_sync  # type: ignore[attr-defined]
            result = await asyncio.to_thread(sync_fn, views, bridge)
            return _checked(result, len(jobs), rows)

        return await call(0)

    def wrap_insert(
        self,
        jobs: Sequence[InsertParams],
        args: Sequence[object],
        inner: Callable[[], list[InsertResult]],
        *,
        rows: bool = True,
    ) -> list[InsertResult]:
        """:meth:`wrap_insert_async` for the sync client."""
        views = [_view_of(job, job_args) for job, job_args in zip(jobs, args, strict=True)]
        layers = self.insert_layers

        def call(index: int) -> list[InsertResult]:
            if index == len(layers):
                _check_same_batch(views, len(jobs))
                for job, view in zip(jobs, views, strict=True):
                    _apply_view(job, view, "middleware insert_many")
                return inner()
            layer = layers[index]
            own = getattr(layer, "insert_many_sync", None)
            if own is not None:
                return _checked(own(views, lambda: call(index + 1)), len(jobs), rows)

            # An async-only middleware: in an event loop of its own, in this thread.
            async def call_next() -> list[InsertResult]:
                return call(index + 1)

            async_fn = layer.insert_many  # type: ignore[attr-defined]
            return _checked(asyncio.run(async_fn(views, call_next)), len(jobs), rows)

        return call(0)

    # -- work --------------------------------------------------------------------------
    def chain_for(self, worker: RegisteredWorker) -> _Chain:
        chain = self._chains.get(worker.kind)
        if chain is None or chain.source is not worker:
            chain = self._build(worker)
            self._chains[worker.kind] = chain
        return chain

    def _build(self, worker: RegisteredWorker) -> _Chain:
        items = (*self.items, *worker.middleware)
        around = []
        sync_layers = []
        for m in items:
            work = getattr(m, "work", None)
            work_sync = getattr(m, "work_sync", None)
            if worker.is_async:
                if work is not None:
                    around.append(work)
            elif work_sync is not None:
                sync_layers.append(work_sync)
            elif work is not None:
                around.append(work)
        wrapped = worker
        if sync_layers:
            wrapped = replace(worker, fn=_sync_wrapped(worker.fn, sync_layers))
        return _Chain(worker, wrapped, tuple(around))


def _view_of(job: InsertParams, job_args: object) -> InsertingJob:
    metadata = {} if job.encoded_metadata == "{}" else json.loads(job.encoded_metadata)
    return InsertingJob(
        job.kind,
        job_args,
        job.queue,
        job.priority,
        job.max_attempts,
        str(job.state),
        job.scheduled_at,
        list(job.tags),
        metadata,
    )


def _check_own_metadata(before: str, after: object, field: str) -> None:
    """Refuse metadata from a hook that lost or changed riverboat's own keys the job had
    (a workflow task's part, a sequence key): a hook replacing the metadata dropped them
    silently, leaving a task pending for ever, or a sequence job out of its sequence."""
    from riverboat.flow import SEQUENCE_METADATA_KEY
    from riverboat.workflow import WORKFLOW_METADATA_KEY

    if WORKFLOW_METADATA_KEY not in before and SEQUENCE_METADATA_KEY not in before:
        return  # the usual job: no need to decode what it had
    had = json.loads(before)
    for key in (WORKFLOW_METADATA_KEY, SEQUENCE_METADATA_KEY):
        if key in had and (not isinstance(after, Mapping) or after.get(key) != had[key]):
            raise InvalidInputError(
                f"{field} metadata",
                f"removed or changed {key!r}, riverboat's own key: add to the metadata"
                " (job.metadata[name] = value) instead of replacing it",
            )


def _apply_view(job: InsertParams, view: InsertingJob, field: str) -> None:
    """Write what a hook or middleware changed in ``view`` back to ``job``."""
    if view.metadata or job.encoded_metadata != "{}":
        _check_own_metadata(job.encoded_metadata, view.metadata, field)
        job.encoded_metadata = encode_metadata(view.metadata, "metadata")
    if (
        view.queue != job.queue
        or view.priority != job.priority
        or view.max_attempts != job.max_attempts
        or view.scheduled_at != job.scheduled_at
        or view.tags != job.tags
    ):
        _write_back(job, view, field)


def _check_same_batch(views: list[InsertingJob], count: int) -> None:
    """The batch an ``insert_many`` middleware hands on has the jobs it was given: it may
    change them, not add or remove any (each result answers one job given; a dropped
    job's insert would be reported as another's)."""
    if len(views) != count:
        raise InvalidInputError(
            "middleware insert_many",
            f"may change the jobs of the batch but not add or remove any ({count} given,"
            f" {len(views)} handed on): filter the jobs before the insert instead",
        )


def _checked(results: object, count: int, rows: bool) -> list[InsertResult]:
    if not isinstance(results, list) or (rows and len(results) != count):
        raise InvalidInputError(
            "middleware insert_many",
            f"must return call_next()'s list of results ({count}), not {results!r:.80}",
        )
    return results


def _write_back(job: InsertParams, view: InsertingJob, field: str) -> None:
    """Apply what insert hooks changed besides metadata (River's insert middleware may
    change any param), checked as ``InsertOpts`` would be."""
    from riverboat._insert import (
        SMALLINT_MAX,
        _validate_int,
        _validate_tags,
        validate_queue,
        validate_time,
    )
    from riverboat._job import JobState

    if view.queue != job.queue:
        if job.unique_key is not None:
            raise InvalidInputError(
                field, "changed the queue of a unique job; set it in InsertOpts instead"
            )
        job.queue = validate_queue(view.queue, f"{field} queue")
    job.priority = _validate_int(view.priority, f"{field} priority", 1, 4)
    job.max_attempts = _validate_int(view.max_attempts, f"{field} max_attempts", 1, SMALLINT_MAX)
    job.tags = _validate_tags(view.tags, f"{field} tags")
    if view.scheduled_at != job.scheduled_at:
        if view.scheduled_at is None:
            raise InvalidInputError(field, "scheduled_at can be moved, not removed")
        job.scheduled_at = validate_time(view.scheduled_at, f"{field} scheduled_at")
        if job.state == JobState.AVAILABLE:
            job.state = JobState.SCHEDULED  # River: an explicit time means scheduled


_EMPTY = MiddlewareStack()


def outcome_of(exc: BaseException | None) -> str:
    """How a job that ended with ``exc`` (None: returned) turns out, as a metrics label:
    completed, snoozed, cancelled, interrupted (hard stop or remote cancel) or failed."""
    if exc is None:
        return "completed"
    if isinstance(exc, JobSnooze):
        return "snoozed"
    if isinstance(exc, JobCancel):
        return "cancelled"
    if isinstance(exc, asyncio.CancelledError):
        return "interrupted"
    return "failed"


async def call_with_middleware(
    stack: MiddlewareStack | None,
    worker: RegisteredWorker,
    job: Job[Any],
    inner: Callable[[RegisteredWorker], Awaitable[None]],
) -> None:
    """Run ``inner(worker)`` (the executor's plain call) inside the job's middleware."""
    chain = (stack or _EMPTY).chain_for(worker)
    layers = chain.around
    target = chain.worker

    async def call(index: int) -> None:
        if index == len(layers):
            await inner(target)
            return
        await layers[index](job, lambda: call(index + 1))

    await call(0)
