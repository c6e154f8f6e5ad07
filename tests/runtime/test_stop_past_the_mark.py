"""A stop that cuts a job's error handlers short while the completer is past its
high-water mark and the database does not answer: the attempt's outcome is kept, and
the stop still ends.

Past the mark (BACKPRESSURE_HIGH outcomes the database has not taken; lowered to 1
here), a finished job waits for room before it hands its outcome over. A job whose
error handlers a stop cut short must not wait there: room comes only when the
database answers again, and the stop waits for the job. That was the hang a first fix
of the lost outcome had: the cancel reaching the handlers was swallowed, and when it
was the runner's give-up cancel (soft_stop_timeout + STOP_GRACE), nothing else came to
end the wait; with ``soft_stop_timeout=None`` the hard stop's own cancel did the same.

The database does not answer because another session holds its write lock: a
``LOCK TABLE river_job`` on Postgres, ``BEGIN IMMEDIATE`` on SQLite."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import riverboat
from riverboat import ErrorHandlerResult, Job, JobRow, JobState, QueueConfig, Workers
from riverboat.runtime import completer as completer_module
from riverboat.runtime import runner as runner_module
from riverboat.runtime.producer import Producer
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.waiting import wait_until_async

GRACE = 1.0  # STOP_GRACE for the test (4 s): how long past the hard stop it gives up


@contextmanager
def writes_refused(db: Db) -> Iterator[Callable[[], None]]:
    """Another session holds the database's write lock until ``release()`` (or the
    block's end): the client's writes wait for it."""
    with db.connect() as conn:
        if db.dialect == "postgres":
            conn.execute("LOCK TABLE river_job IN EXCLUSIVE MODE")
        else:
            conn.execute("BEGIN IMMEDIATE")
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                conn.rollback()

        try:
            yield release
        finally:
            release()


class Hangs:
    """An error handler that does not answer (a reporting service that is down)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def handle_error(self, job: JobRow, exc: BaseException) -> ErrorHandlerResult:
        self.started.set()
        await self.release.wait()
        return ErrorHandlerResult(set_cancelled=True)


@pytest.mark.parametrize("stop", ["cancel_turned_error", "hard_stop_no_timeout"])
async def test_handlers_cut_short_past_the_mark_keep_the_outcome_and_the_stop_ends(
    any_db: Db,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    stop: str,
) -> None:
    """``cancel_turned_error``: the hard stop's cancel turns into the body's error (a job
    that catches it and raises), so nothing would be left to cut handlers started after
    it: they are skipped (before, they ran, and only the runner's give-up cancel, GRACE
    later, reached them); the database still does not answer when the stop ends, so the
    outcome is checked in the completer, left unwritten for the rescuer.
    ``hard_stop_no_timeout``: the body failed, the handlers run, then
    ``stop_and_cancel()`` with ``soft_stop_timeout=None`` (nothing gives up); the
    database answers again once the producer has stopped, so the outcome is written."""
    db = any_db
    # 10,000 outcomes the database has not taken, scaled down: past the mark at 1, room
    # again below 1, written 1 per statement (5,000), so a failed write's retry makes no
    # room while the database does not answer.
    monkeypatch.setattr(completer_module, "BACKPRESSURE_HIGH", 1)
    monkeypatch.setattr(completer_module, "BACKPRESSURE_LOW", 1)
    monkeypatch.setattr(completer_module, "BATCH_MAX", 1)
    monkeypatch.setattr(runner_module, "STOP_GRACE", GRACE)
    producer_stopped = note_producer_stops(monkeypatch)["default"]
    go = {1: asyncio.Event(), 2: asyncio.Event()}
    started: dict[str, asyncio.Event] = {name: asyncio.Event() for name in ("1", "2", "subject")}
    workers = Workers()

    @workers.register("quick")
    async def quick(job: Job[dict[str, int]]) -> None:
        started[str(job.args["n"])].set()
        await go[job.args["n"]].wait()

    @workers.register("subject")
    async def subject(job: Job[Any]) -> None:
        started["subject"].set()
        if stop == "hard_stop_no_timeout":
            raise ValueError("the body failed")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise ValueError("cut off mid-write") from None

    handler = Hangs()
    client = riverboat.AsyncClient(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=3)},
        workers=workers,
        middleware=[handler],
        soft_stop_timeout=None if stop == "hard_stop_no_timeout" else 10.0,
        # One claim takes the three jobs; none follows while the database is locked.
        fetch_cooldown=60.0,
        fetch_poll_interval=60.0,
        leader_election=False,
    )
    client.runtime.config.completer_flush_delay = 0.01
    caplog.set_level(logging.WARNING, "riverboat")
    quick_ids = [(await client.insert({"n": n}, kind="quick")).job.id for n in sorted(go)]
    subject_id = (
        await client.insert({}, kind="subject", opts=riverboat.InsertOpts(max_attempts=1))
    ).job.id
    await client.start()
    completer = client.runtime.completer
    assert completer is not None
    stopping: asyncio.Future[None] | None = None
    try:
        async with asyncio.timeout(10):
            for event in started.values():
                await event.wait()
            if stop == "hard_stop_no_timeout":
                await handler.started.wait()
        with writes_refused(db) as release:
            # The first outcome's write waits for the lock (out of the buffer), the
            # second stays buffered: the completer is past its mark of 1.
            go[1].set()
            await wait_until_async(
                lambda: (
                    quick_ids[0] in completer.pending_ids()
                    and quick_ids[0] not in _buffered(completer)
                ),
                what="the first outcome's write under way",
            )
            go[2].set()
            await wait_until_async(
                lambda: quick_ids[1] in _buffered(completer), what="the second outcome buffered"
            )
            began = time.monotonic()
            stopping = asyncio.ensure_future(client.stop_and_cancel())
            if stop == "cancel_turned_error":
                async with asyncio.timeout(10):
                    await asyncio.shield(stopping)
                took = time.monotonic() - began
                kept = {p.update.id: p for p in completer.buffered()}
            else:
                async with asyncio.timeout(10):
                    await producer_stopped.wait()
                took = time.monotonic() - began
                release()
                async with asyncio.timeout(10):
                    await asyncio.shield(stopping)
        rows = {job_id: await client.job_get(job_id) for job_id in [*quick_ids, subject_id]}
    finally:
        handler.release.set()
        for event in go.values():
            event.set()
        if stopping is not None and not stopping.done():
            # Failed above: let it end (the lock is gone) before closing.
            await asyncio.wait([stopping], timeout=15)
        await client.close()
    print(f"{stop}: {took:.2f}s from the stop to its end, or to the producer's")
    subject_row = rows[subject_id]
    if stop == "cancel_turned_error":
        assert not handler.started.is_set(), "the handlers ran after the hard stop"
        assert took < GRACE + 5, "the stop ended soon after it gave up"
        # The database never answered: the outcomes stay unwritten (running, for the
        # rescuer), the subject's among them, decided: the body's error, discarded.
        assert subject_id in kept, "the cut-short job's outcome reached the completer"
        assert kept[subject_id].update.state is JobState.DISCARDED
        assert "cut off mid-write" in (kept[subject_id].update.error or "")
        assert subject_row.state is JobState.RUNNING
        assert "shutdown drain incomplete" in caplog.text
    else:
        assert took < 5, "the producer stopped while the database did not answer"
        assert [rows[job_id].state for job_id in quick_ids] == [JobState.COMPLETED] * 2
        assert (subject_row.state, subject_row.attempt) == (JobState.DISCARDED, 1)
        assert subject_row.errors[-1].error == "ValueError: the body failed"
    assert "its error handlers were cut short (the client is stopping)" in caplog.text


def note_producer_stops(monkeypatch: pytest.MonkeyPatch) -> defaultdict[str, asyncio.Event]:
    """Per queue, an event set once its producer's stop has ended (whatever it raised)."""
    stopped: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
    producer_stop = Producer.stop

    async def noting_stop(self: Producer, *, cancel_running: bool = False) -> None:
        try:
            await producer_stop(self, cancel_running=cancel_running)
        finally:
            stopped[self.queue].set()

    monkeypatch.setattr(Producer, "stop", noting_stop)
    return stopped


def _buffered(completer: completer_module.Completer) -> set[int]:
    return {pending.update.id for pending in completer.buffered()}


async def test_jobs_claimed_ahead_handed_back_past_the_mark_do_not_hold_the_stop(
    any_db: Db,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Jobs claimed ahead (never started) are handed back by a hard stop while the
    completer is past its high-water mark and the database does not answer: their
    hand-backs go to the completer at once, as every other outcome of the stop, and
    the producers' stop (soft_stop_timeout=None) ends. (Before, they waited for room, and
    the stop with them, for as long as the database did not answer. Found in review.)"""
    from riverboat.runtime import producer as producer_module

    monkeypatch.setattr(completer_module, "BACKPRESSURE_HIGH", 1)
    monkeypatch.setattr(completer_module, "BACKPRESSURE_LOW", 1)
    monkeypatch.setattr(completer_module, "BATCH_MAX", 1)
    # A claim ahead right after the first claim, and none expiring while the test runs.
    monkeypatch.setattr(producer_module, "AHEAD_WINDOW", 30.0)
    monkeypatch.setattr(producer_module, "AHEAD_MAX_WAIT", 60.0)
    stopped = note_producer_stops(monkeypatch)
    go = {n: asyncio.Event() for n in range(1, 7)}
    started = {n: asyncio.Event() for n in range(1, 7)}
    workers = Workers()

    @workers.register("block")
    async def block(job: Job[dict[str, int]]) -> None:
        started[job.args["n"]].set()
        await go[job.args["n"]].wait()

    client = riverboat.AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={
            "default": QueueConfig(max_workers=2),
            # No claim while the database is locked (one waiting for the lock holds its
            # producer's stop until the claim's own deadline, not what this tests): no
            # poll, and a first claim that is not full, so ending jobs wake no refill.
            "other": QueueConfig(max_workers=3, fetch_poll_interval=60.0),
        },
        workers=workers,
        soft_stop_timeout=None,
        fetch_poll_interval=0.1,  # the default queue's claim ahead follows a poll
        leader_election=False,
    )
    client.runtime.config.completer_flush_delay = 0.01
    ids: dict[int, int] = {}
    # 1 and 2 run in "default", 3 and 4 are claimed ahead there; 5 and 6 run in "other",
    # and their outcomes put the completer past its mark.
    for n in (1, 2, 3, 4):
        ids[n] = (await client.insert({"n": n}, kind="block")).job.id
    for n in (5, 6):
        opts = riverboat.InsertOpts(queue="other")
        ids[n] = (await client.insert({"n": n}, kind="block", opts=opts)).job.id
    await client.start()
    completer = client.runtime.completer
    assert completer is not None
    producer = client.runtime.producers["default"]
    try:
        async with asyncio.timeout(10):
            for n in (1, 2, 5, 6):
                await started[n].wait()
        await wait_until_async(lambda: len(producer._ahead) == 2, what="two jobs claimed ahead")
        with writes_refused(any_db) as release:
            go[5].set()
            await wait_until_async(
                lambda: ids[5] in completer.pending_ids() and ids[5] not in _buffered(completer),
                what="the first outcome's write under way",
            )
            go[6].set()
            await wait_until_async(
                lambda: ids[6] in _buffered(completer), what="the second outcome buffered"
            )
            stopping = asyncio.ensure_future(client.stop_and_cancel())
            # The producers end while the database does not answer (the completer's
            # drain then waits for it, up to its DRAIN_TIMEOUT, as River's does).
            async with asyncio.timeout(10):
                await stopped["default"].wait()
                await stopped["other"].wait()
            release()
            async with asyncio.timeout(30):
                await stopping
        rows = {n: await client.job_get(job_id) for n, job_id in ids.items()}
        for n in (1, 2, 3, 4):
            assert (rows[n].state, rows[n].attempt) == (JobState.AVAILABLE, 0), rows[n]
        for n in (5, 6):
            assert rows[n].state is JobState.COMPLETED, rows[n]
    finally:
        for event in go.values():
            event.set()
        await client.close()
