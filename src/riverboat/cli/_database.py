"""The database options the commands share (``--database-url``, ``--schema``) and
opening the database they name."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from riverboat.dialect.base import validate_schema_name
from riverboat.errors import InvalidInputError, MigrationError

__all__ = [
    "add_database_options",
    "checked_driver",
    "database_url",
    "database_url_or_none",
    "require_existing_sqlite_file",
]

RIVER_SCHEMA_HELP = "River's schema (default: the search_path's)"


def add_database_options(
    parser: argparse.ArgumentParser,
    *,
    schema_help: str = RIVER_SCHEMA_HELP,
    default: Any = None,
) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        default=default,
        help="postgresql://... or sqlite:///path (default: $DATABASE_URL)",
    )
    parser.add_argument("--schema", metavar="S", default=default, help=schema_help)


def database_url_or_none(args: argparse.Namespace) -> str | None:
    """``--database-url``, else ``$DATABASE_URL``, else None."""
    url: str | None = args.database_url or os.environ.get("DATABASE_URL") or None
    return url


def database_url(args: argparse.Namespace) -> str:
    """:func:`database_url_or_none`, for commands that cannot run without one."""
    url = database_url_or_none(args)
    if url is None:
        raise InvalidInputError("database_url", "pass --database-url or set DATABASE_URL")
    return url


def require_existing_sqlite_file(url: str, schema: str | None = None) -> None:
    """Refuse a ``sqlite:///`` URL naming no file: opening it would create an empty one
    (a typo in the path then reads as "no jobs", or "not migrated", and leaves litter).
    The same for ``schema``'s file, the sibling SQLite attaches for it
    (``app-<schema>.sqlite3``): a mistyped ``--schema`` left an empty one behind. Only
    ``riverboat migrate`` (and the demo) create the files."""
    from riverboat._url import is_sqlite_url

    if not is_sqlite_url(url):
        return
    from riverboat.drivers.sqlite import sqlite_path_from_url, sqlite_schema_path

    path = sqlite_path_from_url(url)
    migrate = f"`riverboat migrate up --database-url {url}"
    if path != ":memory:" and os.path.isdir(path):
        raise InvalidInputError(
            "database_url",
            f"{os.path.abspath(path)} is a directory, not a SQLite file: name the file "
            "(sqlite:///path/to/app.sqlite3)",
        )
    if path != ":memory:" and not os.path.isfile(path):
        raise InvalidInputError(
            "database_url",
            f"no SQLite file at {os.path.abspath(path)}: check the path, or create and "
            f"migrate it with {migrate}`",
        )
    attached = sqlite_schema_path(path, schema)
    if attached is not None and attached != ":memory:" and not os.path.isfile(attached):
        raise InvalidInputError(
            "schema",
            f"no SQLite file for schema {schema!r} at {os.path.abspath(attached)} (on "
            f"SQLite a schema is a file beside the database): check the name, or create "
            f"and migrate it with {migrate} --schema {schema}`",
        )


@contextmanager
def checked_driver(url: str, schema: str | None, *, riverboat_line: bool = False) -> Iterator[Any]:
    """A sync driver for ``url``, closed on exit. A SQLite file that does not exist, or a
    schema newer than riverboat knows (or not migrated), is refused in one line before
    anything is created, read or written. ``riverboat_line``: the command reads
    riverboat's own tables (the registry, periodic records, flow records), so that
    migration line must be applied too, or it says so in one line (not a driver error
    naming a missing table)."""
    # Imported here: `riverboat --help` and commands that don't connect stay fast.
    from riverboat._url import driver_from_url
    from riverboat.migrations import Migrator, applied_version, require_current

    schema = validate_schema_name(schema)
    require_existing_sqlite_file(url, schema)
    driver = driver_from_url(url, schema=schema)
    try:
        require_current(driver)
        if riverboat_line:
            latest = Migrator(driver, "riverboat").latest_version
            if (version := applied_version(driver, "riverboat")) < latest:
                raise MigrationError(
                    f"riverboat's own tables are at version {version} of {latest} here "
                    "(this command reads them): run `riverboat migrate up`"
                )
        yield driver
    finally:
        driver.close()
