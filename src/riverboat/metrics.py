"""The metrics riverboat emits to ``metric_emit`` hooks (River's ``HookMetricEmit``).

A middleware with a plain ``metric_emit(metric)`` method gets, after every fetch a
producer makes (the claim of available jobs), a :class:`JobGetAvailableDurationMetric`
and then a :class:`JobGetAvailableCountMetric`, as River's producer emits them. The hook
runs on the runtime's event loop, in the fetch loop itself: keep it quick (hand the value
to an exporter, a queue, a counter) and free of I/O. Its exceptions are logged and
dropped, so a broken exporter can't stop a queue. With no such hook, the producer checks
one attribute for ``None`` and nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

__all__ = [
    "JobGetAvailableCountMetric",
    "JobGetAvailableDurationMetric",
    "Metric",
    "MetricName",
]


class MetricName(StrEnum):
    """River's metric names (``rivertype.MetricName``)."""

    JOB_GET_AVAILABLE_DURATION = "job_get_available_duration"
    JOB_GET_AVAILABLE_COUNT = "job_get_available_count"


@dataclass(slots=True, frozen=True)
class JobGetAvailableDurationMetric:
    """How long one fetch of ``queue`` took, in seconds (River's ``Duration``)."""

    name: ClassVar[MetricName] = MetricName.JOB_GET_AVAILABLE_DURATION
    queue: str
    duration: float


@dataclass(slots=True, frozen=True)
class JobGetAvailableCountMetric:
    """How many jobs one fetch of ``queue`` claimed (zero included)."""

    name: ClassVar[MetricName] = MetricName.JOB_GET_AVAILABLE_COUNT
    queue: str
    count: int


Metric = JobGetAvailableDurationMetric | JobGetAvailableCountMetric
