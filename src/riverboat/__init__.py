"""riverboat: a Python job queue on Postgres and SQLite that speaks River's schema."""

import logging as _logging

from riverboat import _admin, workflow
from riverboat._admin import *  # noqa: F403 (its __all__ joins ours below)
from riverboat._fleet import WorkerInfo, WorkerQueue
from riverboat._job import (
    AttemptError,
    InsertManyParams,
    InsertOpts,
    InsertResult,
    JobRow,
    JobState,
    RawArgs,
    UniqueOpts,
)
from riverboat._periodic import PeriodicJobRecord
from riverboat._queue import QueueRow
from riverboat.client import AsyncClient, Client, ClientOptions
from riverboat.error_handler import ErrorHandlerResult
from riverboat.errors import (
    DriverError,
    InvalidArgsError,
    InvalidInputError,
    JobRunningError,
    MigrationError,
    MissingDependencyError,
    NotFoundError,
    NotMigratedError,
    NotSupportedError,
    RiverboatError,
    UnknownJobKindError,
    WaitTimeoutError,
)
from riverboat.flow import ConcurrencyLimit, LimitUse, RateLimit
from riverboat.runtime.elector import ElectorConfig
from riverboat.runtime.events import Event, EventKind, JobStatistics, Subscription
from riverboat.runtime.maintenance import MaintenanceConfig, PeriodicJob
from riverboat.runtime.maintenance.periodic import NEVER, PeriodicJobs
from riverboat.runtime.outcomes import RetryPolicy
from riverboat.runtime.producer import QueueConfig
from riverboat.runtime.sync_events import SyncSubscription
from riverboat.runtime.worker import (
    Job,
    JobCancel,
    JobSnooze,
    Worker,
    Workers,
    record_output,
    set_metadata,
)
from riverboat.workflow import *  # noqa: F403 (its __all__ joins ours below)

__all__ = [
    "NEVER",
    "AsyncClient",
    "AttemptError",
    "Client",
    "ClientOptions",
    "ConcurrencyLimit",
    "DriverError",
    "ElectorConfig",
    "ErrorHandlerResult",
    "Event",
    "EventKind",
    "InsertManyParams",
    "InsertOpts",
    "InsertResult",
    "InvalidArgsError",
    "InvalidInputError",
    "Job",
    "JobCancel",
    "JobRow",
    "JobRunningError",
    "JobSnooze",
    "JobState",
    "JobStatistics",
    "LimitUse",
    "MaintenanceConfig",
    "MigrationError",
    "MissingDependencyError",
    "NotFoundError",
    "NotMigratedError",
    "NotSupportedError",
    "PeriodicJob",
    "PeriodicJobRecord",
    "PeriodicJobs",
    "QueueConfig",
    "QueueRow",
    "RateLimit",
    "RawArgs",
    "RetryPolicy",
    "RiverboatError",
    "Subscription",
    "SyncSubscription",
    "UniqueOpts",
    "UnknownJobKindError",
    "WaitTimeoutError",
    "Worker",
    "WorkerInfo",
    "WorkerQueue",
    "Workers",
    "record_output",
    "set_metadata",
]
# The admin's option and result types are public, and so is the workflow API: their
# modules list them.
__all__ += _admin.__all__
__all__ += workflow.__all__

__version__ = "0.1.0"

# The public names live in private modules; they report the package as their home, so
# reprs, tracebacks and docs say riverboat.Client, not riverboat.client.Client (pickle
# still finds them: every one is importable from here).
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or callable(_obj):
        _obj.__module__ = __name__
del _name, _obj

# A library logs; the application decides where it goes. Without this, Python's
# last-resort handler would print riverboat's warnings to stderr in programs that never
# configured logging (`riverboat worker` configures it).
_logging.getLogger("riverboat").addHandler(_logging.NullHandler())
