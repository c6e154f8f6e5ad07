"""OpenTelemetry tracing and metrics for riverboat, as a middleware.

::

    from riverboat.contrib.otel import OtelMiddleware

    client = AsyncClient(url, queues=..., workers=..., middleware=[OtelMiddleware()])

Traces: each inserted job gets a ``riverboat.insert`` span (kind PRODUCER, ended at once:
it marks the enqueue, it does not time the SQL) whose context is stored in the job's
metadata under ``"riverboat:otel"`` with the globally configured propagator (W3C
``traceparent`` by default). The worker's ``riverboat.work`` span (kind CONSUMER) is
its child, so one trace runs from the request that enqueued a job to the worker that ran
it, across processes and machines. Inside a job, the work span is the current span, in
sync jobs' threads too.

Metrics (meter ``riverboat``): ``riverboat.jobs.worked`` and ``riverboat.jobs.failed``
counters, ``riverboat.job.duration`` and ``riverboat.job.queue_latency`` histograms (seconds,
``scheduled_at`` to start), and ``riverboat.producer.claim_size`` (jobs per fetch).
Attributes: ``riverboat.job.kind``, ``riverboat.queue``, ``riverboat.job.outcome``.

Needs the ``otel`` extra (``opentelemetry-api``); exporting needs an SDK set up by the
application, as usual with OpenTelemetry.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from riverboat.errors import MissingDependencyError

try:
    from opentelemetry import metrics, propagate, trace
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError("opentelemetry", "otel", exc) from exc

from riverboat.middleware import InsertingJob, outcome_of
from riverboat.runtime.worker import Job

if TYPE_CHECKING:
    from riverboat.runtime.runner import Runtime

__all__ = ["METADATA_KEY", "OtelMiddleware"]

METADATA_KEY = "riverboat:otel"
_SCOPE = "riverboat"


class OtelMiddleware:
    """Spans per insert and per job, trace context from insert to work, and metrics.

    ``tracer_provider`` and ``meter_provider`` default to the global ones.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self._tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self._worked = meter.create_counter(
            "riverboat.jobs.worked", unit="{job}", description="Jobs worked, by outcome"
        )
        self._failed = meter.create_counter(
            "riverboat.jobs.failed", unit="{job}", description="Job attempts that failed"
        )
        self._duration = meter.create_histogram(
            "riverboat.job.duration", unit="s", description="Time a job's worker ran"
        )
        self._latency = meter.create_histogram(
            "riverboat.job.queue_latency", unit="s", description="scheduled_at to start"
        )
        self._claims = meter.create_histogram(
            "riverboat.producer.claim_size", unit="{job}", description="Jobs claimed per fetch"
        )
        self._attached: set[int] = set()

    # -- inserts -----------------------------------------------------------------------
    def insert_begin(self, job: InsertingJob) -> None:
        span = self._tracer.start_span(
            "riverboat.insert",
            kind=trace.SpanKind.PRODUCER,
            attributes={
                "messaging.system": "riverboat",
                "messaging.operation.type": "create",
                "messaging.destination.name": job.queue,
                "riverboat.job.kind": job.kind,
                "riverboat.queue": job.queue,
                "riverboat.job.priority": job.priority,
            },
        )
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        span.end()
        if carrier:
            job.metadata[METADATA_KEY] = carrier

    # -- work --------------------------------------------------------------------------
    async def work(self, job: Job[Any], call_next: Callable[[], Awaitable[None]]) -> None:
        carrier = job.metadata.get(METADATA_KEY)
        parent = propagate.extract(carrier) if isinstance(carrier, dict) else None
        started = datetime.now(UTC)
        labels = {"riverboat.job.kind": job.kind, "riverboat.queue": job.queue}
        self._latency.record(max(0.0, (started - job.scheduled_at).total_seconds()), labels)
        span = self._tracer.start_span(
            "riverboat.work",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "messaging.system": "riverboat",
                "messaging.operation.type": "process",
                "messaging.destination.name": job.queue,
                "messaging.message.id": str(job.id),
                "riverboat.job.id": job.id,
                "riverboat.job.kind": job.kind,
                "riverboat.queue": job.queue,
                "riverboat.job.attempt": job.attempt,
            },
        )
        error: BaseException | None = None
        begun = time.perf_counter()
        try:
            with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                await call_next()
        except BaseException as exc:
            error = exc
            raise
        finally:
            outcome = outcome_of(error)
            span.set_attribute("riverboat.job.outcome", outcome)
            if outcome == "failed" and error is not None:
                span.record_exception(error)
                span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)))
                self._failed.add(1, labels)
            span.end()
            self._duration.record(time.perf_counter() - begun, labels)
            self._worked.add(1, {**labels, "riverboat.job.outcome": outcome})

    # -- the producer's claims ---------------------------------------------------------
    def attach(self, runtime: Runtime) -> None:
        """Called when the client's runtime starts: count each producer's claims."""
        for producer in runtime.producers.values():
            if id(producer) not in self._attached:
                self._attached.add(id(producer))
                producer.claim_listeners.append(self._on_claim)

    def _on_claim(self, queue: str, count: int) -> None:
        self._claims.record(count, {"riverboat.queue": queue})
