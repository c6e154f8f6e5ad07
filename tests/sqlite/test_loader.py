"""Choosing between the standard library's sqlite3 and sqlean."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

from riverboat import MissingDependencyError
from riverboat.drivers import _sqlite_module
from riverboat.drivers._sqlite_module import (
    MIN_SQLITE_VERSION,
    SqliteTooOldError,
    choose_sqlite_module,
    sqlite_module,
)


def _fake(name: str, version: tuple[int, int, int]) -> ModuleType:
    module = ModuleType(name)
    module.sqlite_version_info = version  # type: ignore[attr-defined]
    module.sqlite_version = ".".join(map(str, version))  # type: ignore[attr-defined]
    return module


def _importer(available: dict[str, ModuleType]) -> Callable[[str], ModuleType]:
    def load(name: str) -> ModuleType:
        if name not in available:
            raise ImportError(name)
        return available[name]

    return load


def test_new_enough_stdlib_wins() -> None:
    stdlib = _fake("sqlite3", (3, 46, 1))
    chosen = choose_sqlite_module(
        _importer({"sqlite3": stdlib, "sqlean": _fake("sqlean", (3, 50, 4))})
    )
    assert chosen is stdlib


def test_old_stdlib_falls_back_to_sqlean() -> None:
    sqlean = _fake("sqlean", (3, 50, 4))
    chosen = choose_sqlite_module(
        _importer({"sqlite3": _fake("sqlite3", (3, 40, 1)), "sqlean": sqlean})
    )
    assert chosen is sqlean


def test_nothing_recent_enough_names_version_and_extra() -> None:
    with pytest.raises(SqliteTooOldError) as info:
        choose_sqlite_module(_importer({"sqlite3": _fake("sqlite3", (3, 40, 1))}))
    message = str(info.value)
    assert "3.40.1" in message
    assert "pip install '.[sqlite]' in a riverboat checkout" in message
    assert "3.45" in message
    assert isinstance(info.value, MissingDependencyError)
    assert isinstance(info.value, ImportError)


def test_nothing_importable() -> None:
    with pytest.raises(SqliteTooOldError, match="riverboat\\[sqlite\\]"):
        choose_sqlite_module(_importer({}))


def test_real_choice_is_cached_and_has_jsonb() -> None:
    first = sqlite_module()
    assert sqlite_module() is first
    assert _sqlite_module._cached is first
    assert tuple(first.sqlite_version_info) >= MIN_SQLITE_VERSION
    conn = first.connect(":memory:")
    try:
        assert conn.execute("SELECT json(jsonb('[1]'))").fetchone() == ("[1]",)
    finally:
        conn.close()
