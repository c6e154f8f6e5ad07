"""The sync modules generated from their async twins are up to date, and the transform
does what scripts/async_to_sync.py says."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "async_to_sync", ROOT / "scripts" / "async_to_sync.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["async_to_sync"] = module
    spec.loader.exec_module(module)
    return module


def test_generated_modules_are_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    assert _generator().main(["--check"]) == 0, capsys.readouterr().err


def test_the_transform(tmp_path: Path) -> None:
    source = tmp_path / "thing_async.py"
    source.write_text(
        '"""Things for AsyncClient.\n\nMore about the async side."""\n'
        "from contextlib import asynccontextmanager\n\n\n"
        "class AsyncAdmin:\n"
        "    async def go(self, conn):  # AsyncClient calls this\n"
        "        async with conn.transaction() as tx:\n"
        "            async for row in tx.rows():\n"
        "                await (tx.send(row))\n"
        "        return await self.done()\n"
    )
    out = _generator().generate(source)
    for keyword in ("async def", "async with", "async for", "await"):
        assert keyword not in out
    assert "class SyncAdmin:" in out and "from contextlib import contextmanager" in out
    assert "# Client calls this" in out  # comments are kept, and renamed
    assert '"""Things for Client.\n\nGenerated from ``thing_async.py``' in out
    assert "tx.send(row)" in out and "return self.done()" in out
