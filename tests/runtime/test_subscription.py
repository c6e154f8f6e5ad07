"""The asyncio Subscription: ordered, bounded (newer events dropped and counted), safe
for several readers and for readers that give up (timeouts, cancellation)."""

from __future__ import annotations

import asyncio

import pytest

from riverboat import Event, EventKind, Subscription


def _event(n: int, kind: EventKind = EventKind.JOB_COMPLETED) -> Event:
    return Event(kind, queue=f"q{n}")


def _sub(maxsize: int = 10, *kinds: EventKind) -> Subscription:
    return Subscription(kinds or [EventKind.JOB_COMPLETED], maxsize, None)


async def test_events_come_out_in_order_and_only_of_the_kinds_asked() -> None:
    sub = _sub()
    sub._offer(_event(1))
    sub._offer(_event(2, EventKind.JOB_FAILED))
    sub._offer(_event(3))
    assert [(await sub.get()).queue, sub.get_nowait().queue] == ["q1", "q3"]
    with pytest.raises(asyncio.QueueEmpty):
        sub.get_nowait()


async def test_a_full_subscription_drops_newer_events_and_counts_them() -> None:
    sub = _sub(2)
    for n in range(5):
        sub._offer(_event(n))
    assert sub.dropped == 3
    assert [sub.get_nowait().queue, sub.get_nowait().queue] == ["q0", "q1"]
    unbounded = _sub(0)
    for n in range(5000):
        unbounded._offer(_event(n))
    assert unbounded.dropped == 0


async def test_each_waiting_reader_gets_its_own_event() -> None:
    sub = _sub()
    readers = [asyncio.create_task(sub.get()) for _ in range(3)]
    await asyncio.sleep(0)  # one loop pass: each task runs up to its wait
    assert len(sub._readers) == 3
    for n in range(3):
        sub._offer(_event(n))
    got = await asyncio.gather(*readers)
    assert sorted(e.queue for e in got if e.queue) == ["q0", "q1", "q2"]


async def test_readers_that_time_out_leave_nothing_behind() -> None:
    sub = _sub()
    for _ in range(50):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(sub.get(), 0.001)
    assert not sub._readers
    sub._offer(_event(1))
    assert (await asyncio.wait_for(sub.get(), 1)).queue == "q1"


async def test_an_event_for_a_reader_cancelled_after_waking_goes_to_the_next() -> None:
    sub = _sub()
    first = asyncio.create_task(sub.get())
    second = asyncio.create_task(sub.get())
    await asyncio.sleep(0)  # one loop pass: both wait
    assert len(sub._readers) == 2
    sub._offer(_event(1))  # wakes the first reader...
    first.cancel()  # ...which is cancelled before it runs
    assert (await asyncio.wait_for(second, 1)).queue == "q1"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_iterating_reads_until_closed() -> None:
    closed: list[Subscription] = []
    sub = Subscription([EventKind.JOB_COMPLETED], 10, closed.append)
    for n in range(3):
        sub._offer(_event(n))
    seen = []
    async for event in sub:
        seen.append(event.queue)
        if len(seen) == 3:
            sub.close()
    assert seen == ["q0", "q1", "q2"] and closed == [sub]
