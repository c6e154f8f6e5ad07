"""Exceptions raised by riverboat.

Every exception riverboat raises on purpose derives from :class:`RiverboatError`::

    RiverboatError
    ├── InvalidInputError (also ValueError)      bad argument to a public API; names the field
    │   └── InvalidArgsError (also TypeError)    job args that cannot be encoded as a JSON object
    ├── NotFoundError                             job, queue or migration row missing
    ├── WaitTimeoutError (also TimeoutError)      job_wait/workflow_wait ran out of time
    ├── JobRunningError                           the operation is refused while the job runs
    ├── UnknownJobKindError                       no worker registered for a job's kind
    ├── DriverError                               a database error, translated at the driver
    │                                             boundary (the original is ``__cause__``)
    ├── MissingDependencyError (also ImportError) an optional extra is not installed
    ├── NotSupportedError (also NotImplementedError) the dialect lacks this operation
    └── MigrationError                            the schema is not at a version riverboat knows
        └── NotMigratedError (also DriverError)   a statement found River's tables missing

Driver errors keep the underlying library's exception as ``__cause__`` so callers can
still reach its details (SQLSTATE and so on).
"""

from __future__ import annotations

__all__ = [
    "DeadlineExceededError",
    "DriverError",
    "InvalidArgsError",
    "InvalidInputError",
    "JobRunningError",
    "MigrationError",
    "MissingDependencyError",
    "NotFoundError",
    "NotMigratedError",
    "NotSupportedError",
    "RiverboatError",
    "UnknownJobKindError",
    "WaitTimeoutError",
]


# What a callback of the user's (a work function's hooks, an error handler, a retry
# policy, a periodic job's constructor) may raise and riverboat takes as its failure:
# every Exception, and also sys.exit() and a KeyboardInterrupt it raises itself, which
# re-raised would end the event loop the client runs on. Never CancelledError: that is
# the client stopping the task.
CALLBACK_FAILURES: tuple[type[BaseException], ...] = (Exception, SystemExit, KeyboardInterrupt)


class RiverboatError(Exception):
    """Root of every exception riverboat raises on purpose."""


class InvalidInputError(RiverboatError, ValueError):
    """A public API was given a value it refuses; raised before anything is written.

    ``field`` names the offending parameter (``"queue"``, ``"opts.priority"``...).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class InvalidArgsError(InvalidInputError, TypeError):
    """Job args that are not a JSON object, or cannot be serialised."""


class NotFoundError(RiverboatError):
    """The job, queue or row the operation targets does not exist."""


class WaitTimeoutError(RiverboatError, TimeoutError):
    """``job_wait`` or ``workflow_wait`` gave up before the job (or workflow) finished;
    ``last`` is what was read last (a JobRow or a WorkflowInfo)."""

    def __init__(self, message: str, last: object) -> None:
        super().__init__(message)
        self.last = last


class JobRunningError(RiverboatError):
    """The operation is refused because the job is running (River's ErrJobRunning)."""


class NotSupportedError(RiverboatError, NotImplementedError):
    """The database's dialect does not implement this operation (yet); names it."""


class UnknownJobKindError(RiverboatError):
    """No worker is registered for the job's kind.

    The message matches River's so that error entries read the same from either runtime.
    """

    def __init__(self, kind: str) -> None:
        super().__init__(f"job kind is not registered in the client's Workers bundle: {kind}")
        self.kind = kind


class DriverError(RiverboatError):
    """A database error, translated at the driver boundary; the original is ``__cause__``."""


class DeadlineExceededError(DriverError):
    """A database call got no answer within its deadline (the runtime's
    ``db_call_timeout``); the connection it ran on was dropped, never reused."""


def install_hint(extra: str) -> str:
    """How to install an extra, as a command that works: riverboat is not on PyPI, so
    ``pip install 'riverboat[x]'`` finds nothing; a checkout (or a built wheel) does."""
    return f"pip install '.[{extra}]' in a riverboat checkout (the riverboat[{extra}] extra)"


class MissingDependencyError(RiverboatError, ImportError):
    """An optional dependency is missing or broken; the message names the extra to install.

    Pass the ``ImportError`` that was caught as ``cause``: when it is not the package
    itself that is missing (a broken install, a missing C library, a dependency of the
    package), the message says what failed instead of claiming the package is absent,
    and the error is kept as ``__cause__``.
    """

    def __init__(self, package: str, extra: str, cause: ImportError | None = None) -> None:
        install = install_hint(extra)
        if cause is None or _is_absent(package, cause):
            message = f"{package} is not installed; install it with: {install}"
        else:
            detail = " ".join(f"{type(cause).__name__}: {cause}".split())
            message = f"{package} failed to import ({detail}); reinstall it with: {install}"
        super().__init__(message)
        self.package = package
        self.extra = extra
        if cause is not None:
            self.__cause__ = cause


class MigrationError(RiverboatError):
    """The database schema is missing, too old or newer than this riverboat knows."""


def _is_absent(package: str, cause: ImportError) -> bool:
    # "No module named 'psycopg'" while importing psycopg (or psycopg_pool): truly absent.
    # Anything else (a missing libpq, a broken dependency) is a failure worth showing.
    missing = getattr(cause, "name", None)
    return isinstance(cause, ModuleNotFoundError) and missing == package.split(".")[0]


class NotMigratedError(DriverError, MigrationError):
    """A statement found River's tables (or the schema) missing: the database is not
    migrated. The message says to run ``riverboat migrate up``; the database's own error
    is ``__cause__``."""
