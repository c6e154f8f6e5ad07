"""Sync jobs that use the ORM hand their thread's Django connection back after every
job (the riverboat.contrib.django hook); without the hook, worker threads keep them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import riverboat
from riverboat import EventKind, QueueConfig
from riverboat.contrib.django.apps import install_connection_hook, uninstall_connection_hook
from riverboat.drivers.psycopg import AsyncPsycopgDriver
from riverboat.runtime.threads import AFTER_SYNC_JOB
from tests.django.helpers import backends, rows
from tests.waiting import wait_until_async

JOBS = 8


@pytest.fixture
def no_hook() -> Iterator[None]:
    uninstall_connection_hook()
    try:
        yield
    finally:
        install_connection_hook()


async def _work(
    pg_url: str, pg_schema: str, app_name: str, *, expect_closed: bool
) -> tuple[int, int]:
    """Run JOBS bump jobs on 4 worker threads; return (Django backends open after they
    completed while the runtime still runs, the counter).

    A closed connection's backend leaves pg_stat_activity a moment after the client
    closed it, so when ``expect_closed`` the count is polled until it reaches 0."""
    from tests.django.testapp import jobs

    await asyncio.to_thread(
        rows,
        pg_url,
        pg_schema,
        "INSERT INTO testapp_counter (name, n) VALUES ('c', 0) RETURNING id",
    )
    client = riverboat.AsyncClient(
        AsyncPsycopgDriver(pg_url, schema=pg_schema),  # the runtime's own connections
        queues={"default": QueueConfig(max_workers=4)},
        workers=jobs.workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.1,
    )
    # The fixture closed Django's schema-setup connection just before; its backend
    # leaves pg_stat_activity a moment later, so start counting once it has.
    await wait_until_async(
        lambda: asyncio.to_thread(lambda: backends(pg_url, app_name) == 0),
        timeout=5,
        what="the fixture's Django backend to go",
    )
    sub = client.subscribe(EventKind.JOB_COMPLETED)
    await client.start()
    try:
        await client.insert_many(
            [riverboat.InsertManyParams({"name": "c"}, kind="bump") for _ in range(JOBS)]
        )
        async with asyncio.timeout(20):
            for _ in range(JOBS):
                await sub.get()
        if expect_closed:
            await wait_until_async(
                lambda: asyncio.to_thread(lambda: backends(pg_url, app_name) == 0),
                timeout=5,
                what="the jobs' Django backends to go",
            )
        open_backends = await asyncio.to_thread(backends, pg_url, app_name)
    finally:
        await client.stop()
        await client.driver.close()
    counter = rows(pg_url, pg_schema, "SELECT n FROM testapp_counter WHERE name = 'c'")[0][0]
    return open_backends, int(counter)


async def test_orm_jobs_leave_no_connection_behind(dj: str, pg_url: str, pg_schema: str) -> None:
    from tests.django.testapp import jobs

    assert AFTER_SYNC_JOB, "the app's ready() installs the hook"
    open_backends, counter = await _work(pg_url, pg_schema, dj, expect_closed=True)
    assert counter == JOBS
    assert open_backends == 0
    # Every thread's connection object was closed at the end of its job.
    assert len(jobs.seen) == JOBS
    assert all(wrapper.connection is None for _, wrapper in jobs.seen)


async def test_without_the_hook_threads_keep_connections(
    dj: str, pg_url: str, pg_schema: str, no_hook: None
) -> None:
    # The control: proves the test above can see a leak.
    from tests.django.testapp import jobs

    try:
        open_backends, counter = await _work(pg_url, pg_schema, dj, expect_closed=False)
        assert counter == JOBS
        assert open_backends >= 1
        assert any(wrapper.connection is not None for _, wrapper in jobs.seen)
    finally:
        # Close the leaked connections here (their threads are gone), not in a later
        # test's garbage collection.
        for _, wrapper in jobs.seen:
            if wrapper.connection is not None:
                wrapper.connection.close()
                wrapper.connection = None


async def test_a_periodic_constructor_may_use_the_orm(dj: str, pg_url: str, pg_schema: str) -> None:
    """A sync constructor reading the ORM (which customers to bill, say): run on the
    runtime's event loop it raised Django's SynchronousOnlyOperation and the run was
    skipped; it runs in a thread, like a sync job."""
    from tests.django.testapp import jobs
    from tests.django.testapp.models import Counter

    await asyncio.to_thread(
        rows,
        pg_url,
        pg_schema,
        "INSERT INTO testapp_counter (name, n) VALUES ('periodic', 41) RETURNING id",
    )

    def bump_periodic() -> riverboat.InsertManyParams:
        counter = Counter.objects.get(name="periodic")
        return riverboat.InsertManyParams({"name": counter.name}, kind="bump")

    client = riverboat.AsyncClient(
        AsyncPsycopgDriver(pg_url, schema=pg_schema),
        queues={"default": QueueConfig(max_workers=2)},
        workers=jobs.workers,
        periodic_jobs=[riverboat.PeriodicJob(riverboat.NEVER, bump_periodic, run_on_start=True)],
    )
    sub = client.subscribe(EventKind.JOB_COMPLETED)
    await client.start()
    try:
        async with asyncio.timeout(20):
            event = await sub.get()
    finally:
        await client.stop()
        await client.driver.close()
    assert event.job is not None and event.job.kind == "bump"
    assert rows(pg_url, pg_schema, "SELECT n FROM testapp_counter WHERE name = 'periodic'") == [
        (42,)
    ]
