"""The leader's rescue of a dead client's jobs, step by step (Postgres and SQLite): the
dead client's row is condemned (its lease can't be renewed any more), its running jobs
are rescued, then the row is removed. A rescue that fails half way is finished on the
next run; before, the row was removed first and a failed rescue left the jobs
``running`` for good (a job without a timeout is never rescued by River's rule)."""

from __future__ import annotations

from typing import Any

import pytest

import riverboat
from riverboat import Job, JobState, RetryPolicy, Workers
from riverboat._job import RESCUE_ERROR
from riverboat.errors import DriverError
from riverboat.runtime.maintenance._service import MaintenanceContext
from riverboat.runtime.maintenance.config import MaintenanceConfig
from riverboat.runtime.maintenance.rescuer import DeadClientRescuer, JobRescuer
from tests.runtime.dbs import Db, any_db  # noqa: F401

pytestmark = pytest.mark.asyncio


def _workers() -> Workers:
    workers = Workers()

    @workers.register("forever", timeout=-1)  # no timeout: River's rule never rescues it
    async def forever(job: Job[Any]) -> None:
        return None

    return workers


async def _dead_client_with_a_running_job(db: Db, client: riverboat.AsyncClient, name: str) -> int:
    job = (await client.insert({}, kind="forever")).job
    dialect = client.driver.dialect
    # Registered with a lease that ran out a minute ago, listing its running job.
    await client.driver.fetch(
        dialect.client_register(
            id=name,
            host="h",
            pid=1,
            version="x",
            queues={},
            job_ids=[job.id],
            slots=1,
            dead_after=-60,
        )
    )
    attempted_by = '["' + name + '"]' if db.dialect == "sqlite" else "{" + name + "}"
    db.execute(
        "UPDATE river_job SET state = 'running', attempt = 1, attempted_at = "
        + ("datetime('now', 'subsec')" if db.dialect == "sqlite" else "now()")
        + ", attempted_by = "
        + ("jsonb(%s)" if db.dialect == "sqlite" else "%s::text[]")
        + " WHERE id = %s",
        attempted_by,
        job.id,
    )
    return job.id


async def test_a_rescue_that_fails_half_way_is_finished_on_the_next_run(
    any_db: Db,  # noqa: F811
) -> None:
    workers = _workers()
    client = riverboat.AsyncClient(any_db.url, schema=any_db.schema, workers=workers)
    try:
        job_id = await _dead_client_with_a_running_job(any_db, client, "dead_w")
        driver = client.driver
        ctx = MaintenanceContext(
            driver=driver,
            client_id="leader",
            config=MaintenanceConfig(),
            workers=workers,
            retry_policy=RetryPolicy(),
            job_timeout=None,
        )
        real_fetch = driver.fetch
        failures = 1

        async def flaky_fetch(stmt: Any) -> Any:
            nonlocal failures
            if stmt.query.name.startswith("job_get_stuck") and failures:
                failures -= 1
                raise DriverError("connection reset (a fault injected by the test)")
            return await real_fetch(stmt)

        driver.fetch = flaky_fetch  # type: ignore[method-assign]
        rescuer = DeadClientRescuer(ctx)
        with pytest.raises(DriverError, match="injected"):
            await rescuer.run_once()
        # The row is condemned, not removed: still dead, so the next run finds it.
        listed = [dialect_row for dialect_row in await real_fetch(driver.dialect.client_list())]
        assert [row[0] for row in listed] == ["dead_w"]
        # River's rule leaves a job of a registered client whose lease ran out alone.
        await JobRescuer(ctx).run_once()
        assert (await client.job_get(job_id)).state is JobState.RUNNING
        await rescuer.run_once()
        assert (await client.job_get(job_id)).state is JobState.RETRYABLE
        assert await real_fetch(driver.dialect.client_list()) == []
        # A condemned lease is not renewed by a late heartbeat either.
        renewed = await real_fetch(
            driver.dialect.client_heartbeat(
                id="dead_w", queues={}, job_ids=[], slots=0, dead_after=30
            )
        )
        assert renewed == []
    finally:
        await client.close()


async def test_sqlite_renews_a_lease_that_ran_out_only_while_its_jobs_are_its_own(
    sqlite_url: str,
) -> None:
    """On SQLite a lease that ran out (a write lock held past dead_after) is renewed
    while the row exists, unless the row was condemned or a job it listed was handed
    out since (no longer running, or claimed by another client)."""
    db = Db("sqlite", sqlite_url, None)
    client = riverboat.AsyncClient(sqlite_url, workers=_workers())
    try:
        dialect = client.driver.dialect

        async def heartbeat(name: str) -> list[Any]:
            rows: list[Any] = await client.driver.fetch(
                dialect.client_heartbeat(id=name, queues={}, job_ids=[], slots=0, dead_after=-60)
            )
            return rows

        await _dead_client_with_a_running_job(db, client, "w_mine")
        assert len(await heartbeat("w_mine")) == 1  # its job still runs under it
        # A job it ended itself (failed, to be retried; or snoozed) is still its own.
        failed = await _dead_client_with_a_running_job(db, client, "w_failed")
        db.execute(
            "UPDATE river_job SET state = 'retryable', errors = jsonb(%s) WHERE id = %s",
            '[{"at": "2026-01-01T00:00:00Z", "attempt": 1, "error": "boom", "trace": ""}]',
            failed,
        )
        assert len(await heartbeat("w_failed")) == 1
        # Rescued meanwhile (River's rule, a Go leader): its attempt's last error says so.
        handed_out = await _dead_client_with_a_running_job(db, client, "w_gone")
        db.execute(
            "UPDATE river_job SET state = 'retryable', errors = jsonb(%s) WHERE id = %s",
            '[{"at": "2026-01-01T00:00:00Z", "attempt": 1, "error": "'
            + RESCUE_ERROR
            + '", "trace": ""}]',
            handed_out,
        )
        assert await heartbeat("w_gone") == []
        taken = await _dead_client_with_a_running_job(db, client, "w_taken")
        db.execute(
            'UPDATE river_job SET attempted_by = jsonb(\'["w_taken", "other"]\') WHERE id = %s',
            taken,
        )
        assert await heartbeat("w_taken") == []
    finally:
        await client.close()
