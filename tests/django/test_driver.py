"""DjangoDriver: inserts join Django's transactions, and every statement the client and
runtime use runs through Django's cursor (arrays, bytea, jsonb, the completion)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

import riverboat
from riverboat import DriverError, InsertOpts, JobState, UniqueOpts
from riverboat.dialect.base import JobStateUpdate
from riverboat.dialect.postgres import PostgresDialect
from riverboat.drivers.django import DjangoDriver, libpq_params
from riverboat.migrations import LATEST_VERSION, Migrator
from tests.django.helpers import job_count, rows


class Boom(Exception):
    pass


def test_dialect_and_capabilities(dj: str, pg_schema: str) -> None:
    driver = DjangoDriver(schema=pg_schema)
    assert isinstance(driver.dialect, PostgresDialect)
    assert driver.dialect.schema == pg_schema
    assert driver.capabilities.sync and not driver.capabilities.async_
    assert Migrator(driver).current_version() == LATEST_VERSION


def test_insert_in_rolled_back_atomic_leaves_no_job(dj: str, pg_url: str, pg_schema: str) -> None:
    from tests.django.testapp.models import Counter

    client = riverboat.Client(DjangoDriver(schema=pg_schema))
    with pytest.raises(Boom), transaction.atomic():
        Counter.objects.create(name="a")
        result = client.insert({"x": 1}, kind="rolled_back")
        assert result.job.id > 0
        raise Boom
    assert job_count(pg_url, pg_schema) == 0
    assert not Counter.objects.exists()


def test_insert_in_committed_atomic_keeps_the_job(dj: str, pg_url: str, pg_schema: str) -> None:
    from tests.django.testapp.models import Counter

    client = riverboat.Client(DjangoDriver(schema=pg_schema))
    with transaction.atomic():
        Counter.objects.create(name="a")
        inserted = client.insert({"x": 1}, kind="committed")
        # Not visible to anyone else until the caller's transaction commits.
        assert job_count(pg_url, pg_schema) == 0
    assert job_count(pg_url, pg_schema, "committed") == 1
    assert client.job_get(inserted.job.id).args == {"x": 1}
    assert Counter.objects.get(name="a").n == 0


def test_insert_tx_and_nested_atomic(dj: str, pg_url: str, pg_schema: str) -> None:
    client = riverboat.Client(DjangoDriver(schema=pg_schema))
    with transaction.atomic():
        client.insert_tx(connection, {"n": 1}, kind="outer")
        with pytest.raises(Boom), transaction.atomic():  # a savepoint, rolled back alone
            client.insert({"n": 2}, kind="inner")
            raise Boom
    assert job_count(pg_url, pg_schema, "outer") == 1
    assert job_count(pg_url, pg_schema, "inner") == 0
    with pytest.raises(TypeError):
        client.insert_tx(object(), {"n": 3}, kind="outer")


def test_insert_many_arrays_unique_tags_schedule(dj: str, pg_schema: str) -> None:
    client = riverboat.Client(DjangoDriver(schema=pg_schema))
    later = datetime.now(UTC) + timedelta(hours=1)
    results = client.insert_many(
        [
            riverboat.InsertManyParams({"i": 1, "pct": "100%"}, kind="many"),
            riverboat.InsertManyParams(
                {"i": 2},
                InsertOpts(queue="other", priority=3, tags=["aaa", "bbb"], scheduled_at=later),
                kind="many",
            ),
            riverboat.InsertManyParams(
                {"i": 3},
                InsertOpts(unique_opts=UniqueOpts(by_args=True), metadata={"m": 1}),
                kind="many",
            ),
        ]
    )
    assert [r.job.args["i"] for r in results] == [1, 2, 3]
    assert results[0].job.args["pct"] == "100%"
    second = results[1].job
    assert (second.queue, second.priority, second.tags) == ("other", 3, ["aaa", "bbb"])
    assert second.state == JobState.SCHEDULED
    assert abs((second.scheduled_at - later).total_seconds()) < 0.001
    third = results[2].job
    assert third.unique_key is not None and third.metadata["m"] == 1
    again = client.insert({"i": 3}, InsertOpts(unique_opts=UniqueOpts(by_args=True)), kind="many")
    assert again.unique_skipped_as_duplicate and again.job.id == third.id


def test_claim_and_completion_statements(dj: str, pg_url: str, pg_schema: str) -> None:
    driver = DjangoDriver(schema=pg_schema)
    client = riverboat.Client(driver)
    ids = [client.insert({"i": i}, kind="claim").job.id for i in range(3)]
    dialect = driver.dialect
    driver.fetch(dialect.queue_create_or_set_updated_at("default"))
    claimed = dialect.decode_jobs(
        driver.fetch(dialect.job_get_available(queue="default", max_to_lock=10, client_id="dj"))
    )
    assert sorted(j.id for j in claimed) == ids
    assert all(j.state == JobState.RUNNING and j.attempted_by == ["dj"] for j in claimed)
    updates = [
        JobStateUpdate(
            ids[0], JobState.COMPLETED, finalized=True, metadata_updates='{"output": 7}'
        ),
        JobStateUpdate(
            ids[1],
            JobState.RETRYABLE,
            error='{"at":"2024-01-01T00:00:00Z","attempt":1,"error":"x","trace":""}',
            scheduled_at=datetime.now(UTC) + timedelta(minutes=5),
        ),
        JobStateUpdate(ids[2], JobState.AVAILABLE, attempt=0, scheduled_at=datetime.now(UTC)),
    ]
    done = dialect.decode_jobs(driver.fetch(dialect.job_set_state_if_running_many(updates)))
    by_id = {j.id: j for j in done}
    assert by_id[ids[0]].state == JobState.COMPLETED and by_id[ids[0]].metadata["output"] == 7
    assert by_id[ids[1]].state == JobState.RETRYABLE and by_id[ids[1]].errors[0].error == "x"
    assert by_id[ids[2]].state == JobState.AVAILABLE and by_id[ids[2]].attempt == 0
    # No longer running: only the metadata merge still applies (River's rule).
    assert driver.execute(dialect.job_set_state_if_running_many(updates, returning=False)) == 1
    assert driver.stats.by_query["job_set_state_if_running_many"] == 1


def test_admin_operations(dj: str, pg_schema: str) -> None:
    client = riverboat.Client(DjangoDriver(schema=pg_schema))
    job = client.insert({"a": 1}, kind="admin").job
    assert [j.id for j in client.job_list().jobs] == [job.id]
    assert client.job_cancel(job.id).state == JobState.CANCELLED
    assert client.job_retry(job.id).state == JobState.AVAILABLE
    assert client.job_delete(job.id).id == job.id
    client.driver.fetch(client.driver.dialect.queue_create_or_set_updated_at("q1"))
    assert client.queue_pause("q1")[0].paused_at is not None
    assert client.queue_resume("q1")[0].paused_at is None


def test_errors_are_translated_and_roll_back_the_savepoint(dj: str, pg_schema: str) -> None:
    driver = DjangoDriver(schema=pg_schema)
    with transaction.atomic():
        with pytest.raises(DriverError) as info:
            with driver.transaction() as tx:
                tx.execute(driver.dialect.job_get_by_id("not a number"))  # type: ignore[arg-type]
        assert info.value.__cause__ is not None
        assert driver.fetch(driver.dialect.stmt("ping")) == [(1,)]


def test_a_lost_connection_is_a_driver_error(dj: str, pg_url: str, pg_schema: str) -> None:
    """The backend killed under Django's connection: the failing statement and every
    call after it (Django then finds its connection closed) raise DriverError, as the
    other drivers do, not Django's OperationalError."""
    import psycopg

    driver = DjangoDriver(schema=pg_schema)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    for _ in range(2):
        with pytest.raises(DriverError):
            driver.fetch(driver.dialect.stmt("ping"))
        with pytest.raises(DriverError):
            with driver.transaction() as tx:
                tx.execute(driver.dialect.stmt("ping"))
    connection.close()
    assert driver.fetch(driver.dialect.stmt("ping")) == [(1,)]


def test_execute_script_and_wrong_alias(dj: str, pg_url: str, pg_schema: str) -> None:
    driver = DjangoDriver(schema=pg_schema)
    driver.execute_script("CREATE TABLE scratch (a int); INSERT INTO scratch VALUES (1), (2)")
    assert rows(pg_url, pg_schema, "SELECT count(*) FROM scratch") == [(2,)]
    with pytest.raises(riverboat.InvalidInputError):
        DjangoDriver("nope")


def test_async_driver_from_django_settings(dj: str, pg_schema: str) -> None:
    import asyncio

    conninfo, prepare = libpq_params()
    assert "search_path" in conninfo and not prepare

    async def ping() -> object:
        adriver = DjangoDriver(schema=pg_schema).async_driver()
        try:
            rows_ = await adriver.fetch(adriver.dialect.stmt("current_schema"))
            return rows_[0][0]
        finally:
            await adriver.close()

    assert asyncio.run(ping()) == pg_schema


async def test_insert_async_helper(dj: str, pg_url: str, pg_schema: str) -> None:
    from asgiref.sync import sync_to_async
    from django.db import connections

    from riverboat.contrib.django import insert_async

    client = riverboat.Client(DjangoDriver(schema=pg_schema))
    try:
        result = await insert_async(client, {"a": 1}, kind="from_async")
    finally:  # the thread-sensitive executor's thread outlives the test
        await sync_to_async(connections.close_all)()
    assert result.job.kind == "from_async"
    assert job_count(pg_url, pg_schema, "from_async") == 1
