"""``metric_emit`` hooks (River's ``HookMetricEmit``): each producer fetch reports its
duration and the jobs it claimed, sync and async, on Postgres and SQLite."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from riverboat import (
    AsyncClient,
    Client,
    InsertManyParams,
    InsertOpts,
    InvalidInputError,
    Job,
    QueueConfig,
    Workers,
)
from riverboat.metrics import (
    JobGetAvailableCountMetric,
    JobGetAvailableDurationMetric,
    Metric,
    MetricName,
)
from riverboat.middleware import metric_hook
from tests.runtime.dbs import Db, any_db  # noqa: F401


@dataclass
class Tick:
    kind: ClassVar[str] = "tick"
    n: int


def _workers(done: list[int]) -> Workers:
    workers = Workers()

    @workers.register(Tick)
    def tick(job: Job[Tick]) -> None:
        done.append(job.args.n)

    return workers


class Recorder:
    def __init__(self) -> None:
        self.metrics: list[Metric] = []

    def metric_emit(self, metric: Metric) -> None:
        self.metrics.append(metric)


def _check_pairs(metrics: list[Metric], queue: str, claimed: int) -> None:
    """Every fetch emits a duration then a count; the counts add up to the jobs run."""
    assert metrics and len(metrics) % 2 == 0
    durations = [m for m in metrics[0::2] if isinstance(m, JobGetAvailableDurationMetric)]
    counts = [m for m in metrics[1::2] if isinstance(m, JobGetAvailableCountMetric)]
    assert len(durations) == len(counts) == len(metrics) // 2
    assert all(m.queue == queue for m in metrics)
    assert all(0 <= m.duration < 60 for m in durations)
    assert sum(m.count for m in counts) == claimed
    assert durations[0].name == MetricName.JOB_GET_AVAILABLE_DURATION
    assert MetricName.JOB_GET_AVAILABLE_DURATION.value == "job_get_available_duration"
    assert counts[0].name == MetricName.JOB_GET_AVAILABLE_COUNT
    assert MetricName.JOB_GET_AVAILABLE_COUNT.value == "job_get_available_count"


async def test_async_client_emits_fetch_metrics(any_db: Db) -> None:  # noqa: F811
    done: list[int] = []
    recorder = Recorder()
    async with AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={"metered": QueueConfig(max_workers=5)},
        workers=_workers(done),
        middleware=[recorder],
    ) as client:
        await client.insert_many(
            [InsertManyParams(Tick(n), InsertOpts(queue="metered")) for n in (1, 2, 3)]
        )
        await client.run_until_idle()
    assert sorted(done) == [1, 2, 3]
    _check_pairs(recorder.metrics, "metered", 3)


def test_sync_client_metric_hook_function(any_db: Db) -> None:  # noqa: F811
    done: list[int] = []
    seen: list[Metric] = []
    with Client(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=_workers(done),
        middleware=[metric_hook(seen.append)],
    ) as client:
        client.insert(Tick(7))
        client.run_until_idle()
    assert done == [7]
    _check_pairs(seen, "default", 1)


async def test_a_failing_hook_is_logged_and_the_queue_keeps_working(
    any_db: Db,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    done: list[int] = []
    after: list[Metric] = []

    def broken(metric: Metric) -> None:
        raise RuntimeError("exporter down")

    async with AsyncClient(
        any_db.url,
        schema=any_db.schema,
        queues={"default": QueueConfig()},
        workers=_workers(done),
        middleware=[metric_hook(broken), metric_hook(after.append)],
    ) as client:
        with caplog.at_level(logging.ERROR, logger="riverboat.middleware"):
            await client.insert(Tick(1))
            await client.run_until_idle()
    assert done == [1]
    _check_pairs(after, "default", 1)  # the next hook still got every metric
    assert "exporter down" in caplog.text


async def test_no_hook_leaves_the_producer_plain(sqlite_url: str) -> None:
    async with AsyncClient(
        sqlite_url, queues={"default": QueueConfig()}, workers=_workers([])
    ) as client:
        await client.start()
        assert client.runtime.producers["default"].fetch_metrics is None


def test_an_async_metric_emit_is_refused(sqlite_url: str) -> None:
    class AsyncHook:
        async def metric_emit(self, metric: Any) -> None: ...

    with pytest.raises(InvalidInputError, match="metric_emit must be a plain def"):
        AsyncClient(sqlite_url, middleware=[AsyncHook()])
