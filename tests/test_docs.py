"""Every ```python block of every docs/*.md runs (see tests/docblocks.py for how).

A block needing an external service may be fenced ```python no-run; keep those rare.
Blocks that only show a fragment of a larger project are listed in KNOWN_FRAGMENTS
(strict xfail: fixing a block fails the test until it is taken off the list).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docblocks import (
    PG_PLACEHOLDER,
    SQLITE_PLACEHOLDER,
    fresh_database,
    python_blocks,
    run_script,
    target_of,
)

DOCS = Path(__file__).resolve().parent.parent / "docs"
README = DOCS.parent / "README.md"
OURS = ("getting-started.md", "lifecycle.md", "operations.md", "river-go.md", "observability.md")

# Fragments of a Django project (settings, app modules) that cannot run on their own,
# by page and first line (not line number: any edit above one moved it).
KNOWN_FRAGMENTS = {
    ("django.md", "from django.db import transaction"),
    ("django.md", "# urls.py"),
    ("django.md", "# myapp/tasks.py"),
}


def _known_fragment(where: str, code: str) -> bool:
    return (where.split(":")[0], code.split("\n", 1)[0]) in KNOWN_FRAGMENTS


BLOCKS = [
    (f"{path.name}:{line}", code)
    for path in sorted(DOCS.glob("*.md"))
    for line, code in python_blocks(path)
]


def test_docs_exist_and_are_linked_from_the_readme() -> None:
    readme = README.read_text()
    for name in OURS:
        assert (DOCS / name).exists(), name
        assert f"(docs/{name})" in readme, f"README.md does not link docs/{name}"
    assert "```mermaid\nstateDiagram" in (DOCS / "lifecycle.md").read_text()


def test_no_run_blocks_are_rare() -> None:
    for path in DOCS.glob("*.md"):
        every = python_blocks(path, include_no_run=True)
        skipped = len(every) - len(python_blocks(path))
        assert skipped <= max(1, len(every) // 4), f"{path.name}: {skipped} no-run blocks"


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_docs_python_block_runs(
    where: str, code: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if _known_fragment(where, code):
        request.applymarker(pytest.mark.xfail(reason="a project fragment", strict=True))
    script = tmp_path / f"{where.replace('.md:', '_')}.py"
    if target_of(code) == "postgres":
        with fresh_database(request.getfixturevalue("pg_url")) as url:
            script.write_text(code.replace(PG_PLACEHOLDER, url))
            run = run_script(script, tmp_path, {"DATABASE_URL": url})
    else:
        script.write_text(code.replace(SQLITE_PLACEHOLDER, request.getfixturevalue("sqlite_url")))
        run = run_script(script, tmp_path)
    assert run.returncode == 0, f"docs/{where} failed:\n{run.stderr}"


@pytest.mark.long
def test_sqlite_blocks_run_one_after_another_on_one_file(tmp_path: Path, sqlite_url: str) -> None:
    """A reader pastes the blocks one after another into the same directory, so they
    share one app.sqlite3: none may depend on the file being empty."""
    blocks = [
        (where, code)
        for where, code in BLOCKS
        if not _known_fragment(where, code)
        and target_of(code) == "sqlite"
        and SQLITE_PLACEHOLDER in code
    ]
    assert len(blocks) > 20
    for where, code in blocks:
        script = tmp_path / "snippet.py"
        script.write_text(code.replace(SQLITE_PLACEHOLDER, sqlite_url))
        run = run_script(script, tmp_path)
        assert run.returncode == 0, f"docs/{where} failed after the blocks before it:\n{run.stderr}"
