"""riverboat: a Python job queue on Postgres and SQLite that speaks River's schema."""

import logging as _logging

from riverboat._admin import JobListCursor, JobListResult
from riverboat._job import (
    AttemptError,
    InsertManyParams,
    InsertOpts,
    InsertResult,
    JobRow,
    JobState,
    UniqueOpts,
)
from riverboat._queue import QueueRow
from riverboat.client import AsyncClient, Client
from riverboat.errors import (
    DriverError,
    InvalidArgsError,
    InvalidInputError,
    JobRunningError,
    MigrationError,
    MissingDependencyError,
    NotFoundError,
    NotSupportedError,
    RiverboatError,
    UnknownJobKindError,
)
from riverboat.runtime.events import Event, EventKind, JobStatistics, Subscription
from riverboat.runtime.maintenance import MaintenanceConfig, PeriodicJob
from riverboat.runtime.producer import QueueConfig
from riverboat.runtime.retry import RetryPolicy
from riverboat.runtime.worker import (
    Job,
    JobCancel,
    JobSnooze,
    Worker,
    Workers,
    record_output,
    set_metadata,
)

__all__ = [
    "AsyncClient",
    "AttemptError",
    "Client",
    "DriverError",
    "Event",
    "EventKind",
    "InsertManyParams",
    "InsertOpts",
    "InsertResult",
    "InvalidArgsError",
    "InvalidInputError",
    "Job",
    "JobCancel",
    "JobListCursor",
    "JobListResult",
    "JobRow",
    "JobRunningError",
    "JobSnooze",
    "JobState",
    "JobStatistics",
    "MaintenanceConfig",
    "MigrationError",
    "MissingDependencyError",
    "NotFoundError",
    "NotSupportedError",
    "PeriodicJob",
    "QueueConfig",
    "QueueRow",
    "RetryPolicy",
    "RiverboatError",
    "Subscription",
    "UniqueOpts",
    "UnknownJobKindError",
    "Worker",
    "Workers",
    "record_output",
    "set_metadata",
]

__version__ = "0.1.0"

# A library logs; the application decides where it goes. Without this, Python's
# last-resort handler would print riverboat's warnings to stderr in programs that never
# configured logging (`riverboat worker` configures it).
_logging.getLogger("riverboat").addHandler(_logging.NullHandler())
