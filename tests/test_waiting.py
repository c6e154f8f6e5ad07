"""The tests' waiting helpers: they return the first truthy value, and a timeout fails
with what was awaited and the last value seen."""

from __future__ import annotations

import itertools

import pytest

from tests.waiting import wait_until, wait_until_async


def test_wait_until_returns_the_first_truthy_value() -> None:
    values = itertools.chain([0, "", None], itertools.repeat("ready"))
    assert wait_until(lambda: next(values), timeout=5, poll=0) == "ready"


def test_wait_until_names_what_it_waited_for_on_timeout() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0.05s waiting for the flag"):
        wait_until(lambda: False, timeout=0.05, what="the flag")

    def nothing_yet() -> list[int]:
        return []

    described = r"nothing_yet \(.*test_waiting.py:\d+\) \(last value: \[\]\)"
    with pytest.raises(AssertionError, match=described):
        wait_until(nothing_yet, timeout=0.05)


async def test_wait_until_async_awaits_coroutine_predicates() -> None:
    calls = itertools.count()

    async def third_call() -> int:
        n = next(calls)
        return n if n >= 2 else 0

    assert await wait_until_async(third_call, timeout=5, poll=0) == 2
    assert await wait_until_async(lambda: "plain", timeout=5) == "plain"
    with pytest.raises(AssertionError, match="last value: 0"):
        await wait_until_async(lambda: 0, timeout=0.05)
