"""Resumable jobs (River's ``ResumableStep`` / ``ResumableStepCursor``), as River 0.51.

A work function split into named steps with ``job.step(name, fn)`` skips, on a later
attempt, the steps an earlier attempt finished. River's keys and rules, so a Go worker
and a Python one resume each other's jobs:

* ``metadata["river:resumable_step"]`` names the resume point. Every step before it and
  the step itself are skipped, except a cursor step that has a cursor stored under its
  name: that step was checkpointed part-way (River's ``ResumableSetStepCursorTx`` writes
  the running step's name with its cursor) and runs again from the cursor.
* ``metadata["river:resumable_cursor"]`` maps step names to cursors. With no resume
  point, every stored cursor is a cursor-only checkpoint that must be reached through
  ``job.step_cursor``: a plain step of that name, or a run that never reaches it, fails
  the attempt and leaves the checkpoint for a later worker.
* When an attempt doesn't succeed (an error, a snooze, a cancellation, or an
  interruption by a stopping client), the last finished step and any changed cursors are
  staged with its outcome; cursors of finished cursor steps are dropped.
* Steps cannot be nested, and names are unique in one run (River 0.40, 0.50).

The state lives on the attempt's work context and is made on the first step call, so a
job that uses no steps pays nothing.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from riverboat._json import go_json_dumps
from riverboat.errors import InvalidInputError

__all__ = [
    "CURSOR_KEY",
    "STEP_KEY",
    "ResumableState",
    "ResumableStepError",
    "ResumableStepNotFoundError",
]

STEP_KEY = "river:resumable_step"
CURSOR_KEY = "river:resumable_cursor"


class ResumableStepError(Exception):
    """A step used against River's rules: nested in another step, a plain step where a
    cursor checkpoint waits, or a checkpoint written before that cursor step ran."""


class ResumableStepNotFoundError(Exception):
    """The step an earlier attempt recorded is not among this worker's steps."""


class ResumableState:
    __slots__ = (
        "active",
        "completed",
        "cursors",
        "dirty",
        "error",
        "matched",
        "pending",
        "resume",
        "seen",
    )

    def __init__(self, metadata: dict[str, Any]) -> None:
        resume = metadata.get(STEP_KEY)
        self.resume = resume if isinstance(resume, str) else ""
        self.matched = self.resume == ""
        cursors = metadata.get(CURSOR_KEY)
        self.cursors: dict[str, Any] = dict(cursors) if isinstance(cursors, dict) else {}
        # Cursors without a resume point are checkpoints of steps that never finished;
        # with one, River keeps reading older metadata (stale cursors) as before.
        self.pending: list[str] = [] if self.resume else sorted(self.cursors)
        self.dirty = False  # cursors changed since they were read or checkpointed
        self.completed = ""
        self.active = ""  # the step running now
        self.error: BaseException | None = None  # the first step failure, sticky
        self.seen: set[str] = set()

    def _fail(self, error: BaseException) -> BaseException:
        if self.error is None:
            self.error = error
        return error

    def _enter(self, name: object, with_cursor: bool) -> bool:
        """Check the call; True when the step must run, False when it is skipped."""
        if not isinstance(name, str) or not name:
            raise InvalidInputError("name", "a step name must be a non-empty str")
        if self.error is not None:
            return False  # River: after a failed step, no later step runs
        if self.active:
            raise self._fail(ResumableStepError("resumable steps cannot be nested"))
        if name in self.seen:
            # River 0.40: duplicate names would make resuming ambiguous.
            raise self._fail(InvalidInputError("name", f"duplicate resumable step name {name!r}"))
        self.seen.add(name)
        if not with_cursor and name in self.pending:
            raise self._fail(
                ResumableStepError(f"resumable cursor step {name!r} requires a cursor step")
            )
        if self.matched:
            return True
        if name != self.resume:
            return False
        self.completed = name
        self.matched = True
        # A cursor stored for the resume step means it was checkpointed part-way
        # (ResumableSetStepCursorTx): run it again from there.
        return with_cursor and name in self.cursors

    def step(self, name: str, fn: Callable[..., Any], with_cursor: bool) -> Any:
        run = self._enter(name, with_cursor)
        is_async = inspect.iscoroutinefunction(fn)
        if not run:
            return _done() if is_async else None
        args = (self.cursors.get(name),) if with_cursor else ()
        if with_cursor and name in self.pending:
            self.pending.remove(name)
        if is_async:
            return self._run_async(name, fn, args, with_cursor)
        with self._running(name, with_cursor):
            result = fn(*args)
        return result

    async def _run_async(
        self,
        name: str,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        with_cursor: bool,
    ) -> Any:
        with self._running(name, with_cursor):
            result = await fn(*args)
        return result

    @contextmanager
    def _running(self, name: str, with_cursor: bool) -> Iterator[None]:
        """Around one step's call: a failure is recorded, a success marks it finished."""
        self.active = name
        try:
            yield
        except BaseException as exc:
            self._fail(exc)
            raise
        finally:
            self.active = ""
        self._finished(name, with_cursor)

    def _finished(self, name: str, with_cursor: bool) -> None:
        if self.error is not None:
            return  # a failure inside the step (a nested call) that the step swallowed
        self.completed = name
        if with_cursor and name in self.cursors:
            del self.cursors[name]
            self.dirty = True

    def set_cursor(self, value: Any) -> None:
        if not self.active:
            raise RuntimeError("set_cursor() can only be called inside a resumable step")
        self.cursors[self.active] = json.loads(go_json_dumps(value))
        self.dirty = True

    def checkpoint(self, cursor: Any, with_cursor: bool) -> dict[str, Any]:
        """The metadata River's ``ResumableSetStep[Cursor]Tx`` merges to persist the
        running step (and its cursor) at once, in the caller's transaction."""
        if not self.active:
            raise RuntimeError(
                "a resumable checkpoint can only be written inside job.step or job.step_cursor"
            )
        if self.pending:
            raise ResumableStepError(
                f"resumable checkpoint cannot precede saved cursor step {self.pending[0]!r}"
            )
        cursors = dict(self.cursors)
        if with_cursor:
            cursors[self.active] = json.loads(go_json_dumps(cursor))
        return {STEP_KEY: self.active, CURSOR_KEY: cursors or None}

    def checkpointed(self, update: dict[str, Any]) -> None:
        """The checkpoint is written: the caller's transaction owns that progress, so
        it is not staged again with the attempt's outcome (which could resurrect it
        after a rollback)."""
        self.completed = ""
        self.cursors = dict(update[CURSOR_KEY] or {})
        self.dirty = False

    def finish(
        self, error: BaseException | None, interrupted: bool, updates: dict[str, Any]
    ) -> BaseException | None:
        """At the attempt's end: the error to record (a swallowed step failure, a
        resume step or cursor step the worker no longer has), and the step and cursors
        staged when the attempt didn't succeed."""
        if error is None and not interrupted:
            if self.error is not None:
                error = self.error
            elif not self.matched:
                error = ResumableStepNotFoundError(
                    f"resumable step {self.resume!r} not found in the worker"
                )
            elif self.pending:
                error = ResumableStepNotFoundError(
                    f"resumable cursor step {self.pending[0]!r} not found in the worker"
                )
        # Moving the resume point past a cursor checkpoint not yet reached would make
        # that step unreachable, so nothing is staged until it has run.
        if (error is not None or interrupted) and not self.pending:
            if self.dirty:
                # None clears the stored cursors once every one was used up.
                updates[CURSOR_KEY] = self.cursors or None
            if self.completed:
                updates[STEP_KEY] = self.completed
        return error


async def _done() -> None:
    return None
