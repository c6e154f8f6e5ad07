"""Every ```python block of README.md runs, against a migrated SQLite file or Postgres.

A block written for ``sqlite:///app.sqlite3`` runs on the ``sqlite_url`` fixture's file,
one for ``postgresql://localhost/app`` on a fresh migrated Postgres schema (through the
URL's ``search_path`` option, so the block's own psycopg connection sees it too). Each
block runs as a script in its own interpreter, with warnings as errors, the way a reader
would paste it. A block that starts with ``# package/module.py`` is also written there
and served with ``riverboat worker package.module:client --exit-when-idle``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docblocks import (
    PG_PLACEHOLDER,
    SQLITE_PLACEHOLDER,
    database_for,
    python_blocks,
    run_script,
)

README = Path(__file__).resolve().parent.parent / "README.md"


def _blocks() -> list[tuple[int, str]]:
    return python_blocks(README)


BLOCKS = _blocks()


def test_readme_has_the_sections_and_quick_start() -> None:
    text = README.read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", quick, re.DOTALL)
    assert commands == ["./scripts/demo\n./scripts/test\n"]
    for section in ("Migrations", "Inserting jobs", "Defining workers", "Running workers"):
        assert f"\n## {section}\n" in text
    assert len(BLOCKS) >= 6
    for path in re.findall(r"\]\((docs/[^)#]+)", text):  # links to docs/ must exist
        assert (README.parent / path).exists(), path


def _target(code: str) -> str:
    if PG_PLACEHOLDER in code:
        return "postgres"
    assert SQLITE_PLACEHOLDER in code, "a README block must use one of the example URLs"
    return "sqlite"


@pytest.mark.parametrize(("line", "code"), BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_readme_python_block_runs(
    line: int, code: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    _target(code)  # a README block must name one of the example URLs
    code, url = database_for(code, request)
    script = tmp_path / f"readme_block_{line}.py"
    script.write_text(code)
    run = run_script(script, tmp_path)
    assert run.returncode == 0, f"README.md block at line {line} failed:\n{run.stderr}"

    module = re.match(r"# ([\w/]+)\.py\n", code)
    if module is not None:
        _serve_module(module.group(1), code, url, tmp_path)


def _serve_module(module_path: str, code: str, url: str, tmp_path: Path) -> None:
    """Write the block as the module it names and work a job with `riverboat worker`."""
    from riverboat import Client

    target = tmp_path / f"{module_path}.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    for parent in target.relative_to(tmp_path).parents:
        if parent != Path("."):
            (tmp_path / parent / "__init__.py").touch()
    target.write_text(code)
    with Client(url) as client:
        kind = re.search(r'kind: ClassVar\[str\] = "(\w+)"', code)
        assert kind is not None
        fields = re.findall(r"^    (\w+): (str|int)$", code, re.MULTILINE)
        args = {name: ("x@example.com" if typ == "str" else 1) for name, typ in fields}
        job = client.insert(args, kind=kind.group(1)).job
        target_attr = module_path.replace("/", ".") + ":client"
        run = subprocess.run(
            [sys.executable, "-m", "riverboat.cli", "worker", target_attr, "--exit-when-idle"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        assert client.job_get(job.id).state == "completed"


def test_readme_migrate_commands_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.sqlite3'}"
    for action in ("up", "list"):
        run = subprocess.run(
            [sys.executable, "-m", "riverboat.cli", "migrate", action, "--database-url", url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
    sql = subprocess.run(
        [sys.executable, "-m", "riverboat.cli", "migrate", "get-sql", "--direction", "up"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sql.returncode == 0, sql.stderr
    assert "river_job" in sql.stdout
