"""Named SQL statements and their translation into each driver's parameter style.

Dialect modules write SQL once with ``:name`` parameters and a ``<schema>`` prefix before
every table. A :class:`Query` renders the schema once, and each driver asks for the
placeholder style it speaks; the translation is cached on the query, so the hot path only
builds an argument list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ParamStyle", "Query", "Statement", "bind"]

ParamStyle = Literal["dollar", "format", "named"]

# A parameter is ``:name`` not preceded by another colon (``::jsonb`` casts) or a word
# character (``'00:00:00'`` literals).
_PARAM_RE = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


class Query:
    """One named statement of a dialect, with its schema already rendered."""

    __slots__ = ("_cache", "name", "text")

    #: Sent exactly as written, without parameters (migration DDL: rewriting ``:word``
    #: in string literals or casts would corrupt it, and no ``%`` may be doubled).
    raw = False

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text
        self._cache: dict[str, tuple[str, tuple[str, ...]]] = {}

    def compile(self, style: ParamStyle) -> tuple[str, tuple[str, ...]]:
        """Return ``(sql, parameter names in positional order)`` for ``style``.

        ``dollar``: ``$1`` placeholders, each name once (psycopg raw cursors, asyncpg).
        ``format``: ``%s`` placeholders, a name repeated where it repeats (DB-API pyformat
        drivers such as Django's), with literal ``%`` doubled.
        ``named``: ``:name`` kept as is (SQLAlchemy ``text()``, sqlite3).
        """
        cached = self._cache.get(style)
        if cached is not None:
            return cached
        names: list[str] = []
        if style == "dollar":

            def sub(match: re.Match[str]) -> str:
                name = match.group(1)
                if name not in names:
                    names.append(name)
                return f"${names.index(name) + 1}"

            sql = _PARAM_RE.sub(sub, self.text)
        elif style == "format":

            def sub_format(match: re.Match[str]) -> str:
                names.append(match.group(1))
                return "%s"

            sql = _PARAM_RE.sub(sub_format, self.text.replace("%", "%%"))
        else:
            sql = self.text
            for match in _PARAM_RE.finditer(self.text):
                if match.group(1) not in names:
                    names.append(match.group(1))
        result = (sql, tuple(names))
        self._cache[style] = result
        return result

    def __repr__(self) -> str:
        return f"Query({self.name!r})"


@dataclass(slots=True, frozen=True)
class Statement:
    """A query with its arguments: what a dialect hands to a driver.

    ``then``: statements that must commit with this one, run after it in one transaction
    (or in the caller's); the result is this statement's rows. SQLite needs them where
    Postgres writes several tables in one statement (an insert and its notification
    row, a leader's resignation and its outbox row). Postgres dialects never set it.
    """

    query: Query
    params: Mapping[str, Any]
    then: tuple[Statement, ...] = ()


def bind(names: Sequence[str], params: Mapping[str, Any]) -> list[Any]:
    """Positional arguments for a compiled query."""
    return [params[name] for name in names]


def render_schema(text: str, schema: str | None) -> str:
    prefix = f'"{schema}".' if schema else ""
    return text.replace("<schema>", prefix)
