"""riverboat._json.json_loads: the C scanner without json.loads' wrappers, for the JSON
databases hand back. It must return what json.loads returns, and fail as it fails."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverboat._json import json_loads

_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(allow_nan=False),
        st.text(),
    ),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _same(text: str | bytes) -> None:
    try:
        expected: Any = ("ok", json.loads(text))
    except ValueError as exc:
        expected = ("error", type(exc), str(exc))
    try:
        got: Any = ("ok", json_loads(text))
    except ValueError as exc:
        got = ("error", type(exc), str(exc))
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(
    value=_values,
    separators=st.sampled_from([(",", ":"), (", ", ": ")]),
    around=st.sampled_from(["", " ", "\n", "\t "]),
)
def test_it_reads_what_json_loads_reads(
    value: Any, separators: tuple[str, str], around: str
) -> None:
    text = json.dumps(value, separators=separators, ensure_ascii=False)
    _same(text)
    _same(around + text)
    _same(text + around)
    _same(text.encode())


@pytest.mark.parametrize(
    "text",
    ['{"a":', "", "   ", '{"a":1}x', '{"a":1} 2', '{"a":"\x01"}', "[1,]", "tru", '"\\ud800"'],
)
def test_it_fails_as_json_loads_fails(text: str) -> None:
    _same(text)


def test_nan_and_infinity_read_as_json_loads_reads_them() -> None:
    assert math.isnan(json_loads("NaN"))
    assert json_loads("[Infinity,-Infinity]") == [math.inf, -math.inf]
