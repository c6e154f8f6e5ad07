"""tests/conftest.py's ``_spread_longest``: under xdist the longest tests start the
workers' first slices, spread by their weights, and no test is lost or repeated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from tests.conftest import BROWSER_MODULES, LONGEST, _spread_longest


@dataclass
class _Item:
    nodeid: str


def _slices(items: list[Any], workers: int) -> list[list[str]]:
    """The first distribution of xdist's worksteal: contiguous slices, as it cuts them."""
    out, start, left = [], 0, len(items)
    for slot in range(workers):
        size = left // (workers - slot)
        out.append([item.nodeid for item in items[start : start + size]])
        start, left = start + size, left - size
    return out


def test_the_longest_tests_start_the_slices_spread_by_weight() -> None:
    longest = [f"{prefix}[x]" for prefix, _ in LONGEST]
    ids = [f"tests/a.py::t{n}" for n in range(200)] + longest + ["tests/z.py::t"]
    items = [_Item(nodeid) for nodeid in ids]
    _spread_longest(cast(Any, items), 6)
    assert sorted(item.nodeid for item in items) == sorted(ids)
    weight = {f"{prefix}[x]": w for prefix, w in LONGEST}
    loads = []
    for slice_ in _slices(items, 6):
        heads = [nodeid for nodeid in slice_ if nodeid in weight]
        assert slice_[: len(heads)] == heads  # the long ones first, then the rest
        loads.append(sum(weight[nodeid] for nodeid in heads))
    assert max(loads) - min(loads) <= max(weight.values())
    # The others keep their order.
    rest = [item.nodeid for item in items if item.nodeid not in weight]
    assert rest == [nodeid for nodeid in ids if nodeid not in weight]


def test_without_xdist_the_order_is_the_collections() -> None:
    ids = [f"{LONGEST[0][0]}", "tests/a.py::t1", f"{LONGEST[1][0]}"]
    items = [_Item(nodeid) for nodeid in ids]
    _spread_longest(cast(Any, items), 0)
    assert [item.nodeid for item in items] == ids


def test_the_browser_tests_run_together_at_the_front_of_one_slice() -> None:
    """One chromium per browser module on one worker, not one per worker that stole a
    test or two of them at the end."""
    browser = [f"{prefix}t{n}" for prefix in BROWSER_MODULES for n in range(3)]
    longest = [f"{prefix}[x]" for prefix, _ in LONGEST]
    ids = [f"tests/a.py::t{n}" for n in range(300)] + longest + browser
    items = [_Item(nodeid) for nodeid in ids]
    _spread_longest(cast(Any, items), 6)
    assert sorted(item.nodeid for item in items) == sorted(ids)
    holding = [s for s in _slices(items, 6) if any(nodeid in browser for nodeid in s)]
    assert len(holding) == 1
    at_front = [nodeid for nodeid in holding[0] if nodeid in browser or nodeid in longest]
    assert holding[0][: len(at_front)] == at_front
    assert [nodeid for nodeid in at_front if nodeid in browser] == browser  # in order


def test_a_browser_test_named_in_longest_is_placed_once(monkeypatch: Any) -> None:
    import tests.conftest

    slow = f"{BROWSER_MODULES[0]}slow"
    monkeypatch.setattr(tests.conftest, "LONGEST", (*LONGEST, (slow, 30)))
    ids = [f"tests/a.py::t{n}" for n in range(300)] + [slow, f"{BROWSER_MODULES[1]}t"]
    items = [_Item(nodeid) for nodeid in ids]
    _spread_longest(cast(Any, items), 6)
    assert sorted(item.nodeid for item in items) == sorted(ids)
