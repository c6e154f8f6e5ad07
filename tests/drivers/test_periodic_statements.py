"""The durable periodic job statements through every driver (arrays of times with
nulls on Postgres, one JSON parameter on SQLite): saved, listed, kept from moving back,
forgotten."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from riverboat.dialect._periodic_common import PeriodicJobDeclaration, PeriodicJobWrite
from tests.drivers.harness import Harness


async def test_periodic_rows_round_trip(h: Harness) -> None:
    dialect = h.driver.dialect
    tick = datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    rows = [
        PeriodicJobWrite("nightly", "0 3 * * *", "one", tick, None),
        PeriodicJobWrite("every_5s", "@every 5s", "all", tick, tick - timedelta(seconds=5)),
        PeriodicJobWrite("never", "@never", "none", None, None),
    ]
    await h.execute(h.driver, dialect.periodic_job_save(rows))
    # Under the same schedule the next run never moves back; a new schedule resets it.
    await h.execute(
        h.driver,
        dialect.periodic_job_save(
            [
                PeriodicJobWrite("nightly", "0 3 * * *", "one", tick - timedelta(days=1), None),
                PeriodicJobWrite("every_5s", "@every 1s", "all", tick - timedelta(hours=1), None),
            ]
        ),
    )
    listed = [
        dialect.decode_periodic_job(r) for r in await h.fetch(h.driver, dialect.periodic_job_list())
    ]
    by_id = {r.id: r for r in listed}
    assert [r.id for r in listed] == ["every_5s", "never", "nightly"]
    assert by_id["nightly"].next_run_at == tick and by_id["nightly"].catch_up == "one"
    assert by_id["every_5s"].schedule == "@every 1s"
    assert by_id["every_5s"].next_run_at == tick - timedelta(hours=1)
    assert by_id["every_5s"].last_run_at == tick - timedelta(seconds=5)  # kept
    assert by_id["never"].next_run_at is None and by_id["never"].last_run_at is None
    assert all(r.created_at.tzinfo is not None and r.updated_at >= r.created_at for r in listed)
    gone = await h.fetch(h.driver, dialect.periodic_job_delete(["never", "nightly"]))
    assert sorted(r[0] for r in gone) == ["never", "nightly"]


async def test_a_runtime_declaration_outlives_a_late_save_of_the_old_schedule(
    h: Harness,
) -> None:
    # A follower redefines a job at runtime (a declaration with its template) while the
    # leader, which read the old definition, is still saving that schedule's next run.
    dialect = h.driver.dialect
    tick = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    template = {"kind": "noop", "args": {"version": 1}}
    old = PeriodicJobDeclaration("redefined", "* * * * * *", "all", template)
    await h.execute(h.driver, dialect.periodic_job_declare([old]))
    new = PeriodicJobDeclaration("redefined", "*/2 * * * * *", "all", {**template, "args": {}})
    await h.execute(h.driver, dialect.periodic_job_declare([new]))
    late = PeriodicJobWrite("redefined", "* * * * * *", "all", tick, tick)
    await h.execute(h.driver, dialect.periodic_job_save([late]))
    (row,) = [
        dialect.decode_periodic_job(r) for r in await h.fetch(h.driver, dialect.periodic_job_list())
    ]
    assert row.schedule == "*/2 * * * * *"
    assert row.template == new.template
    assert row.next_run_at is None  # the leader starts the declared schedule from now
    await h.fetch(h.driver, dialect.periodic_job_delete(["redefined"]))


async def test_a_job_declared_again_after_its_removal_starts_from_now(h: Harness) -> None:
    # Removed at runtime, then added again (or its client restarted): the stored next
    # run from before the removal was kept, and the leader caught up every tick of the
    # pause, a run each, at once.
    dialect = h.driver.dialect
    tick = datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)
    job = PeriodicJobDeclaration("paused", "* * * * * *", "all", {"kind": "noop", "args": {}})
    await h.execute(h.driver, dialect.periodic_job_declare([job]))
    await h.execute(
        h.driver,
        dialect.periodic_job_save(
            [PeriodicJobWrite(job.id, job.schedule, job.catch_up, tick, None)]
        ),
    )
    await h.execute(h.driver, dialect.periodic_job_declare([job]))  # still declared: kept
    (row,) = [
        dialect.decode_periodic_job(r) for r in await h.fetch(h.driver, dialect.periodic_job_list())
    ]
    assert row.next_run_at == tick
    await h.execute(h.driver, dialect.periodic_job_remove(["paused"]))
    await h.execute(h.driver, dialect.periodic_job_declare([job]))
    (row,) = [
        dialect.decode_periodic_job(r) for r in await h.fetch(h.driver, dialect.periodic_job_list())
    ]
    assert row.removed_at is None and row.next_run_at is None
    await h.fetch(h.driver, dialect.periodic_job_delete(["paused"]))
