"""The SQLite driver's own tests, migrations included, get a file really migrated rather
than a copy of the suite's migrated template (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.templates import migrate_sqlite_file


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return migrate_sqlite_file(tmp_path / "riverboat.sqlite3")
