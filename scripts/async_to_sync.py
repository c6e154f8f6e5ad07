"""Generate riverboat's sync modules from their async sources, as psycopg 3 does.

The async module is the one written by hand; its sync twin is derived from it by a
concrete-syntax-tree transform (libcst, so comments, docstrings and layout survive):

* ``async def`` / ``async with`` / ``async for`` lose ``async``; ``await x`` becomes ``x``;
* names in :data:`RENAMES` are renamed wherever they appear (code, imports, and as whole
  words in docstrings and comments), e.g. ``AsyncAdmin`` -> ``SyncAdmin``;
* the result is run through ``ruff format``, and starts with a header saying where it
  came from.

    .venv/bin/python scripts/async_to_sync.py           # regenerate every pair
    .venv/bin/python scripts/async_to_sync.py --check   # exit 1 if one is out of date (CI)

Where the two sides really differ (the embedded runtime of the sync client on its own
thread, the SQLite driver's worker thread), the async source calls a hook that each
side defines by hand, so the generated code stays a faithful copy.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import libcst as cst

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "riverboat"

#: async source -> generated sync module, relative to src/riverboat.
PAIRS: dict[str, str] = {
    "_admin_async.py": "_admin_sync.py",
    "_client_async.py": "_client_sync.py",
    "_insert_async.py": "_insert_sync.py",
}

#: Names that differ between the two sides.
RENAMES: dict[str, str] = {
    "AsyncAdmin": "SyncAdmin",
    "AsyncClientBase": "ClientBase",
    "_client_async": "_client_sync",
    "AsyncClient": "Client",
    "AsyncDriver": "Driver",
    "AsyncIterator": "Iterator",
    "AsyncIterable": "Iterable",
    "AsyncGenerator": "Generator",
    "asynccontextmanager": "contextmanager",
    "AbstractAsyncContextManager": "AbstractContextManager",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "_admin_async": "_admin_sync",
    "_insert_async": "_insert_sync",
    "wrap_insert_async": "wrap_insert",
    "AsyncFinalizedWaiter": "FinalizedWaiter",
    "applied_version_async": "applied_version",
}

_WORDS = re.compile(r"\b(" + "|".join(map(re.escape, RENAMES)) + r")\b")


def _rename_text(text: str) -> str:
    return _WORDS.sub(lambda m: RENAMES[m.group(1)], text)


class _ToSync(cst.CSTTransformer):
    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef:
        return updated.with_changes(asynchronous=None) if updated.asynchronous else updated

    def leave_With(self, original: cst.With, updated: cst.With) -> cst.With:
        return updated.with_changes(asynchronous=None) if updated.asynchronous else updated

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        return updated.with_changes(asynchronous=None) if updated.asynchronous else updated

    def leave_Await(self, original: cst.Await, updated: cst.Await) -> cst.BaseExpression:
        # Keep the parentheses that surrounded the await expression itself.
        return updated.expression.with_changes(lpar=updated.lpar, rpar=updated.rpar)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        new = RENAMES.get(updated.value)
        return updated.with_changes(value=new) if new else updated

    def leave_SimpleString(
        self, original: cst.SimpleString, updated: cst.SimpleString
    ) -> cst.SimpleString:
        return updated.with_changes(value=_rename_text(updated.value))

    def leave_Comment(self, original: cst.Comment, updated: cst.Comment) -> cst.Comment:
        return updated.with_changes(value=_rename_text(updated.value))


def header(source: str) -> str:
    return (
        f"# Generated from {source} by scripts/async_to_sync.py: do not edit.\n"
        "# Change the async module, then run: .venv/bin/python scripts/async_to_sync.py\n"
    )


def _with_generated_docstring(module: cst.Module, source: str) -> cst.Module:
    """Keep the first paragraph of the module docstring (renamed); the rest speaks of
    the async module and how its twin is made, so say where this one came from instead."""
    docstring = module.get_docstring(clean=True)
    if docstring is None:
        return module
    first = docstring.split("\n\n")[0]
    text = f'"""{first}\n\nGenerated from ``{source}`` by ``scripts/async_to_sync.py``.\n"""'
    statement = cst.SimpleStatementLine([cst.Expr(cst.SimpleString(text))])
    return module.with_changes(body=[statement, *module.body[1:]])


def generate(source: Path) -> str:
    """The sync module's text for the async module at ``source``, ruff-formatted."""
    tree = cst.parse_module(source.read_text()).visit(_ToSync())
    text = header(source.name) + _with_generated_docstring(tree, source.name).code
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", "generated.py", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return formatted.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a generated module is out of date"
    )
    args = parser.parse_args(argv)
    stale = []
    for async_name, sync_name in PAIRS.items():
        want = generate(SRC / async_name)
        target = SRC / sync_name
        have = target.read_text() if target.exists() else None
        if have == want:
            continue
        if args.check:
            stale.append(sync_name)
        else:
            target.write_text(want)
            print(f"wrote src/riverboat/{sync_name}")
    if stale:
        print(
            "out of date, generated from their async twins: "
            + ", ".join(f"src/riverboat/{name}" for name in stale)
            + "\nrun: .venv/bin/python scripts/async_to_sync.py",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
