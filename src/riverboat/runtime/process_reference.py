"""How a job names its work function to a process-executor child: by import path.

A child is a fresh interpreter, so it can run only what it can import by name: a
function at a module's top level (``"module:qualname"``), or a Worker class it can make
an instance of with no arguments (``"class:module:qualname"``). Closures, lambdas,
callable instances and async functions can't be sent; a script's ``__main__`` can (the
child runs the script under another name, as multiprocessing's spawn does). These checks
run at registration (``executor="process"``) or when a process queue is configured, so
the error comes before any job does.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from typing import Any

from riverboat.errors import InvalidInputError

__all__ = ["args_type_reference", "process_reference"]


def _resolve(module_name: str, qualname: str) -> Any:
    module = sys.modules.get(module_name)
    if module is None:
        module = importlib.import_module(module_name)
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _object_reference(obj: Any, what: str, resolve: bool) -> str:
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        raise InvalidInputError(
            what, f"{obj!r} has no module and name to import it by in a child process"
        )
    if "<" in qualname:  # <locals>, <lambda>
        raise InvalidInputError(
            what,
            f"{module_name}.{qualname} is a closure or lambda; a child process imports "
            "the function by name, so define it at the top level of a module",
        )
    if module_name == "__main__":
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        if not main_file:
            raise InvalidInputError(
                what,
                f"{qualname} is defined in an interactive __main__ that a child process "
                "can't import; move it into a module",
            )
    if not resolve:
        return f"{module_name}:{qualname}"
    try:
        found = _resolve(module_name, qualname)
    except Exception as exc:
        raise InvalidInputError(
            what, f"{module_name}.{qualname} can't be imported by name: {exc}"
        ) from None
    if found is not obj:
        raise InvalidInputError(
            what,
            f"{module_name}.{qualname} names another object than the one registered (a "
            "decorator that wraps it?); register the importable function itself",
        )
    return f"{module_name}:{qualname}"


def process_reference(fn: Callable[..., Any], kind: str, *, resolve: bool = True) -> str:
    """The reference a child imports ``fn`` by, or an :class:`InvalidInputError` saying
    why it can't: a closure, lambda, callable instance, async function, or a Worker class
    that needs constructor arguments (the child makes its own instance).

    ``resolve=False`` skips importing the reference back, for a check at registration:
    a decorator runs before its module binds the function's name, so whether the name
    leads back to the function is known only later (the client checks it when made)."""
    what = f"workers[{kind!r}]"
    if inspect.iscoroutinefunction(fn):
        raise InvalidInputError(what, "the process executor runs plain def workers only")
    owner = getattr(fn, "__self__", None)
    if owner is not None and getattr(fn, "__name__", None) == "work":  # Worker.work
        cls = type(owner)
        try:
            inspect.signature(cls).bind()
        except TypeError:
            raise InvalidInputError(
                what,
                f"{cls.__qualname__} takes constructor arguments; a child process makes "
                "its own instance with none",
            ) from None
        return "class:" + _object_reference(cls, what, resolve)
    if not inspect.isfunction(fn):
        raise InvalidInputError(
            what,
            f"{fn!r} is not a plain function; a child process imports the function by "
            "name, so register a module-level def (or a Worker class)",
        )
    return _object_reference(fn, what, resolve)


def args_type_reference(args_type: Any, kind: str) -> str | None:
    if args_type is None or args_type is dict:
        return None
    return _object_reference(args_type, f"workers[{kind!r}].args_type", True)
