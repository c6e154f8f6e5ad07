"""Prometheus metrics for a worker process, with the ``prometheus-client`` library.

::

    from riverboat.contrib.prometheus import PrometheusMiddleware, start_metrics_server

    metrics = PrometheusMiddleware()
    client = AsyncClient(url, queues=..., workers=..., middleware=[metrics])
    start_metrics_server(9100)  # or `riverboat worker app:client --metrics-port 9100`

Exposed (``namespace`` ``riverboat`` by default):

* ``riverboat_jobs_inserted_total{kind,queue}``: jobs this process inserted;
* ``riverboat_jobs_worked_total{kind,queue,outcome}``: outcome is completed, failed,
  snoozed, cancelled or interrupted;
* ``riverboat_job_duration_seconds{kind,queue}`` and
  ``riverboat_job_queue_latency_seconds{queue}`` (``scheduled_at`` to start) histograms;
* ``riverboat_jobs_running{queue}``: this process's running jobs;
* ``riverboat_producer_claim_size{queue}``: jobs claimed per fetch (histogram);
* ``riverboat_leader``: 1 while this process is the elected leader;
* ``riverboat_queue_jobs{queue,state}``: available and running jobs per queue in the
  whole database, sampled by the leader only (so a scrape of every worker counts them
  once) with one grouped COUNT at most every ``sample_interval`` seconds.

Needs the ``prometheus`` extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from riverboat.errors import DriverError, MissingDependencyError

try:
    import prometheus_client
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError("prometheus_client", "prometheus", exc) from exc

from riverboat.middleware import InsertingJob, outcome_of
from riverboat.runtime.worker import Job

if TYPE_CHECKING:
    from riverboat.client import AsyncClient
    from riverboat.runtime.runner import Runtime

__all__ = ["PrometheusMiddleware", "instrument", "start_metrics_server"]

log = logging.getLogger("riverboat.prometheus")

SAMPLED_STATES = ("available", "running")
_CLAIM_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)


class PrometheusMiddleware:
    """Counters, histograms and gauges for one process; ``registry`` defaults to
    prometheus-client's global one (make one per instance in tests)."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        namespace: str = "riverboat",
        sample_interval: float = 15.0,
    ) -> None:
        reg = registry if registry is not None else prometheus_client.REGISTRY
        self.registry = reg
        self.sample_interval = sample_interval
        ns = namespace
        self.inserted = Counter(
            "jobs_inserted", "Jobs inserted", ["kind", "queue"], namespace=ns, registry=reg
        )
        self.worked = Counter(
            "jobs_worked", "Jobs worked", ["kind", "queue", "outcome"], namespace=ns, registry=reg
        )
        self.duration = Histogram(
            "job_duration_seconds", "Job run time", ["kind", "queue"], namespace=ns, registry=reg
        )
        self.latency = Histogram(
            "job_queue_latency_seconds",
            "From scheduled_at to start",
            ["queue"],
            namespace=ns,
            registry=reg,
        )
        self.running = Gauge(
            "jobs_running", "Jobs running in this process", ["queue"], namespace=ns, registry=reg
        )
        self.claims = Histogram(
            "producer_claim_size",
            "Jobs claimed per fetch",
            ["queue"],
            namespace=ns,
            registry=reg,
            buckets=_CLAIM_BUCKETS,
        )
        self.leader = Gauge("leader", "1 while this process leads", namespace=ns, registry=reg)
        self.queue_jobs = Gauge(
            "queue_jobs",
            "Jobs per queue and state in the database (sampled by the leader)",
            ["queue", "state"],
            namespace=ns,
            registry=reg,
        )
        self.samples = 0
        self._attached: set[int] = set()

    def insert_begin(self, job: InsertingJob) -> None:
        self.inserted.labels(job.kind, job.queue).inc()

    async def work(self, job: Job[Any], call_next: Callable[[], Awaitable[None]]) -> None:
        queue = job.queue
        started = datetime.now(UTC)
        self.latency.labels(queue).observe(max(0.0, (started - job.scheduled_at).total_seconds()))
        running = self.running.labels(queue)
        running.inc()
        error: BaseException | None = None
        begun = time.perf_counter()
        try:
            await call_next()
        except BaseException as exc:
            error = exc
            raise
        finally:
            running.dec()
            self.duration.labels(job.kind, queue).observe(time.perf_counter() - begun)
            self.worked.labels(job.kind, queue, outcome_of(error)).inc()

    def attach(self, runtime: Runtime) -> None:
        """Called when the client's runtime starts: claim sizes, and the leader's sampler."""
        if id(runtime) in self._attached:
            return
        self._attached.add(id(runtime))
        for producer in runtime.producers.values():
            producer.claim_listeners.append(self._on_claim)
        runtime.add_service(_Sampler(self, runtime))

    def _on_claim(self, queue: str, count: int) -> None:
        self.claims.labels(queue).observe(count)


class _Sampler:
    """Counts jobs by queue and state every ``sample_interval`` seconds while leading."""

    def __init__(self, metrics: PrometheusMiddleware, runtime: Runtime) -> None:
        self._metrics = metrics
        self._runtime = runtime
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="riverboat-prometheus-sampler"
        )

    def _leading(self) -> bool:
        config = getattr(self._runtime, "config", None)
        if config is not None and not getattr(config, "leader_election", True):
            return False  # never runs for leader
        elector = getattr(self._runtime, "elector", None)
        return True if elector is None else bool(elector.is_leader)

    async def _run(self) -> None:
        metrics = self._metrics
        driver = self._runtime.driver
        counter = driver.dialect.job_count_by_queue_and_state
        while True:
            leading = self._leading()
            metrics.leader.set(1 if leading else 0)
            if not leading:
                metrics.queue_jobs.clear()  # only the leader reports the database's counts
            else:
                try:
                    rows = await driver.fetch(counter(SAMPLED_STATES))
                except DriverError as exc:
                    log.warning("prometheus: counting jobs by queue failed: %s", exc)
                else:
                    self._publish(rows)
            await asyncio.sleep(metrics.sample_interval)

    def _publish(self, rows: list[Any]) -> None:
        gauge = self._metrics.queue_jobs
        seen = {(str(queue), str(state)): int(count) for queue, state, count in rows}
        queues = {queue for queue, _ in seen} | set(self._runtime.producers)
        gauge.clear()
        for queue in queues:
            for state in SAMPLED_STATES:
                gauge.labels(queue, state).set(seen.get((queue, state), 0))
        self._metrics.samples += 1

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._metrics.leader.set(0)


def start_metrics_server(
    port: int, addr: str = "0.0.0.0", registry: CollectorRegistry | None = None
) -> Any:
    """Serve ``/metrics`` on a daemon thread; returns the HTTP server (``server_port``
    tells the port when ``port`` is 0, ``shutdown()`` stops it)."""
    reg = registry if registry is not None else prometheus_client.REGISTRY
    server, _thread = prometheus_client.start_http_server(port, addr, registry=reg)
    return server


def instrument(
    client: AsyncClient, metrics: PrometheusMiddleware | None = None
) -> PrometheusMiddleware:
    """Add a :class:`PrometheusMiddleware` to an AsyncClient that has not started yet
    (what ``riverboat worker --metrics-port`` does with the client it loads)."""
    mw = metrics if metrics is not None else PrometheusMiddleware()
    client.add_middleware(mw)
    return mw
