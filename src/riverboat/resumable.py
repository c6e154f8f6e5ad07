"""Resumable jobs (River 0.37's ``ResumableStep`` / ``ResumableStepCursor``).

A work function split into named steps with ``job.step(name, fn)`` skips, on a later
attempt, the steps an earlier attempt finished: when an attempt ends in anything but
success (an error, a snooze, a cancellation, or an interruption by a stopping client,
say a deploy), the last finished step is stored in ``metadata["river:resumable_step"]``
and the cursors of unfinished cursor steps in ``metadata["river:resumable_cursor"]``,
River's keys and rules, so a Go worker and a Python one resume each other's jobs.

The state lives on the attempt's work context and is made on the first step call, so a
job that uses no steps pays nothing.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from riverboat._json import go_json_dumps
from riverboat.errors import InvalidInputError

__all__ = ["CURSOR_KEY", "STEP_KEY", "ResumableState"]

STEP_KEY = "river:resumable_step"
CURSOR_KEY = "river:resumable_cursor"


class ResumableStepNotFoundError(Exception):
    """The step an earlier attempt recorded is not among this worker's steps."""


class ResumableState:
    __slots__ = ("completed", "current", "cursors", "had_cursors", "matched", "resume", "seen")

    def __init__(self, metadata: dict[str, Any]) -> None:
        resume = metadata.get(STEP_KEY)
        self.resume = resume if isinstance(resume, str) else ""
        self.matched = self.resume == ""
        cursors = metadata.get(CURSOR_KEY)
        self.cursors: dict[str, Any] = dict(cursors) if isinstance(cursors, dict) else {}
        self.had_cursors = bool(self.cursors)
        self.completed = ""
        self.current = ""  # the cursor step running now
        self.seen: set[str] = set()

    def _enter(self, name: object) -> bool:
        """Check the name; True when the step must run, False when it is skipped."""
        if not isinstance(name, str) or not name:
            raise InvalidInputError("name", "a step name must be a non-empty str")
        if name in self.seen:
            # River 0.40: duplicate names would make resuming ambiguous.
            raise InvalidInputError("name", f"duplicate resumable step name {name!r}")
        self.seen.add(name)
        if self.matched:
            return True
        if name == self.resume:
            self.completed = name
            self.matched = True
        return False

    def step(self, name: str, fn: Callable[..., Any], with_cursor: bool) -> Any:
        run = self._enter(name)
        is_async = inspect.iscoroutinefunction(fn)
        if not run:
            return _done() if is_async else None
        args = (self.cursors.get(name),) if with_cursor else ()
        if is_async:
            return self._run_async(name, fn, args, with_cursor)
        previous, self.current = self.current, name if with_cursor else self.current
        try:
            result = fn(*args)
        finally:
            self.current = previous
        self._finished(name)
        return result

    async def _run_async(
        self,
        name: str,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        with_cursor: bool,
    ) -> Any:
        previous, self.current = self.current, name if with_cursor else self.current
        try:
            result = await fn(*args)
        finally:
            self.current = previous
        self._finished(name)
        return result

    def _finished(self, name: str) -> None:
        self.completed = name
        self.cursors.pop(name, None)

    def set_cursor(self, value: Any) -> None:
        if not self.current:
            raise RuntimeError("set_cursor() can only be called inside job.step_cursor()")
        self.cursors[self.current] = json.loads(go_json_dumps(value))

    def finish(
        self, error: BaseException | None, interrupted: bool, updates: dict[str, Any]
    ) -> BaseException | None:
        """At the attempt's end: the error to record (a resume step the worker no longer
        has is one), and the step and cursors staged when the attempt didn't succeed."""
        if error is None and not interrupted and not self.matched:
            error = ResumableStepNotFoundError(
                f"resumable step {self.resume!r} not found in the worker"
            )
        if (error is not None or interrupted) and self.completed:
            if self.cursors:
                updates[CURSOR_KEY] = self.cursors
            elif self.had_cursors:
                updates[CURSOR_KEY] = None  # the merge is shallow: clear stale cursors
            updates[STEP_KEY] = self.completed
        return error


async def _done() -> None:
    return None
