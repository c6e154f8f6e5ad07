"""What the parts of a dialect written in their own modules (its admin and leadership
statements) may use of the dialect they are mixed into."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from riverboat._sql import Query, Statement

__all__ = ["DialectPart", "raw_query"]


class DialectPart:
    """A part of a dialect, mixed into the dialect's class before
    :class:`~riverboat.dialect.base.Dialect`, which provides what is declared here (for
    type checkers only: nothing here exists at run time but ``_queries``'s type)."""

    # The part's SQL by name; the dialect renders them all into ``q``.
    _queries: ClassVar[dict[str, str]]

    if TYPE_CHECKING:
        schema: str | None
        q: dict[str, Query]

        def stmt(self, query_name: str, /, **params: Any) -> Statement: ...

        def time_param(self, value: datetime | None) -> Any: ...

        def text_list_param(self, values: Sequence[str] | None) -> Any: ...


def raw_query(dialect: object, name: str) -> str:
    """A dialect's query text as written (``<schema>`` not yet rendered), for parts
    that build a variant of another part's statement."""
    for klass in type(dialect).__mro__:
        text = klass.__dict__.get("_queries", {}).get(name)
        if text is not None:
            return str(text)
    raise KeyError(name)
