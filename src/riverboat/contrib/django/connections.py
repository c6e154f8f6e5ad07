"""Django connection hygiene for riverboat's runtime, and inserting from async views.

Helpers for the Django integration rather than for the driver: they deal with a
client, the ORM's per-thread connections and asgiref, not with running statements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from riverboat._job import InsertOpts, InsertResult
    from riverboat.client import Client

__all__ = ["insert_async", "reclaim_connections"]


def reclaim_connections(*, always: bool = False) -> None:
    """Hand back this thread's Django connections after a unit of work.

    The same as Django's ``close_old_connections()`` at the end of a request: each
    connection this thread has opened is closed if it is broken, outlived
    ``CONN_MAX_AGE`` (``0``, the default, means after every job) or was left outside
    autocommit; with Django's connection pool (``OPTIONS["pool"]``) closing returns it
    to the pool. ``always=True`` closes every opened connection regardless.
    A connection still inside an ``atomic()`` block (a job that left one open) is
    closed too, as Django does: its transaction is rolled back.
    """
    from django import db

    for conn in db.connections.all(initialized_only=True):
        if always:
            conn.close()
        else:
            conn.close_if_unusable_or_obsolete()


async def insert_async(
    client: Client, args: object, opts: InsertOpts | None = None, *, kind: str | None = None
) -> InsertResult:
    """``client.insert`` from async code (async views), on Django's thread-sensitive
    executor, so it uses the same connection (and ``atomic()`` blocks) as the ORM's
    ``sync_to_async`` calls in that request."""
    from asgiref.sync import sync_to_async

    result: InsertResult = await sync_to_async(client.insert, thread_sensitive=True)(
        args, opts, kind=kind
    )
    return result
