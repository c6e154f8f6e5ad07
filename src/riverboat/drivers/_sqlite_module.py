"""Choosing the sqlite3-compatible module riverboat talks to.

River's SQLite schema stores JSON as JSONB blobs, which needs SQLite 3.45 or newer. Many
distributions (Debian 12: 3.40) link the standard library's ``sqlite3`` against an older
library, so riverboat falls back to ``sqlean`` (the ``sqlean-py`` package), a drop-in
``sqlite3`` module that bundles a recent SQLite.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType

from riverboat.errors import MissingDependencyError, install_hint

__all__ = ["MIN_SQLITE_VERSION", "SqliteTooOldError", "choose_sqlite_module", "sqlite_module"]

MIN_SQLITE_VERSION = (3, 45, 0)
_CANDIDATES = ("sqlite3", "sqlean")

_cached: ModuleType | None = None


class SqliteTooOldError(MissingDependencyError):
    """No importable SQLite module is recent enough for River's JSONB schema."""

    def __init__(self, found: Sequence[tuple[str, str]]) -> None:
        super().__init__("sqlean-py", "sqlite")
        need = ".".join(map(str, MIN_SQLITE_VERSION))
        if found:
            seen = ", ".join(f"{name} links SQLite {version}" for name, version in found)
        else:
            seen = "no sqlite3 module could be imported"
        message = (
            f"River's SQLite schema needs SQLite {need} or newer (for jsonb()), but {seen}; "
            f"install a bundled SQLite with: {install_hint('sqlite')}"
        )
        self.args = (message,)
        self.msg = message  # ImportError.__str__ prints msg, not args
        self.found = list(found)


def choose_sqlite_module(
    importer: Callable[[str], ModuleType] = importlib.import_module,
    candidates: Sequence[str] = _CANDIDATES,
) -> ModuleType:
    """The first of ``candidates`` that imports and links SQLite ≥ 3.45 (no caching)."""
    found: list[tuple[str, str]] = []
    for name in candidates:
        try:
            module = importer(name)
        except ImportError:
            continue
        version = tuple(getattr(module, "sqlite_version_info", (0, 0, 0)))
        if version >= MIN_SQLITE_VERSION:
            return module
        found.append((name, str(getattr(module, "sqlite_version", "unknown"))))
    raise SqliteTooOldError(found)


def sqlite_module() -> ModuleType:
    """The chosen module, picked once per process: stdlib ``sqlite3`` when its SQLite is
    new enough, otherwise ``sqlean``."""
    global _cached
    if _cached is None:
        _cached = choose_sqlite_module()
    return _cached
