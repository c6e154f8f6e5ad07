"""Reading riverboat's own tables (its registry of workers, its periodic jobs), which a
database migrated with River's line alone lacks: a page shows what River's tables hold
and says why the rest is missing, rather than failing."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from riverboat.errors import NotMigratedError

__all__ = ["read_line_table"]

T = TypeVar("T")


async def read_line_table(read: Awaitable[list[T]]) -> tuple[list[T], str | None]:
    """The rows ``read`` returns and None; or no rows and the database's error when the
    table is missing (without riverboat's migration line, or the version that adds it).
    Any other failure is raised, for the page to say the database did not answer: a
    database that refused connections or never answered was shown as a missing
    migration (after the call's deadline, which a second read then waited out again)."""
    try:
        return await read, None
    except NotMigratedError as exc:  # the drivers' word for a missing table
        return [], str(exc)
