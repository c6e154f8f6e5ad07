"""Objects named by ``package.module`` and an attribute path: ``riverboat worker``'s
target and the Django integration's settings (``RIVERBOAT['WORKERS']`` and others)."""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from riverboat.errors import InvalidInputError

__all__ = ["import_attribute"]


def import_attribute(module_name: str, attr: str, field: str, not_found: str = "") -> Any:
    """``module_name``'s ``attr`` (dotted for nested ones). A module or attribute that
    isn't there is an InvalidInputError on ``field``, one line, with close names for an
    attribute (``not_found`` follows the "no module named" text). A module that exists
    but fails on an import of its own keeps its traceback: that is about the user's code."""
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise
        raise InvalidInputError(field, f"no module named {exc.name!r}{not_found}") from None
    path = module_name
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise InvalidInputError(field, f"{path} has no attribute {part!r}{hint}")
        obj = getattr(obj, part)
        path = f"{path}.{part}"
    return obj
