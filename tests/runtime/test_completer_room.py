"""Past the completer's high-water mark, finished jobs wait to hand over their outcomes
until the backlog is down to the low-water mark. One full batch taken from a backlog at
the high mark leaves it exactly at the low mark (10,000 - 5,000): that must let them go,
not keep them waiting, slots held, for a second batch."""

from __future__ import annotations

import pytest

from riverboat import EventKind, InsertManyParams, Workers
from riverboat.runtime import completer as completer_module
from riverboat.runtime.completer import Completer, PendingCompletion
from riverboat.runtime.outcomes import completed
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.runtime.helpers import make_client

HIGH = 4


async def test_a_batch_that_brings_the_backlog_down_to_the_low_mark_makes_room(
    any_db: Db,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(completer_module, "BACKPRESSURE_HIGH", HIGH)
    monkeypatch.setattr(completer_module, "BACKPRESSURE_LOW", HIGH // 2)
    client = make_client(any_db.url, Workers(), schema=any_db.schema)
    try:
        inserted = await client.insert_many([InsertManyParams({}, kind="room")] * (HIGH + 1))
        jobs = [r.job for r in inserted]
        completer = Completer(client.driver)  # not started: the test takes its batches
        pending = [
            PendingCompletion(completed(job.id), job, EventKind.JOB_COMPLETED, 0.0, 0.0, 0.0)
            for job in jobs
        ]
        for one in pending[:HIGH]:
            assert completer.add_nowait(one)
        # At the mark: the next outcome must wait for room.
        assert not completer.add_nowait(pending[HIGH])
        completer._below_low.clear()  # what add() does before it waits
        batch = completer._take(HIGH // 2)
        assert len(batch) == HIGH // 2
        assert completer._below_low.is_set(), (
            "the backlog is down to the low mark, but the waiting outcomes were kept waiting"
        )
        assert completer.add_nowait(pending[HIGH])
    finally:
        await client.close()
