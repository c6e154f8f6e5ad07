"""The garbage collector's settings for a process that only works jobs.

Every job allocates a few dozen container objects (its row, lists and dicts, a Task,
coroutines, its outcome), so CPython's default first threshold (700 net allocations)
runs a young collection every few dozen jobs; jobs still in flight survive it, are
promoted, and make the older collections frequent and long. In River's riverbench
settings that was about a fifth of the worker's Python CPU (660-820 ms of collection per
100,000 inserted and worked jobs). The threshold counts allocations *minus*
deallocations, and a job's objects are freed by reference counting when it ends, so
above the live set of the jobs in flight (about 25,000 objects with 2,000 running) young
collections all but stop: working 200,000 jobs with 2,000 workers collected for 370 ms
at 7,000, 120 ms at 25,000 and 22 ms at 50,000. Memory held by cyclic garbage between
collections grows with the threshold, a few megabytes at 50,000.

``riverboat worker`` owns its process, so it raises the first threshold. A library
must not change process-wide settings behind an application's back: an application
embedding a client can call :func:`tune_collector` itself (or ``gc.set_threshold``).
"""

from __future__ import annotations

import gc
import os

from riverboat.errors import InvalidInputError

__all__ = ["GC_THRESHOLD_DEFAULT", "GC_THRESHOLD_ENV", "tune_collector"]

GC_THRESHOLD_DEFAULT = 50_000
GC_THRESHOLD_ENV = "RIVERBOAT_GC_THRESHOLD"


def tune_collector(threshold: int | None = None) -> int | None:
    """Raise the collector's first-generation threshold to ``threshold`` (default: the
    ``RIVERBOAT_GC_THRESHOLD`` environment variable, else 50,000), never lowering it;
    ``0`` leaves Python's settings alone. Returns the threshold in force, or ``None``
    when left alone."""
    if threshold is None:
        raw = os.environ.get(GC_THRESHOLD_ENV, "").strip()
        try:
            threshold = int(raw) if raw else GC_THRESHOLD_DEFAULT
        except ValueError:
            raise InvalidInputError(
                GC_THRESHOLD_ENV, f"must be a whole number, not {raw!r}"
            ) from None
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
        raise InvalidInputError("threshold", "must be a whole number ≥ 0")
    if threshold == 0:
        return None
    first, *rest = gc.get_threshold()
    if threshold > first:
        gc.set_threshold(threshold, *rest)
    return max(threshold, first)
