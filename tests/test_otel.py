"""OpenTelemetry: one trace from the request that inserts a job to the worker that runs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from riverboat import AsyncClient, Client, InsertOpts, Job, QueueConfig, Workers
from riverboat.contrib.otel import METADATA_KEY, OtelMiddleware

pytestmark = pytest.mark.asyncio


@dataclass
class Ping:
    kind: ClassVar[str] = "ping"
    n: int


@dataclass
class SyncPing:
    kind: ClassVar[str] = "sync_ping"
    n: int


def attributes(span: Any) -> Any:
    assert span.attributes is not None
    return span.attributes


def _metrics(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out[metric.name] = list(metric.data.data_points)
    return out


async def test_one_trace_from_insert_to_work(sqlite_url: str) -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    otel = OtelMiddleware(tracer_provider=tracer_provider, meter_provider=meter_provider)
    inside: dict[str, Any] = {}

    workers = Workers()

    @workers.register(Ping)
    async def ping(job: Job[Ping]) -> None:
        if job.args.n == 2:
            raise RuntimeError("flaky")
        inside["async"] = trace.get_current_span().get_span_context().trace_id

    @workers.register(SyncPing)
    def sync_ping(job: Job[SyncPing]) -> None:
        inside["sync"] = trace.get_current_span().get_span_context().trace_id

    # The web request: a sync client inserts inside the request's span.
    request_tracer = tracer_provider.get_tracer("web")
    with Client(sqlite_url, middleware=[otel]) as web:
        with request_tracer.start_as_current_span("POST /signup") as request_span:
            job = web.insert(Ping(1)).job
            sync_job = web.insert(SyncPing(1)).job
        # One attempt: a drain would otherwise also work its retry, due 1 s later.
        failing = web.insert(Ping(2), InsertOpts(max_attempts=1)).job
    trace_id = request_span.get_span_context().trace_id
    assert "traceparent" in job.metadata[METADATA_KEY]

    # The worker process: another client, the same middleware class.
    client = AsyncClient(
        sqlite_url,
        queues={"default": QueueConfig(max_workers=4)},
        workers=workers,
        middleware=[otel],
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    )
    await client.run_until_idle()
    await client.close()

    spans = exporter.get_finished_spans()
    work = {attributes(s)["riverboat.job.id"]: s for s in spans if s.name == "riverboat.work"}
    inserts = [s for s in spans if s.name == "riverboat.insert"]
    assert len(inserts) == 3
    for job_id in (job.id, sync_job.id):
        span = work[job_id]
        assert span.context.trace_id == trace_id
        assert span.kind == trace.SpanKind.CONSUMER
        assert span.parent is not None
        assert span.parent.span_id in {s.context.span_id for s in inserts}
        assert attributes(span)["riverboat.job.outcome"] == "completed"
    assert inside == {"async": trace_id, "sync": trace_id}
    failed_span = work[failing.id]
    assert failed_span.context.trace_id != trace_id  # inserted outside the request
    assert failed_span.status.status_code == trace.StatusCode.ERROR
    assert failed_span.events[0].name == "exception"

    points = _metrics(reader)
    worked = {
        (p.attributes["riverboat.job.kind"], p.attributes["riverboat.job.outcome"]): p.value
        for p in points["riverboat.jobs.worked"]
    }
    assert worked == {
        ("ping", "completed"): 1,
        ("sync_ping", "completed"): 1,
        ("ping", "failed"): 1,
    }
    assert sum(p.value for p in points["riverboat.jobs.failed"]) == 1
    assert sum(p.count for p in points["riverboat.job.duration"]) == 3
    assert sum(p.count for p in points["riverboat.job.queue_latency"]) == 3
    claims = points["riverboat.producer.claim_size"]
    assert sum(p.sum for p in claims) >= 3  # every job claimed once (and retried ones again)
