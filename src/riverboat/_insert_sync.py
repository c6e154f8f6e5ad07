# Generated from _insert_async.py by scripts/async_to_sync.py: do not edit.
# Change the async module, then run: .venv/bin/python scripts/async_to_sync.py
"""Running an :class:`~riverboat._insert_plan.InsertPlan`: the one place an insert does
I/O, written once for asyncio; ``_insert_sync.py`` is generated from this module by
``scripts/async_to_sync.py``.

Generated from ``_insert_async.py`` by ``scripts/async_to_sync.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from riverboat._insert_plan import InsertPlan, InsertWrites
from riverboat._job import InsertResult

__all__ = ["run_insert", "run_insert_count"]

Transaction = Callable[[], AbstractContextManager[Any]]


def run_insert(
    plan: InsertPlan, executor: Any, transaction: Transaction | None = None
) -> list[InsertResult]:
    """Insert ``plan`` and return one result per job, in order (a unique duplicate: the
    existing row, flagged)."""
    middleware = plan.middleware
    if middleware is None or not middleware.insert_layers:
        return (_write(plan, executor, transaction, rows=True))[0]

    def inner() -> list[InsertResult]:
        return (_write(plan, executor, transaction, rows=True))[0]

    return middleware.wrap_insert(plan.jobs, plan.args, inner)


def run_insert_count(
    plan: InsertPlan, executor: Any, transaction: Transaction | None = None
) -> int:
    """Insert ``plan`` without reading its rows back (``insert_many_fast``); returns how
    many jobs were inserted (unique duplicates don't count). Its middleware's
    ``call_next()`` returns no rows."""
    middleware = plan.middleware
    if middleware is None or not middleware.insert_layers:
        return (_write(plan, executor, transaction, rows=False))[1]
    counted: list[int] = []

    def inner() -> list[InsertResult]:
        counted.append((_write(plan, executor, transaction, rows=False))[1])
        return []

    middleware.wrap_insert(plan.jobs, plan.args, inner, rows=False)
    return sum(counted)


def _write(
    plan: InsertPlan, executor: Any, transaction: Transaction | None, *, rows: bool
) -> tuple[list[InsertResult], int]:
    # The partition keys were checked before the hooks (the client's plan_one and
    # plan_many); again only when a hook ran, since it may have moved a job.
    if plan.middleware is not None and plan.middleware.apply_insert(plan.jobs, plan.args):
        plan.check_after_hooks()
    writes = plan.writes(rows=rows)
    if transaction is not None and writes.needs_transaction:
        with transaction() as tx:
            return _send(writes, tx, rows=rows)
    return _send(writes, executor, rows=rows)


def _send(writes: InsertWrites, executor: Any, *, rows: bool) -> tuple[list[InsertResult], int]:
    results: list[InsertResult] = []
    count = 0
    for copy_batch in writes.copies:
        count += executor.copy(copy_batch)
    if writes.notify is not None:
        executor.fetch(writes.notify)
    for batch in writes.batches:
        fetched = executor.fetch(batch.stmt)
        if rows:
            results.extend(batch.decode(fetched))
        else:
            count += batch.count(fetched)
    return results, count
