"""The Python half of riverboat's durable periodic jobs (``riverboat_periodic_job``),
shared by both dialects: rows encoded and decoded once, and the upserts' rules written
once (the ``*_sql`` builders). A dialect's SQL lives in ``dialect/<name>_periodic.py``,
with the hooks below saying how it passes a batch of rows and reads a stored time."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from riverboat._periodic import PeriodicJobRecord
from riverboat._sql import Statement
from riverboat.dialect._part import DialectPart

__all__ = [
    "PeriodicJobDeclaration",
    "PeriodicJobWrite",
    "PeriodicStatements",
    "periodic_queries",
]


def periodic_queries(
    *, template: str, save_rows: str, declare_rows: str, now: str, in_ids: str
) -> dict[str, str]:
    """Every statement of the durable periodic jobs, from the dialect's pieces:
    ``template`` reads the template column as JSON text; ``save_rows`` selects a
    batch's (id, schedule, catch_up, next_run_at, last_run_at), ``declare_rows`` a
    batch's (id, schedule, catch_up, template); ``now`` is the current time and
    ``in_ids`` tests ``id`` against the ``:ids`` parameter.

    ``periodic_job_save``: one row per periodic job the leader advanced. Under an
    unchanged schedule next_run_at only moves forward, and last_run_at is kept when this
    write inserted nothing. A new schedule from the leader's own code (a deploy) replaces
    the stored one; but a row with a template was declared at runtime by a client
    (periodic_job_declare), maybe after the leader read it: that declaration wins, and
    the leader's write under the schedule it read is dropped (it starts the declared
    schedule at its next read). Stored times compare as times on both dialects (SQLite's
    are fixed-width UTC text).

    ``periodic_job_declare``: a client's periodic jobs, at its start or added at
    runtime: the latest declaration of an id defines it (schedule, catch-up, template),
    and clears a removal. A job declared again after its removal starts from its next
    tick (next_run_at cleared): the ticks while it was removed were paused on purpose,
    and catching them up inserted a run for each (up to 100) at once."""
    return {
        # The columns' order is what decoding expects.
        "periodic_job_list": f"""
SELECT id, schedule, catch_up, next_run_at, last_run_at, created_at, updated_at,
    {template}, removed_at
FROM <schema>riverboat_periodic_job
ORDER BY id
""",
        "periodic_job_save": f"""
INSERT INTO <schema>riverboat_periodic_job AS stored
    (id, schedule, catch_up, next_run_at, last_run_at)
{save_rows}
ON CONFLICT (id) DO UPDATE
SET schedule = excluded.schedule, catch_up = excluded.catch_up,
    next_run_at = excluded.next_run_at,
    last_run_at = coalesce(excluded.last_run_at, stored.last_run_at),
    updated_at = {now}
WHERE CASE WHEN stored.schedule <> excluded.schedule THEN stored.template IS NULL
           ELSE stored.next_run_at IS NULL
                OR excluded.next_run_at IS NULL
                OR stored.next_run_at <= excluded.next_run_at END
""",
        "periodic_job_declare": f"""
INSERT INTO <schema>riverboat_periodic_job AS stored (id, schedule, catch_up, template)
{declare_rows}
ON CONFLICT (id) DO UPDATE
SET schedule = excluded.schedule, catch_up = excluded.catch_up, template = excluded.template,
    removed_at = NULL, updated_at = {now},
    next_run_at = CASE WHEN stored.schedule = excluded.schedule AND stored.removed_at IS NULL
                       THEN stored.next_run_at END
""",
        "periodic_job_remove": f"""
UPDATE <schema>riverboat_periodic_job SET removed_at = {now}, updated_at = {now}
WHERE {in_ids} AND removed_at IS NULL
""",
        "periodic_job_delete": f"""
DELETE FROM <schema>riverboat_periodic_job WHERE {in_ids} RETURNING id
""",
    }


@dataclass(frozen=True, slots=True)
class PeriodicJobWrite:
    """What the leader writes of one periodic job after inserting its runs."""

    id: str
    schedule: str
    catch_up: str
    next_run_at: datetime | None
    last_run_at: datetime | None


@dataclass(frozen=True, slots=True)
class PeriodicJobDeclaration:
    """What a client declares of one of its periodic jobs: at its start, and when the job
    is added at runtime (then with the ``template`` of its runs)."""

    id: str
    schedule: str
    catch_up: str
    template: dict[str, Any] | None


class PeriodicStatements(DialectPart, ABC):
    """Durable periodic job statements; :class:`~riverboat.dialect.base.Dialect`
    inherits them."""

    @abstractmethod
    def periodic_rows_param(self, rows: Sequence[PeriodicJobWrite]) -> dict[str, Any]:
        """The parameters of :meth:`periodic_job_save` for a batch of rows."""

    @abstractmethod
    def periodic_time(self, value: Any) -> datetime | None:
        """A time column of ``riverboat_periodic_job`` as the driver returns it."""

    def periodic_job_list(self) -> Statement:
        """Every stored periodic job, by id."""
        return self.stmt("periodic_job_list")

    def periodic_job_save(self, rows: Sequence[PeriodicJobWrite]) -> Statement:
        """Write the times of several periodic jobs in one statement (an upsert). A
        stored ``next_run_at`` never moves back under the same schedule, so a stale
        leader that writes late cannot make the next one insert a tick again."""
        return self.stmt("periodic_job_save", **self.periodic_rows_param(rows))

    def periodic_job_delete(self, ids: Sequence[str]) -> Statement:
        """Forget stored periodic jobs (``riverboat periodic forget``); returns their ids."""
        return self.stmt("periodic_job_delete", **self.periodic_ids_param(ids))

    @abstractmethod
    def periodic_ids_param(self, ids: Sequence[str]) -> dict[str, Any]:
        """The parameters of :meth:`periodic_job_delete` and :meth:`periodic_job_remove`."""

    @abstractmethod
    def periodic_declarations_param(self, rows: Sequence[PeriodicJobDeclaration]) -> dict[str, Any]:
        """The parameters of :meth:`periodic_job_declare`."""

    def periodic_job_declare(self, rows: Sequence[PeriodicJobDeclaration]) -> Statement:
        """Declare periodic jobs (an upsert): the latest declaration of an id defines it,
        a removed one is defined again, and a changed schedule drops the stored next run."""
        return self.stmt("periodic_job_declare", **self.periodic_declarations_param(rows))

    def periodic_job_remove(self, ids: Sequence[str]) -> Statement:
        """Mark periodic jobs removed at runtime; the leader stops inserting them."""
        return self.stmt("periodic_job_remove", **self.periodic_ids_param(ids))

    def decode_json_object(self, value: Any) -> dict[str, Any] | None:
        if value is None:
            return None
        try:
            decoded = json.loads(value) if isinstance(value, (str, bytes)) else value
        except ValueError:
            # A driver that decodes jsonb (psycopg) hands a stored JSON string over as
            # its text: not an object either way.
            return None
        return decoded if isinstance(decoded, dict) else None

    def decode_periodic_job(self, row: Sequence[Any]) -> PeriodicJobRecord:
        """A :meth:`periodic_job_list` row."""
        created = self.periodic_time(row[5])
        updated = self.periodic_time(row[6])
        assert created is not None and updated is not None  # NOT NULL columns
        return PeriodicJobRecord(
            id=str(row[0]),
            schedule=str(row[1]),
            catch_up=str(row[2]),
            next_run_at=self.periodic_time(row[3]),
            last_run_at=self.periodic_time(row[4]),
            created_at=created,
            updated_at=updated,
            template=self.decode_json_object(row[7]),
            removed_at=self.periodic_time(row[8]),
        )
