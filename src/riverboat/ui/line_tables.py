"""Reading riverboat's own tables (its registry of workers, its periodic jobs), which a
database migrated with River's line alone lacks: a page shows what River's tables hold
and says why the rest is missing, rather than failing."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from riverboat.errors import RiverboatError

__all__ = ["read_line_table"]

T = TypeVar("T")


async def read_line_table(read: Awaitable[list[T]]) -> tuple[list[T], str | None]:
    """The rows ``read`` returns and None; or no rows and the database's error where it
    failed (without riverboat's migration line, or the version that adds the table)."""
    try:
        return await read, None
    except RiverboatError as exc:
        return [], str(exc)
