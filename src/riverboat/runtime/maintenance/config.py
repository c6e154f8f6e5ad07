"""The leader's maintenance settings (:class:`MaintenanceConfig`, River's defaults), checked
when they are made. Below the services: they read it (``MaintenanceContext.config``) and
it imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import cast

from riverboat._seconds import is_seconds
from riverboat.errors import InvalidInputError
from riverboat.runtime.elector import ElectorConfig
from riverboat.runtime.maintenance.periodic_job import PeriodicJob

__all__ = ["MaintenanceConfig", "next_midnight_utc", "reindexer_schedule", "validate_index_names"]

_NAME_MAX = 63  # Postgres identifiers (NAMEDATALEN - 1)

HOUR = 3600.0
DAY = 24 * HOUR
# River's JobTimeoutDefault; the rescue delay grows by the job timeout only when the
# user chose another one (River adds JobTimeout when it was set explicitly).
JOB_TIMEOUT_DEFAULT = 60.0

_DURATIONS = (
    "cleaner_interval",
    "cancelled_job_retention",
    "completed_job_retention",
    "discarded_job_retention",
    "rescuer_interval",
    "rescue_stuck_jobs_after",
    "dead_client_check_interval",
    "scheduler_interval",
    "queue_cleaner_interval",
    "queue_retention",
    "error_backoff_base",
    "error_backoff_max",
    "start_jitter",
    "batch_pause_min",
    "batch_pause_max",
    "run_timeout",
)
_MAY_BE_NONE = {"cancelled_job_retention", "completed_job_retention", "discarded_job_retention"}
_MAY_BE_ZERO = {"start_jitter", "batch_pause_min", "batch_pause_max"}


@dataclass(slots=True, frozen=True)
class MaintenanceConfig:
    """Leader election and maintenance settings; the defaults are River's.

    Durations are seconds or ``timedelta``. A retention of ``None`` keeps jobs in that
    state forever. ``rescue_stuck_jobs_after=None`` means River's default: 1 h, or the
    client's job timeout + 1 h when a non-default job timeout is set.
    """

    elector: ElectorConfig = field(default_factory=ElectorConfig)
    cleaner_interval: float = 30.0
    cancelled_job_retention: float | None = DAY
    completed_job_retention: float | None = DAY
    discarded_job_retention: float | None = 7 * DAY
    cleaner_queues_excluded: Sequence[str] | None = None
    rescuer_interval: float = 30.0
    rescue_stuck_jobs_after: float | None = None
    # How often the leader looks for clients whose registry lease ran out (runtime/
    # registry.py) and makes their running jobs available again.
    dead_client_check_interval: float = 2.0
    scheduler_interval: float = 5.0
    queue_cleaner_interval: float = HOUR
    queue_retention: float = DAY
    batch_size: int = 10_000
    # riverboat's error backoff per service: base, doubling, capped; ±10%.
    error_backoff_base: float = 1.0
    error_backoff_max: float = 64.0
    # Each service waits a random 0..start_jitter before its first run (River: 1 s).
    start_jitter: float = 1.0
    # Pause between full batches (River: 50 ms to 1 s) and a run's time limit (30 s).
    batch_pause_min: float = 0.05
    batch_pause_max: float = 1.0
    run_timeout: float = 30.0
    # The reindexer (Postgres): River's Config.ReindexerIndexNames (None: River's
    # default list; [] rebuilds nothing), ReindexerSchedule (None: midnight UTC daily;
    # or a cron expression, an interval, or a function from a time to the next run) and
    # ReindexerTimeout per index (-1 or None: no limit). reindexer_enabled=False turns it
    # off entirely.
    reindexer_enabled: bool = True
    reindexer_index_names: Sequence[str] | None = None
    reindexer_schedule: str | timedelta | float | Callable[[datetime], datetime] | None = None
    reindexer_timeout: float | None = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.elector, ElectorConfig):
            raise InvalidInputError("maintenance.elector", "must be an ElectorConfig")
        for name in _DURATIONS:
            value = getattr(self, name)
            if value is None and (name in _MAY_BE_NONE or name == "rescue_stuck_jobs_after"):
                continue
            if isinstance(value, timedelta):
                value = value.total_seconds()
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidInputError(f"maintenance.{name}", "must be seconds or a timedelta")
            if not is_seconds(value) or (value == 0 and name not in _MAY_BE_ZERO):
                raise InvalidInputError(f"maintenance.{name}", "must be positive and finite")
            object.__setattr__(self, name, float(value))
        if self.batch_pause_max < self.batch_pause_min:
            raise InvalidInputError("maintenance.batch_pause_max", "must be ≥ batch_pause_min")
        if (
            isinstance(self.batch_size, bool)
            or not isinstance(self.batch_size, int)
            or self.batch_size < 1
        ):
            raise InvalidInputError("maintenance.batch_size", "must be a positive int")
        if self.cleaner_queues_excluded is not None:
            object.__setattr__(self, "cleaner_queues_excluded", list(self.cleaner_queues_excluded))
        self._check_reindexer()

    def _check_reindexer(self) -> None:
        if not isinstance(self.reindexer_enabled, bool):
            raise InvalidInputError("maintenance.reindexer_enabled", "must be True or False")
        if self.reindexer_index_names is not None:
            names = list(validate_index_names(self.reindexer_index_names))
            object.__setattr__(self, "reindexer_index_names", names)
        timeout = self.reindexer_timeout
        if isinstance(timeout, timedelta):
            timeout = timeout.total_seconds()
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise InvalidInputError(
                    "maintenance.reindexer_timeout", "must be seconds, a timedelta, -1 or None"
                )
            if timeout <= 0 and timeout != -1:
                raise InvalidInputError(
                    "maintenance.reindexer_timeout", "must be positive (or -1/None: no limit)"
                )
            timeout = float(timeout)
        object.__setattr__(self, "reindexer_timeout", timeout)
        reindexer_schedule(self.reindexer_schedule)  # a bad cron expression fails here

    def rescue_after(self, job_timeout: float | None) -> float:
        """The running time after which a job counts as stuck."""
        timeout = job_timeout if job_timeout is not None and job_timeout > 0 else 0.0
        if self.rescue_stuck_jobs_after is not None:
            if timeout and self.rescue_stuck_jobs_after < timeout:
                raise InvalidInputError(
                    "maintenance.rescue_stuck_jobs_after", "must not be less than job_timeout"
                )
            return self.rescue_stuck_jobs_after
        if timeout and timeout != JOB_TIMEOUT_DEFAULT:
            return timeout + HOUR
        return HOUR


# -- the reindexer's settings -----------------------------------------------------------


def next_midnight_utc(moment: datetime) -> datetime:
    """River's default reindexer schedule: the first midnight UTC after ``moment``."""
    day = (moment.astimezone(UTC) + timedelta(days=1)).date()
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def reindexer_schedule(
    schedule: str | timedelta | float | Callable[[datetime], datetime] | None,
) -> Callable[[datetime], datetime]:
    """``schedule`` as a function from a time to the next run after it.

    ``None`` is River's default (midnight UTC daily); a cron expression or an interval
    is read as :class:`~riverboat.PeriodicJob` reads it; a callable is used as it is
    (River's ``PeriodicSchedule.Next``).
    """
    if schedule is None:
        return next_midnight_utc
    if callable(schedule):
        return schedule
    # Cron and intervals always have a next tick (only NEVER or custom ones return None).
    return cast("Callable[[datetime], datetime]", PeriodicJob(schedule, lambda: None).next_after)


def validate_index_names(names: object) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise InvalidInputError("maintenance.reindexer_index_names", "must be a list of names")
    for name in names:
        if not isinstance(name, str) or not name or len(name) > _NAME_MAX or "\0" in name:
            raise InvalidInputError(
                "maintenance.reindexer_index_names",
                f"{name!r} is not an index name (1 to {_NAME_MAX} characters)",
            )
    return tuple(names)
