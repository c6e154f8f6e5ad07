"""Periodic jobs from both sides: River and riverboat configure the same periodic job,
unique per period; whichever leads inserts the tick, and when leadership moves within a
period the new leader's run-on-start insert is the same tick's duplicate, not a second
job."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from riverboat import (
    Client,
    InsertManyParams,
    InsertOpts,
    InsertResult,
    PeriodicJob,
    UniqueOpts,
    Workers,
)
from tests.interop import helpers
from tests.interop.river_go import RiverGo, Target
from tests.waiting import wait_until

PERIOD = timedelta(hours=1)


def hour_bucket(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


class InsertRecorder:
    """Insert middleware: the outcome of every insert, the leader's periodic ones
    included, and an event set at the first ``tick`` insert."""

    def __init__(self) -> None:
        self.results: list[InsertResult] = []
        self.tick_inserted = threading.Event()

    def insert_many_sync(self, jobs: list[Any], call_next: Any) -> list[InsertResult]:
        results: list[InsertResult] = call_next()
        self.results.extend(results)
        if any(r.job.kind == "tick" for r in results):
            self.tick_inserted.set()
        return results


def riverboat_leader(target: Target, recorder: InsertRecorder) -> Client:
    """A riverboat client running the hourly ``tick`` periodic job (run on start),
    unique by period as River's is configured, into the unworked queue ``ticks``."""
    opts = InsertOpts(queue="ticks", unique_opts=UniqueOpts(by_period=PERIOD))
    tick = PeriodicJob(
        PERIOD,
        lambda: InsertManyParams({"from": "python"}, opts, kind="tick"),
        run_on_start=True,
        id="tick",
    )
    return helpers.client(target, Workers(), periodic_jobs=[tick], middleware=[recorder])


def river_leader_flags() -> list[str]:
    return [
        "--id=go-periodic",
        "--periodic-kind=tick",
        f"--periodic-interval={PERIOD.total_seconds()}",
        "--periodic-unique",
        "--periodic-queue=ticks",
    ]


def ticks(client: Client) -> list[tuple[str, str]]:
    return sorted(
        (job.args["from"], job.unique_key.hex() if job.unique_key else "")
        for job in client.job_list(kinds=["tick"]).jobs
    )


@pytest.mark.parametrize(
    "river_first", [True, False], ids=["river_leads_first", "riverboat_leads_first"]
)
def test_leadership_change_within_a_period_does_not_double_the_tick(
    river: RiverGo, target: Target, river_first: bool
) -> None:
    before = datetime.now(UTC)
    with helpers.client(target) as reader:
        if river_first:
            go = river.worker(*river_leader_flags())
            try:
                wait_until(lambda: ticks(reader), what="River's run-on-start tick")
            finally:
                go.stop()
            recorder = InsertRecorder()
            rb = riverboat_leader(target, recorder)
            rb.start()
            try:
                assert recorder.tick_inserted.wait(20), "riverboat's leader never ran the tick"
            finally:
                rb.stop()
                rb.close()
        else:
            recorder = InsertRecorder()
            rb = riverboat_leader(target, recorder)
            rb.start()
            try:
                assert recorder.tick_inserted.wait(20), "riverboat's leader never ran the tick"
            finally:
                rb.stop()
                rb.close()
            go = river.worker(*river_leader_flags())
            try:
                inserted = go.wait_event(lambda e: e.get("event") == "inserted", timeout=30)
            finally:
                go.stop()
            assert inserted["kind"] == "tick"
        after = datetime.now(UTC)
        found = ticks(reader)
    if hour_bucket(before) == hour_bucket(after):
        assert len(found) == 1, f"the tick was doubled: {found}"
        if river_first:
            assert [r.unique_skipped_as_duplicate for r in recorder.results] == [True]
        else:
            assert inserted["unique_skipped_as_duplicate"]
        assert found[0][0] == ("go" if river_first else "python")
    else:
        # The test straddled an hour boundary: one tick per hour, never two in one. (The
        # second side's tick may be the new hour's: not a duplicate, and listed beside the
        # first's, "go" sorting first.)
        assert len({key for _, key in found}) == len(found) <= 2
        assert ("go" if river_first else "python") in {side for side, _ in found}
