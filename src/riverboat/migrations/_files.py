"""Reading the bundled migration files and cutting them into statements.

Files live in one directory per dialect, ``<dialect>/NNN_name.up.sql`` and
``NNN_name.down.sql`` for River's ``main`` line, and ``<dialect>/<line>/...`` for each of
riverboat's own lines (``riverboat``), shipped as package data. SQL is written with a ``<schema>``
prefix before every object, rendered by :func:`riverboat._sql.render_schema`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from riverboat._sql import ParamStyle, Query
from riverboat.errors import MigrationError

__all__ = ["Bundle", "RawQuery", "load_bundles", "split_statements"]

_FILE_RE = re.compile(r"\A(\d{3})_([a-z0-9_]+)\.(up|down)\.sql\Z")


@dataclass(frozen=True, slots=True)
class Bundle:
    """One migration version: its River-style name and the SQL of both directions."""

    version: int
    name: str
    up: str
    down: str


@cache
def load_bundles(dialect: str, line: str = "main") -> dict[int, Bundle]:
    """Every migration of ``line`` bundled for ``dialect``, keyed by version (1, 2, ...
    contiguous)."""
    root = resources.files("riverboat.migrations").joinpath(dialect)
    if line != "main":
        root = root.joinpath(line)
    if not root.is_dir():
        raise MigrationError(
            f"riverboat has no migrations of the {line!r} line for the {dialect!r} dialect"
        )
    found: dict[int, dict[str, str]] = {}
    names: dict[int, str] = {}
    for entry in root.iterdir():
        match = _FILE_RE.match(entry.name)
        if match is None:
            continue
        version = int(match.group(1))
        # River reports "002_initial_schema" as "initial schema"; so do we.
        names[version] = match.group(2).replace("_", " ")
        found.setdefault(version, {})[match.group(3)] = entry.read_text(encoding="utf-8")
    bundles: dict[int, Bundle] = {}
    for version in sorted(found):
        sides = found[version]
        # A gap or a missing direction is a packaging bug; fail loudly rather than
        # migrate a database into a state no release ever had.
        if version != len(bundles) + 1 or set(sides) != {"up", "down"}:
            raise MigrationError(
                f"bundled {dialect} migrations of the {line!r} line are incomplete at "
                f"version {version:03d}"
            )
        bundles[version] = Bundle(version, names[version], sides["up"], sides["down"])
    if not bundles:
        raise MigrationError(f"riverboat has no migrations for the {dialect!r} dialect")
    return bundles


class RawQuery(Query):
    """A statement sent exactly as written: migration DDL has no parameters, and
    rewriting ``:word`` sequences inside it (string literals, casts) would corrupt it."""

    __slots__ = ()
    raw = True

    def compile(self, style: ParamStyle) -> tuple[str, tuple[str, ...]]:
        return self.text, ()


# Tokens inside which a semicolon does not end a statement: comments, quoted strings
# and identifiers, and dollar-quoted bodies ($$ ... $$, $tag$ ... $tag$).
_TOKEN_RE = re.compile(
    r"""
      --[^\n]*
    | /\*.*?\*/
    | '(?:[^']|'')*'
    | "(?:[^"]|"")*"
    | \$\$.*?\$\$
    | \$(?P<tag>[A-Za-z_][A-Za-z0-9_]*)\$.*?\$(?P=tag)\$
    | ;
    """,
    re.VERBOSE | re.DOTALL,
)
_COMMENT_ONLY_RE = re.compile(r"\A(?:\s+|--[^\n]*|/\*.*?\*/)*\Z", re.DOTALL)


def split_statements(sql: str, *, dialect: str) -> list[str]:
    """Cut a migration file into single statements.

    Drivers run one statement per call with parameters (extended protocol, sqlite3's
    ``execute``), and sqlite3's ``executescript`` would commit the surrounding
    transaction, so each statement is sent on its own. SQLite trigger bodies contain
    semicolons; pieces are re-joined until sqlite3 says the statement is complete.
    """
    pieces: list[str] = []
    start = 0
    for match in _TOKEN_RE.finditer(sql):
        if match.group(0) == ";":
            pieces.append(sql[start : match.end()])
            start = match.end()
    pieces.append(sql[start:])

    if dialect == "sqlite":
        import sqlite3

        joined: list[str] = []
        pending = ""
        for piece in pieces:
            pending += piece
            if sqlite3.complete_statement(pending):
                joined.append(pending)
                pending = ""
        if pending:
            joined.append(pending)
        pieces = joined

    statements = []
    for piece in pieces:
        text = piece.strip()
        if _COMMENT_ONLY_RE.match(text.rstrip(";")):
            continue
        statements.append(text)
    return statements
