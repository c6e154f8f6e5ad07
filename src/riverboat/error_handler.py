"""Central error handling (River's ``ErrorHandler``): one place that sees every failed
attempt, for error reporting (Sentry and the like) and for deciding that a failure is
final.

An error handler is an object with a ``handle_error(job, exc)`` method, sync or
``async def``, given in the client's ``middleware=[...]`` list (as River 0.41's plugins
are given once for both roles). ``job`` is the :class:`~riverboat.JobRow` (there may be
no decoded :class:`~riverboat.Job`: the handler also sees jobs whose kind has no worker
and args that fail to decode, which never reach work middleware); ``exc`` is what the
attempt raised, its traceback on ``exc.__traceback__``. Return
``ErrorHandlerResult(set_cancelled=True)`` to cancel the job for good (it is recorded
with this error and never retried), or ``None`` to let the retry policy go on.

It is called for failures only: not for ``JobSnooze``, ``JobCancel`` (already final) or
an interruption by a stopping client. Python has no panics, so River's ``HandlePanic``
has no separate twin: every exception, expected or not, comes to ``handle_error``. A
handler that raises is logged and ignored (the retry goes on). With no handler, nothing
of this runs.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from riverboat._job import JobRow
from riverboat.errors import CALLBACK_FAILURES

__all__ = ["ErrorHandler", "ErrorHandlerResult"]

log = logging.getLogger("riverboat.executor")


@dataclass(frozen=True, slots=True)
class ErrorHandlerResult:
    """What an error handler decides (River's ``ErrorHandlerResult``)."""

    set_cancelled: bool = False


@runtime_checkable
class ErrorHandler(Protocol):
    def handle_error(self, job: JobRow, exc: BaseException) -> Any: ...


async def run_error_handlers(
    handlers: Sequence[Any],
    row: JobRow,
    exc: BaseException,
    in_thread: Callable[..., Awaitable[Any]] | None = None,
) -> bool:
    """Call each handler in order; True when one asked to cancel the job. With
    ``in_thread`` (the runtime's), a handler that is not ``async def`` runs through it,
    on a worker thread: one that reports over the network (or writes with Django's ORM,
    which refuses to run on an event loop's thread) must not hold up the loop."""
    cancel = False
    for handle in handlers:
        try:
            if in_thread is not None and not inspect.iscoroutinefunction(handle):
                result = await in_thread(handle, row, exc)
            else:
                result = handle(row, exc)
            if inspect.isawaitable(result):
                result = await result
        except CALLBACK_FAILURES:
            log.exception("job %d (%s): error handler %r failed", row.id, row.kind, handle)
            continue
        if isinstance(result, ErrorHandlerResult):
            cancel = cancel or result.set_cancelled
        elif result is not None:
            log.warning(
                "job %d (%s): error handler %r returned %r; expected ErrorHandlerResult or None",
                row.id,
                row.kind,
                handle,
                result,
            )
    return cancel
