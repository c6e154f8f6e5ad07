"""``riverboat migrate up|down|list|validate|get-sql``: River's migrations from the shell.

The database comes from ``--database-url`` or ``DATABASE_URL``: ``postgresql://...``
uses psycopg, ``sqlite:///path`` the embedded SQLite driver.

``up`` and ``down`` take River's ``migrate-up``/``migrate-down`` flags (``--target-version``,
``--max-steps``, ``--dry-run``, ``--show-sql``, ``--line``) and ``validate`` is River's
``river validate``: exit code 0 when nothing is missing, 1 when migrations are missing or
anything fails. Reaching a target that is already reached is a no-op with exit code 0.

Without ``--line`` the lines (River's ``main``, then ``riverboat``) form one stack: ``up``
applies from the bottom, ``down`` unwinds from the top, so ``down`` reverts riverboat's
newest version first and ``down --target-version 0`` removes everything. There
``--target-version`` names a ``main`` version (River's meaning) and ``--max-steps`` counts
steps over the whole stack. ``--line`` runs one line exactly as River's CLI runs ``main``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import Any

from riverboat._url import driver_from_url, is_sqlite_url
from riverboat.cli._arguments import integer
from riverboat.cli._database import add_database_options, database_url, database_url_or_none
from riverboat.dialect.base import validate_schema_name
from riverboat.drivers.base import import_optional
from riverboat.errors import DriverError, InvalidInputError
from riverboat.migrations import LINES, Migrator, lost_indexes_advice, render_sql
from riverboat.migrations._queries import LINE

__all__ = ["add_arguments", "run"]

_PG_PREFIXES = ("postgresql://", "postgres://", "postgresql+psycopg://")


def _common(parser: argparse.ArgumentParser) -> None:
    add_database_options(parser, schema_help="schema to migrate (default: the search_path's)")


def _target_version(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--target-version", type=integer, metavar="N", help=help_text)


def _line(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    every = " and ".join(LINES)
    parser.add_argument(
        "--line",
        default=default,
        metavar="NAME",
        help=f"only this migration line, one of {every} (default: {default or 'all'})",
    )


def _migrate_flags(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    _line(parser)
    parser.add_argument(
        "--max-steps",
        type=integer,
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
    _line(listing)

    get_sql = sub.add_parser(
        "get-sql", help="print migration SQL without running it (no connection needed)"
    )
    _common(get_sql)
    _line(get_sql, LINE)
    get_sql.add_argument("--direction", choices=("up", "down"), default="up", help="default: up")
    get_sql.add_argument(
        "--version",
        type=integer,
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
        if args.action != "up" or getattr(args, "dry_run", False):
            return _sqlite_driver_that_creates_nothing(url, schema), None
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


def _sqlite_driver_that_creates_nothing(url: str, schema: str | None) -> Any:
    """For the actions that only read (validate, list, down, a dry run): a missing file
    (or a schema's missing sibling file) is read as an empty database, in memory. Opened
    as such they left an empty file behind a mistyped path or --schema; only a real
    `up` creates files."""
    from riverboat.drivers.sqlite import SqliteDriver, sqlite_path_from_url, sqlite_schema_path

    if not is_sqlite_url(url):
        return driver_from_url(url, schema=schema)  # refused there, with the usual message
    path = sqlite_path_from_url(url)
    if path != ":memory:" and not os.path.exists(path):
        return SqliteDriver(":memory:", schema=schema)
    attached = sqlite_schema_path(path, schema)
    if schema is not None and attached not in (None, ":memory:") and not os.path.exists(attached):
        return SqliteDriver(url, schema=schema, attach={schema: ":memory:"})
    return driver_from_url(url, schema=schema)


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

        latest = max(load_bundles(dialect, args.line))
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
    line = args.line
    sys.stdout.write(render_sql(dialect, args.direction, versions, schema=args.schema, line=line))
    return 0


def _label(migrator: Migrator, version: int, every_line: bool) -> str:
    """``008 job id autoincrement``; other lines are named when several are shown."""
    text = f"{version:03d} {migrator.names[version]}"
    return f"{migrator.line} {text}" if every_line and migrator.line != LINE else text


def _remaining(max_steps: int | None, done: int) -> int | None:
    """The step budget left for the next line of the stack (River: 0 or None = no limit,
    negative = none)."""
    if not max_steps:
        return None
    return max(max_steps - done, 0) if max_steps > 0 else max_steps


def _stack_plan(
    migrators: list[Migrator], args: argparse.Namespace
) -> list[tuple[Migrator, int | None, int | None]]:
    """Each line's (migrator, target, max_steps) in the order they run: bottom up for
    ``up``, top down for ``down``. The target names a version of ``main``."""
    target, steps = args.target_version, args.max_steps
    if len(migrators) == 1:
        return [(migrators[0], target, steps)]
    main, *others = migrators
    if args.action == "up":
        # A main target or a step budget may stop the stack before the upper lines.
        if target is not None and target < main.latest_version:
            return [(main, target, steps)]
        return [(main, target, steps), *((m, None, steps) for m in others)]
    if target is None and not steps:
        # One step, River's default: the newest version of the topmost applied line.
        for migrator in reversed(others):
            if migrator.current_version():
                return [(migrator, None, None)]
        return [(main, None, None)]
    return [*((m, 0, steps) for m in reversed(others)), (main, target, steps)]


def _migrate(migrators: list[Migrator], args: argparse.Namespace) -> None:
    direction = args.action
    every_line = len(migrators) > 1
    verb = {"up": "applied", "down": "reverted"}[direction]
    done = 0
    for migrator, target, steps in _stack_plan(migrators, args):
        budget = _remaining(steps, done) if every_line else steps
        if every_line and steps and steps > 0 and budget == 0:
            break
        if args.dry_run:
            versions = _dry_plan(migrator, direction, target, budget, done)
        elif direction == "up":
            versions = migrator.up(target, max_steps=budget)
        elif target == 0 and migrator.line != LINE and not migrator.current_version():
            versions = []
        else:
            versions = migrator.down(target, max_steps=budget)
        done += len(versions)
        for version in versions:
            label = _label(migrator, version, every_line)
            if args.dry_run:
                print(f"would apply {label} [{direction}] [dry run]")
            else:
                print(f"{verb} {label}")
            if args.show_sql:
                print("-" * 80)
                print(migrator.get_sql(direction, [version]).rstrip())
                print()
    if not done and direction == "up":
        print(f"nothing to apply; at version {migrators[0].current_version()}")
    elif not done:
        print("nothing to revert")
    elif args.max_steps and args.max_steps > 0 and done < args.max_steps:
        print("no more migrations to apply")


def _dry_plan(
    migrator: Migrator, direction: str, target: int | None, steps: int | None, done: int
) -> list[int]:
    if migrator.line != LINE and done:
        # What the lines below would change is not in the database yet: an upper line is
        # planned from its own bookkeeping alone.
        if direction == "up":
            return [v for v in sorted(migrator.names) if v > migrator.current_version()][
                : steps if steps and steps > 0 else None
            ]
    if direction == "down" and target == 0 and not migrator.current_version():
        return []
    return migrator.plan("up" if direction == "up" else "down", target, max_steps=steps)


def _print_status(migrators: list[Migrator]) -> None:
    # The first line's status is printed last: River's CLI ends with main's.
    for migrator in [*migrators[1:], migrators[0]]:
        status = f"current version: {migrator.current_version()} (latest {migrator.latest_version})"
        print(status if migrator.line == LINE else f"{migrator.line} line {status}")


def _validate(migrators: list[Migrator], target: int | None) -> int:
    first = migrators[0]
    if target is not None and target < first.latest_version:
        migrators = [first]  # a main target stops the stack below the upper lines
    missing = [
        f"{v:03d}" if m is first else f"{m.line} {v:03d}"
        for m in migrators
        for v in m.validate(target if m is first else None)
    ]
    if missing:
        print(f"unapplied migrations: {', '.join(missing)}; run `riverboat migrate up`")
        return 1
    for migrator in migrators:
        lost = migrator.lost_indexes()
        if lost:
            what, fix = lost_indexes_advice(migrator.line, lost)
            print(f"{what}; {fix}")
            return 1
    upper = "".join(f" ({m.line} line: {m.current_version()})" for m in migrators[1:])
    print(f"no unapplied migrations; at version {first.current_version()}{upper}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run one ``migrate`` action; returns the exit code."""
    if args.action == "get-sql":
        return _get_sql(args)
    driver, conn = _open_driver(args)
    try:
        lines = [args.line] if args.line else list(LINES)
        migrators = [Migrator(driver, line) for line in lines]
        every_line = len(migrators) > 1
        if args.action == "validate":
            return _validate(migrators, args.target_version)
        if args.action in ("up", "down"):
            migrators[0].check_target(args.target_version, args.action)
            for migrator in migrators:
                migrator.validate()  # refuses a line newer than riverboat before any change
            _migrate(migrators, args)
        else:
            for migrator in migrators:
                if every_line:
                    print(f"line {migrator.line}:")
                for info in migrator.list():
                    when = info.applied_at.isoformat(sep=" ") if info.applied_at else "-"
                    mark = "*" if info.applied else " "
                    print(f"{mark} {info.version:03d}  {info.name:<50} {when}")
        _print_status(migrators)
        return 0
    finally:
        driver.close()
        if conn is not None:
            conn.close()
