"""Mistakes in building a client fail where they are written, with a clear error, on
Postgres and SQLite: the wrong kind of driver, a schema the driver would ignore, a
misspelt option; a failed embedded start leaves no thread behind; AsyncClient.close()
stops a running runtime as Client.close() does."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import riverboat
from riverboat import (
    InvalidInputError,
    Job,
    MaintenanceConfig,
    MigrationError,
    QueueConfig,
    Workers,
)


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    return request.getfixturevalue("sqlite_url"), None


def _drivers(url: str, schema: str | None) -> tuple[Any, Any]:
    """A sync and an async driver on the database."""
    if schema is None:
        from riverboat.drivers.sqlite import AsyncSqliteDriver, SqliteDriver

        return SqliteDriver(url), AsyncSqliteDriver(url)
    from riverboat.drivers.psycopg import AsyncPsycopgDriver, PsycopgDriver

    return PsycopgDriver(url, schema=schema), AsyncPsycopgDriver(url, schema=schema)


async def test_a_client_refuses_the_other_kind_of_driver(db: tuple[str, str | None]) -> None:
    sync_driver, async_driver = _drivers(*db)
    try:
        with pytest.raises(
            InvalidInputError, match=r"is an async driver; use riverboat\.AsyncClient"
        ):
            riverboat.Client(async_driver)
        with pytest.raises(InvalidInputError, match="is a sync driver; AsyncClient needs"):
            riverboat.AsyncClient(sync_driver)
        with pytest.raises(InvalidInputError, match="must be a database URL or a riverboat driver"):
            riverboat.Client(object())  # type: ignore[arg-type]
        # The right pairs work.
        assert riverboat.Client(sync_driver).insert({"n": 1}, kind="guard").job.id > 0
        assert (await riverboat.AsyncClient(async_driver).insert({"n": 2}, kind="guard")).job.id
    finally:
        sync_driver.close()
        await async_driver.close()


async def test_schema_beside_a_driver_must_match_it(db: tuple[str, str | None]) -> None:
    url, schema = db
    sync_driver, async_driver = _drivers(url, schema)
    try:
        with pytest.raises(InvalidInputError, match="pass schema= to") as info:
            riverboat.Client(sync_driver, schema="elsewhere")
        assert info.value.field == "schema"
        with pytest.raises(InvalidInputError, match="differs from the driver's schema"):
            riverboat.AsyncClient(async_driver, schema="elsewhere")
        # Saying the driver's own schema again is fine.
        assert (
            riverboat.Client(sync_driver, schema=sync_driver.dialect.schema).driver is sync_driver
        )
    finally:
        sync_driver.close()
        await async_driver.close()


def test_a_misspelt_option_fails_when_the_client_is_built(db: tuple[str, str | None]) -> None:
    url, schema = db
    with pytest.raises(InvalidInputError, match="did you mean 'job_timeout'") as info:
        riverboat.Client(url, schema=schema, queues={"default": QueueConfig()}, job_timout=5)  # type: ignore[call-arg]
    assert info.value.field == "job_timout"
    # A real option still passes through to the embedded runtime.
    with riverboat.Client(url, schema=schema, queues={"default": QueueConfig()}, job_timeout=5):
        pass


@pytest.mark.parametrize("options", [{"fetch_coldown": 0.01}, {"max_attempt": 3}, {"colour": 1}])
async def test_a_misspelt_option_fails_when_the_async_client_is_built(
    db: tuple[str, str | None], options: dict[str, Any]
) -> None:
    url, schema = db
    with pytest.raises(InvalidInputError, match="is not a Client option") as info:
        riverboat.AsyncClient(url, schema=schema, **options)
    (name,) = options
    assert info.value.field == name
    if name != "colour":
        assert "did you mean" in str(info.value)


# Values of the right name but the wrong kind: each fails when the client is built,
# naming its field, as River's NewClient returns an error. The sync client checked its
# runtime's options only at start(), and a list of queues or a dict for maintenance was
# a Python error from inside either client.
_BAD_VALUES: list[tuple[str, dict[str, Any]]] = [
    ("queues", {"queues": ["default"]}),
    ("queues['default'].max_workers", {"queues": {"default": QueueConfig(max_workers=0)}}),
    ("queues['Bad Name']", {"queues": {"Bad Name": QueueConfig()}}),
    ("maintenance", {"maintenance": {"cleaner_interval": 5}}),
    ("retry_policy", {"retry_policy": 3}),
    ("soft_stop_timeout", {"soft_stop_timeout": -5}),
    ("dead_after", {"dead_after": 0.0}),
    ("fetch_cooldown", {"fetch_cooldown": float("nan")}),
    # Checked only when the client won leadership: start() failed after its producers
    # had claimed and run jobs, which stayed running until rescued and ran again.
    (
        "maintenance.rescue_stuck_jobs_after",
        {"maintenance": MaintenanceConfig(rescue_stuck_jobs_after=1.0)},
    ),
    ("id", {"id": "worker\x00one"}),
    ("max_attempts", {"max_attempts": 40_000}),
]


@pytest.mark.parametrize("make", ["Client", "AsyncClient"])
@pytest.mark.parametrize(("field", "options"), _BAD_VALUES, ids=[f for f, _ in _BAD_VALUES])
async def test_a_bad_option_value_fails_when_either_client_is_built(
    db: tuple[str, str | None], make: str, field: str, options: dict[str, Any]
) -> None:
    url, schema = db
    with pytest.raises(InvalidInputError) as info:
        getattr(riverboat, make)(
            url, schema=schema, **{"queues": {"default": QueueConfig()}, **options}
        )
    assert info.value.field == field


def _runtime_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "riverboat-runtime"]


def test_a_failed_embedded_start_leaves_no_thread(
    db: tuple[str, str | None], tmp_path: Path
) -> None:
    url, schema = db
    if schema is None:
        url = f"sqlite:///{tmp_path / 'never_migrated.sqlite3'}"  # start() refuses it
    else:
        schema = "never_migrated"  # no such schema: start() refuses it
    workers = Workers()

    @workers.register("guard")
    def guard(job: Job[Any]) -> None:
        pass

    before = len(_runtime_threads())
    client = riverboat.Client(
        url, schema=schema, queues={"default": QueueConfig()}, workers=workers
    )
    with pytest.raises((MigrationError, riverboat.RiverboatError)):
        client.start()
    assert len(_runtime_threads()) == before
    assert client.async_client is None
    client.close()


async def test_async_close_stops_a_running_runtime(db: tuple[str, str | None]) -> None:
    url, schema = db
    started, release = asyncio.Event(), asyncio.Event()
    workers = Workers()

    @workers.register("guard")
    async def guard(job: Job[Any]) -> None:
        started.set()
        await release.wait()

    client = riverboat.AsyncClient(
        url,
        schema=schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
        soft_stop_timeout=0.2,
    )
    job_id = (await client.insert({}, kind="guard")).job.id
    await client.start()
    await asyncio.wait_for(started.wait(), 10)
    await client.close()
    assert not client.runtime.started
    # The soft stop handed the still-running job back before the driver closed.
    with riverboat.Client(url, schema=schema) as reader:
        assert reader.job_get(job_id).state == "available"


async def test_owns_driver_closes_the_driver_with_the_client(
    db: tuple[str, str | None],
) -> None:
    closed: list[str] = []
    sync_driver, async_driver = _drivers(*db)
    sync_close, async_close = sync_driver.close, async_driver.close

    def close_sync() -> None:
        closed.append("sync")
        sync_close()

    async def close_async() -> None:
        closed.append("async")
        await async_close()

    sync_driver.close, async_driver.close = close_sync, close_async
    riverboat.Client(sync_driver).close()
    async with riverboat.AsyncClient(async_driver):
        pass
    assert closed == []  # a driver passed in is the caller's to close ...
    riverboat.Client(sync_driver, owns_driver=True).close()
    async with riverboat.AsyncClient(async_driver, owns_driver=True):
        pass
    assert closed == ["sync", "async"]  # ... unless the client is told it owns it


def _queue(**settings: float) -> dict[str, Any]:
    return {"queues": {"default": QueueConfig(**settings)}}  # type: ignore[arg-type]


# Each duration setting: its name as the error gives it, and the client options that set
# it to a value.
_DURATIONS: list[tuple[str, Any]] = [
    ("queues['default'].fetch_cooldown", lambda v: _queue(fetch_cooldown=v)),
    ("queues['default'].fetch_poll_interval", lambda v: _queue(fetch_poll_interval=v)),
    *(
        (name, lambda v, name=name: {**_queue(), name: v})
        for name in (
            "fetch_cooldown",
            "fetch_poll_interval",
            "job_timeout",
            "soft_stop_timeout",
            "db_call_timeout",
            "heartbeat_interval",
        )
    ),
]


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize(("name", "options"), _DURATIONS)
async def test_a_duration_must_be_a_finite_number_of_seconds(
    sqlite_url: str, name: str, options: Any, value: float
) -> None:
    """NaN passed every check written as a comparison (each is false with it), and
    infinity reached datetime arithmetic; both are refused when the client is built."""
    with pytest.raises(InvalidInputError) as info:
        riverboat.AsyncClient(sqlite_url, workers=Workers(), **options(value))
    assert info.value.field == name


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_leadership_and_maintenance_durations_must_be_finite(value: float) -> None:
    from riverboat import ElectorConfig, MaintenanceConfig

    with pytest.raises(InvalidInputError, match=r"elector\.ttl"):
        ElectorConfig(ttl=value)
    with pytest.raises(InvalidInputError, match=r"elector\.elect_jitter"):
        ElectorConfig(elect_jitter=value)
    with pytest.raises(InvalidInputError, match=r"maintenance\.rescue_stuck_jobs_after"):
        MaintenanceConfig(rescue_stuck_jobs_after=value)


def test_the_sync_clients_loop_goes_on_after_a_callback_raises_system_exit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """asyncio lets a SystemExit raised in a callback end run_forever; the sync client's
    loop thread then died silently and every call waited for it forever."""
    from riverboat.client import _run_surviving_exits

    loop = asyncio.new_event_loop()
    ran_after: list[bool] = []

    def exits() -> None:
        raise SystemExit(3)

    def after() -> None:
        ran_after.append(True)
        loop.stop()

    loop.call_soon(exits)
    loop.call_soon(after)
    try:
        _run_surviving_exits(loop)
    finally:
        loop.close()
    assert ran_after == [True]
    assert "SystemExit raised inside the client's event loop" in caplog.text
