"""Keyword options declared as TypedDicts and taken as ``**options: Unpack[...]``: type
checkers see their names, and these checks refuse an unknown one at run time, before
anything is done with the rest (a misspelt filter must not widen a delete)."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any

from riverboat.errors import InvalidInputError

__all__ = ["check_option_names", "unknown_option"]


def unknown_option(options: Mapping[str, Any], known: Collection[str]) -> str | None:
    """The first name in ``options`` that is not one of ``known``."""
    for name in options:
        if name not in known:
            return name
    return None


def check_option_names(options: Mapping[str, Any], known: Collection[str], what: str) -> None:
    """Refuse an unknown option: :class:`InvalidInputError` on its name, saying it ``is
    not`` ``what`` and naming the closest known option."""
    name = unknown_option(options, known)
    if name is not None:
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidInputError(name, f"is not {what}{hint}")
