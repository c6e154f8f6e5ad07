"""``riverboat migrate up|down|list|validate|get-sql``: River's migrations from the shell.

The database comes from ``--database-url`` or ``DATABASE_URL``: ``postgresql://...``
uses psycopg, ``sqlite:///path`` the embedded SQLite driver.

``up`` and ``down`` take River's ``migrate-up``/``migrate-down`` flags (``--target-version``,
``--max-steps``, ``--dry-run``, ``--show-sql``, ``--line``) and ``validate`` is River's
``river validate``: exit code 0 when nothing is missing, 1 when migrations are missing or
anything fails. Reaching a target that is already reached is a no-op with exit code 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from riverboat._url import driver_from_url, is_sqlite_url
from riverboat.cli._database import add_database_options, database_url, database_url_or_none
from riverboat.dialect.base import validate_schema_name
from riverboat.drivers.base import import_optional
from riverboat.errors import DriverError, InvalidInputError
from riverboat.migrations import Migrator, render_sql
from riverboat.migrations._queries import LINE

__all__ = ["add_arguments", "run"]

_PG_PREFIXES = ("postgresql://", "postgres://", "postgresql+psycopg://")


def _common(parser: argparse.ArgumentParser) -> None:
    add_database_options(parser, schema_help="schema to migrate (default: the search_path's)")


def _target_version(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--target-version", type=int, metavar="N", help=help_text)


def _line(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--line", default=LINE, metavar="NAME", help=f"migration line (default and only: {LINE})"
    )


def _migrate_flags(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    _line(parser)
    parser.add_argument(
        "--max-steps",
        type=int,
        metavar="N",
        help="apply at most N migrations (a negative N applies none)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be applied, change nothing"
    )
    parser.add_argument("--show-sql", action="store_true", help="print each migration's SQL")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``migrate``'s subcommands on its parser."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    up = sub.add_parser("up", help="apply missing migrations (default: all of them)")
    _migrate_flags(up)
    _target_version(up, "stop after applying version N (already applied: nothing to do)")

    down = sub.add_parser("down", help="revert migrations (default: only the newest one)")
    _migrate_flags(down)
    _target_version(down, "revert every version above N; 0 (or -1) removes River's schema entirely")

    validate = sub.add_parser(
        "validate", help="exit 1 if migrations are missing (River's `river validate`)"
    )
    _common(validate)
    _line(validate)
    _target_version(validate, "only check versions up to N")

    listing = sub.add_parser("list", help="show known migrations and which are applied")
    _common(listing)

    get_sql = sub.add_parser(
        "get-sql", help="print migration SQL without running it (no connection needed)"
    )
    _common(get_sql)
    get_sql.add_argument("--direction", choices=("up", "down"), default="up", help="default: up")
    get_sql.add_argument(
        "--version",
        type=int,
        action="append",
        metavar="N",
        help="only version N (repeatable); default: every version up to --target-version",
    )
    _target_version(get_sql, "up: versions 1..N; down: versions above N (newest first)")
    get_sql.add_argument(
        "--dialect",
        choices=("postgres", "sqlite"),
        help="default: taken from the database URL if there is one, else postgres",
    )


def _open_driver(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(driver, connection to close or None)``."""
    url = database_url(args)
    schema = validate_schema_name(args.schema)
    if not url.startswith(_PG_PREFIXES):
        # sqlite:/// URLs, and refusing anything else with the usual message.
        return driver_from_url(url, schema=schema), None
    # One direct connection instead of the driver's pool: a wrong host or password
    # then fails at once with the server's message, not after the pool's timeout.
    psycopg = import_optional("psycopg", "psycopg")
    from riverboat.drivers.psycopg import PsycopgDriver, _libpq_url

    try:
        conn = psycopg.connect(_libpq_url(url), autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise DriverError(f"cannot connect to the database: {exc}") from exc
    return PsycopgDriver(conn, schema=schema), conn


def _print_versions(verb: str, versions: list[int], names: Mapping[int, str]) -> None:
    for version in versions:
        print(f"{verb} {version:03d} {names[version]}")


def _get_sql(args: argparse.Namespace) -> int:
    url = database_url_or_none(args)
    dialect = args.dialect or ("sqlite" if url and is_sqlite_url(url) else "postgres")
    latest = None
    if args.version:
        versions: list[int] | None = args.version
    elif args.target_version is not None:
        from riverboat.migrations._files import load_bundles

        latest = max(load_bundles(dialect))
        target = args.target_version
        if not 0 <= target <= latest:
            raise InvalidInputError("target_version", f"must be in 0..{latest}, not {target}")
        versions = (
            list(range(1, target + 1))
            if args.direction == "up"
            else list(range(target + 1, latest + 1))
        )
    else:
        versions = None
    sys.stdout.write(render_sql(dialect, args.direction, versions, schema=args.schema))
    return 0


def _check_line(args: argparse.Namespace) -> None:
    line = getattr(args, "line", LINE)
    if line != LINE:
        raise InvalidInputError(
            "line", f"riverboat knows only River's {LINE!r} migration line, not {line!r}"
        )


def _migrate(migrator: Migrator, args: argparse.Namespace) -> None:
    direction = args.action
    names = migrator.names
    if args.dry_run:
        versions = migrator.plan(direction, args.target_version, max_steps=args.max_steps)
    elif direction == "up":
        versions = migrator.up(args.target_version, max_steps=args.max_steps)
    else:
        versions = migrator.down(args.target_version, max_steps=args.max_steps)
    verb = {"up": "applied", "down": "reverted"}[direction]
    for version in versions:
        if args.dry_run:
            print(f"would apply {version:03d} {names[version]} [{direction}] [dry run]")
        else:
            print(f"{verb} {version:03d} {names[version]}")
        if args.show_sql:
            print("-" * 80)
            print(migrator.get_sql(direction, [version]).rstrip())
            print()
    if not versions and direction == "up":
        print(f"nothing to apply; at version {migrator.current_version()}")
    elif not versions:
        print("nothing to revert")
    elif args.max_steps and args.max_steps > 0 and len(versions) < args.max_steps:
        print("no more migrations to apply")


def run(args: argparse.Namespace) -> int:
    """Run one ``migrate`` action; returns the exit code."""
    if args.action == "get-sql":
        return _get_sql(args)
    _check_line(args)
    driver, conn = _open_driver(args)
    try:
        migrator = Migrator(driver)
        if args.action == "validate":
            missing = migrator.validate(args.target_version)
            if missing:
                listed = ", ".join(f"{v:03d}" for v in missing)
                print(f"unapplied migrations: {listed}; run `riverboat migrate up`")
                return 1
            print(f"no unapplied migrations; at version {migrator.current_version()}")
            return 0
        if args.action in ("up", "down"):
            _migrate(migrator, args)
        else:
            for info in migrator.list():
                when = info.applied_at.isoformat(sep=" ") if info.applied_at else "-"
                mark = "*" if info.applied else " "
                print(f"{mark} {info.version:03d}  {info.name:<50} {when}")
        print(f"current version: {migrator.current_version()} (latest {migrator.latest_version})")
        return 0
    finally:
        driver.close()
        if conn is not None:
            conn.close()
