"""SQL both dialects write the same way.

The job columns every job-returning statement lists, in :class:`~riverboat._job.JobRow`'s
field order (each dialect's ``decode_job`` reads them by position; a dialect only says
which columns it reads through an expression: a cast, a clamp, a JSON check), and the
scheduler's rule for unique jobs that fall due together.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["JOB_COLUMNS", "UNIQUE_ROW_NUMBER", "select_job_columns"]

JOB_COLUMNS = (
    "id",
    "args",
    "attempt",
    "attempted_at",
    "attempted_by",
    "created_at",
    "errors",
    "finalized_at",
    "kind",
    "max_attempts",
    "metadata",
    "priority",
    "queue",
    "state",
    "scheduled_at",
    "tags",
    "unique_key",
    "unique_states",
)


def select_job_columns(read_as: Mapping[str, str], table: str = "") -> str:
    """``expression AS column`` for every job column, in :data:`JOB_COLUMNS` order.
    ``read_as`` maps a column to the SQL that reads it, with ``{c}`` for the (table
    qualified) column; any other column is read as it is stored."""
    prefix = f"{table}." if table else ""
    return ", ".join(
        f"{read_as[name].format(c=prefix + name) if name in read_as else prefix + name} AS {name}"
        for name in JOB_COLUMNS
    )


# A due job's place among the jobs of the scheduler's batch that share its unique key, in
# River's scheduling order (priority, scheduled_at, id): the first may be promoted, later
# ones are discarded as duplicates. NULL for a job that is not unique.
UNIQUE_ROW_NUMBER = """CASE WHEN unique_key IS NOT NULL AND unique_states IS NOT NULL
                THEN row_number() OVER (PARTITION BY unique_key
                                        ORDER BY priority, scheduled_at, id)
           END AS row_num"""
