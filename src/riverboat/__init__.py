"""riverboat: a Python job queue on Postgres and SQLite that speaks River's schema."""

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
from riverboat.runtime.maintenance import MaintenanceConfig, PeriodicJob

__all__ = [
    "AsyncClient",
    "AttemptError",
    "Client",
    "DriverError",
    "InsertManyParams",
    "InsertOpts",
    "InsertResult",
    "InvalidArgsError",
    "InvalidInputError",
    "JobListCursor",
    "JobListResult",
    "JobRow",
    "JobRunningError",
    "JobState",
    "MaintenanceConfig",
    "MigrationError",
    "MissingDependencyError",
    "NotFoundError",
    "NotSupportedError",
    "PeriodicJob",
    "QueueRow",
    "RiverboatError",
    "UniqueOpts",
    "UnknownJobKindError",
]

__version__ = "0.1.0"
