"""Running an :class:`~riverboat._insert_plan.InsertPlan`: the one place an insert does
I/O, written once for asyncio; ``_insert_sync.py`` is generated from this module by
``scripts/async_to_sync.py``.

The plan's jobs go through its ``insert_many`` middleware layers (River's
``JobInsertMiddleware``) and insert hooks, then its statements run on ``executor``: a
driver, a transaction, or the caller's own connection. With ``transaction`` (a driver's
``transaction``), a plan of several statements runs in one transaction so the call is
all-or-nothing; without it (the caller's transaction, or one already open) everything
runs on ``executor``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from riverboat._insert_plan import InsertPlan, InsertWrites
from riverboat._job import InsertResult

__all__ = ["run_insert", "run_insert_count"]

Transaction = Callable[[], AbstractAsyncContextManager[Any]]


async def run_insert(
    plan: InsertPlan, executor: Any, transaction: Transaction | None = None
) -> list[InsertResult]:
    """Insert ``plan`` and return one result per job, in order (a unique duplicate: the
    existing row, flagged)."""
    middleware = plan.middleware
    if middleware is None or not middleware.insert_layers:
        return (await _write(plan, executor, transaction, rows=True))[0]

    async def inner() -> list[InsertResult]:
        return (await _write(plan, executor, transaction, rows=True))[0]

    return await middleware.wrap_insert_async(plan.jobs, plan.args, inner)


async def run_insert_count(
    plan: InsertPlan, executor: Any, transaction: Transaction | None = None
) -> int:
    """Insert ``plan`` without reading its rows back (``insert_many_fast``); returns how
    many jobs were inserted (unique duplicates don't count). Its middleware's
    ``call_next()`` returns no rows."""
    middleware = plan.middleware
    if middleware is None or not middleware.insert_layers:
        return (await _write(plan, executor, transaction, rows=False))[1]
    counted: list[int] = []

    async def inner() -> list[InsertResult]:
        counted.append((await _write(plan, executor, transaction, rows=False))[1])
        return []

    await middleware.wrap_insert_async(plan.jobs, plan.args, inner, rows=False)
    return sum(counted)


async def _write(
    plan: InsertPlan, executor: Any, transaction: Transaction | None, *, rows: bool
) -> tuple[list[InsertResult], int]:
    # The partition keys were checked before the hooks (the client's plan_one and
    # plan_many); again only when a hook ran, since it may have moved a job.
    if plan.middleware is not None and plan.middleware.apply_insert(plan.jobs, plan.args):
        plan.check_after_hooks()
    writes = plan.writes(rows=rows)
    if transaction is not None and writes.needs_transaction:
        async with transaction() as tx:
            return await _send(writes, tx, rows=rows)
    return await _send(writes, executor, rows=rows)


async def _send(
    writes: InsertWrites, executor: Any, *, rows: bool
) -> tuple[list[InsertResult], int]:
    results: list[InsertResult] = []
    count = 0
    for copy_batch in writes.copies:
        count += await executor.copy(copy_batch)
    if writes.notify is not None:
        await executor.fetch(writes.notify)
    for batch in writes.batches:
        fetched = await executor.fetch(batch.stmt)
        if rows:
            results.extend(batch.decode(fetched))
        else:
            count += batch.count(fetched)
    return results, count
