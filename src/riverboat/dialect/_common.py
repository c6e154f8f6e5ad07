"""SQL both dialects write the same way: the scheduler's rule for unique jobs that fall
due together. (The job and queue column lists are derived from the row contracts in
:mod:`riverboat.dialect._rows`.)
"""

from __future__ import annotations

__all__ = ["UNIQUE_ROW_NUMBER"]


# A due job's place among the jobs of the scheduler's batch that share its unique key, in
# River's scheduling order (priority, scheduled_at, id): the first may be promoted, later
# ones are discarded as duplicates. NULL for a job that is not unique.
UNIQUE_ROW_NUMBER = """CASE WHEN unique_key IS NOT NULL AND unique_states IS NOT NULL
                THEN row_number() OVER (PARTITION BY unique_key
                                        ORDER BY priority, scheduled_at, id)
           END AS row_num"""
