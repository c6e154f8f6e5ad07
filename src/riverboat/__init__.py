"""riverboat: a Python job queue on Postgres and SQLite that speaks River's schema."""

from riverboat._job import (
    AttemptError,
    InsertManyParams,
    InsertOpts,
    InsertResult,
    JobRow,
    JobState,
    UniqueOpts,
)
from riverboat.client import AsyncClient, Client
from riverboat.errors import (
    DriverError,
    InvalidArgsError,
    InvalidInputError,
    JobRunningError,
    MigrationError,
    MissingDependencyError,
    NotFoundError,
    RiverboatError,
    UnknownJobKindError,
)

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
    "JobRow",
    "JobRunningError",
    "JobState",
    "MigrationError",
    "MissingDependencyError",
    "NotFoundError",
    "RiverboatError",
    "UniqueOpts",
    "UnknownJobKindError",
]

__version__ = "0.1.0"
