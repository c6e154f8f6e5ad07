"""riverboat.runtime.stacks: kill -USR1 prints every task's stack (a real worker gets the
signal in tests/cli/test_worker_logs.py)."""

from __future__ import annotations

import asyncio
import io

import pytest

from riverboat.runtime.stacks import dump_stacks

pytestmark = pytest.mark.asyncio


async def test_dump_stacks_names_each_task_and_what_it_awaits() -> None:
    gate = asyncio.Event()
    waiter = asyncio.create_task(gate.wait(), name="riverboat-test-waiter")
    await asyncio.sleep(0)
    out = io.StringIO()
    dump_stacks(asyncio.get_running_loop(), out)
    gate.set()
    await waiter
    text = out.getvalue()
    assert "asyncio tasks" in text and "--- task riverboat-test-waiter" in text, text
    assert "locks.py" in text  # Event.wait's frame: what it waits on


async def test_the_stack_dump_leaves_an_applications_own_sigusr1_handler() -> None:
    import signal

    from riverboat.runtime.stacks import dump_stacks_on_signal

    if not hasattr(signal, "SIGUSR1"):
        pytest.skip("no SIGUSR1 on this platform")
    loop = asyncio.get_running_loop()

    def own(signum: int, frame: object) -> None:
        pass

    previous = signal.signal(signal.SIGUSR1, own)
    try:
        assert dump_stacks_on_signal(loop) is False
        assert signal.getsignal(signal.SIGUSR1) is own
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        assert dump_stacks_on_signal(loop) is True
        loop.remove_signal_handler(signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)
