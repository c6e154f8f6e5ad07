"""The layering docs/architecture.md describes, checked: no import circles between
riverboat's modules (function-level and ``TYPE_CHECKING`` imports included, so none is
dodged), the public names are exactly ``riverboat.__all__`` and report the package as
their module."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import riverboat

SRC = Path(riverboat.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """riverboat modules ``path`` imports: at module level, inside functions and under
    ``if TYPE_CHECKING`` alike. An import made for annotations only is still a
    dependency (the module can't be understood, or type-checked, without the other), so
    a circle through one is a circle."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # "from pkg import submodule" imports the submodule, not a cycle via pkg.
            subs = {f"{node.module}.{a.name}" for a in node.names} & modules
            found.update(subs or {node.module})
    return {name for name in found if name in modules}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_circles() -> None:
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    modules = set(paths)
    graph = {name: _imports(path, modules) - {name} for name, path in paths.items()}
    assert _cycles(graph) == []


# The layers of docs/architecture.md, lowest first: a module imports only from its own
# layer and the ones below. A new module must be placed here (the test says so).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "core",
        (
            "_channels",
            "_clock",
            "_fleet",
            "_imports",
            "_insert",
            "_job",
            "_json",
            "_options",
            "_periodic",
            "_queue",
            "_seconds",
            "_sql",
            "_unique",
            "error_handler",
            "errors",
            "flow",
            "metrics",
            "resumable",
            "workflow",
        ),
    ),
    ("dialect", ("dialect",)),
    ("drivers", ("drivers", "_url", "migrations")),
    (
        "runtime",
        (
            "runtime",
            "middleware",
            "riverlog",
            "wait",
            "_insert_plan",
            "_insert_async",
            "_insert_sync",
        ),
    ),
    (
        "client",
        (
            "__init__",
            "client",
            "_client_core",
            "_client_async",
            "_client_sync",
            "_admin",
            "_admin_async",
            "_admin_sync",
            "testing",
        ),
    ),
    ("surfaces", ("contrib", "cli", "ui", "bench", "demo")),
)


def _layer(module: str) -> int:
    parts = module.split(".")[1:] or ["__init__"]
    for level, (_, prefixes) in enumerate(LAYERS):
        if parts[0] in prefixes:
            return level
    raise AssertionError(f"{module} is in no layer: place it in LAYERS (and the docs' drawing)")


def test_each_layer_imports_only_its_own_and_lower_ones() -> None:
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    modules = set(paths)
    upward = sorted(
        f"{name} ({LAYERS[_layer(name)][0]}) imports {target} ({LAYERS[_layer(target)][0]})"
        for name, path in paths.items()
        for target in _imports(path, modules)
        if _layer(target) > _layer(name)
    )
    assert upward == []


def test_the_public_names_are_all_and_live_in_riverboat() -> None:
    public = {n for n in dir(riverboat) if not n.startswith("_") and n[0].isupper()}
    assert public == {n for n in riverboat.__all__ if n[0].isupper()}
    for name in riverboat.__all__:
        obj = getattr(riverboat, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__module__ == "riverboat", name


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_a_type_checking_import_is_an_edge(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from riverboat import errors\n"
    )
    assert _imports(module, {"riverboat.errors"}) == {"riverboat.errors"}


# Types public signatures name that are deliberately not in riverboat.__all__: the
# driver protocols live with the drivers (riverboat.drivers), and the runtime and a
# registered worker are internals a client exposes for tests and contrib only.
NOT_EXPORTED = {"AsyncDriver", "Driver", "RegisteredWorker", "Runtime"}


def test_types_in_public_signatures_are_exported() -> None:
    """Every riverboat class a public class's or function's annotations name (argument,
    return and field types, through base classes) is importable from ``riverboat``."""
    defined = {
        name
        for path in SRC.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and not (name := node.name).startswith("_")
    }
    missing: dict[str, set[str]] = {}
    for public in riverboat.__all__:
        obj = getattr(riverboat, public)
        owners = (
            [
                c
                for c in obj.__mro__
                if c.__module__ == "riverboat" or c.__module__.startswith("riverboat.")
            ]
            if inspect.isclass(obj)
            else [obj]
        )
        members = [obj] + [
            member
            for c in owners
            if inspect.isclass(c)
            for name, member in vars(c).items()
            if not name.startswith("_") or name == "__init__"
        ]
        for member in members:
            function = member.fget if isinstance(member, property) else member
            annotations = getattr(function, "__annotations__", None)
            if not isinstance(annotations, dict):
                continue
            for text in map(str, annotations.values()):
                for name in set(re.findall(r"[A-Za-z_]\w*", text)) & defined:
                    if name not in riverboat.__all__ and name not in NOT_EXPORTED:
                        missing.setdefault(name, set()).add(public)
    assert missing == {}
