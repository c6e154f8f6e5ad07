"""Postgres statements for riverboat's registry of live clients (``riverboat_client``,
from riverboat's own migration line): heartbeats, the live and dead client lists, and
the per-queue settings operators send to clients. A mixin of
:class:`~riverboat.dialect.postgres.PostgresDialect`; the SQLite twin is
:mod:`~riverboat.dialect.sqlite_fleet` (same method names, arguments and rows)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

from riverboat.dialect._fleet_common import FleetStatements

__all__ = ["PostgresFleet"]

_LIST = """id, host, pid, riverboat_version, queues, queue_settings, slots_in_use,
    started_at, heartbeat_at, expires_at, expires_at > now(), job_ids"""

_VALUES = """(id, host, pid, riverboat_version, queues, job_ids, slots_in_use, expires_at)
VALUES (:id::text, :host::text, :pid::bigint, :version::text, :queues::jsonb,
        :job_ids::jsonb, :slots::bigint,
        now() + make_interval(secs => :dead_after::double precision))"""

QUERIES: dict[str, str] = {}

# A client's row, at start or back after being declared dead: never over a row that
# holds its id (another process's, or a previous run's that did not stop cleanly, whose
# jobs the leader rescues before it removes the row).
QUERIES["client_register"] = f"""
INSERT INTO <schema>riverboat_client {_VALUES}
ON CONFLICT (id) DO NOTHING
RETURNING queue_settings
"""

# The heartbeat extends a lease that is still valid, and only that: a client whose lease
# ran out may already have had its jobs handed to others, and must learn so (no row).
QUERIES["client_heartbeat"] = """
UPDATE <schema>riverboat_client
SET queues = :queues::jsonb, job_ids = :job_ids::jsonb, slots_in_use = :slots::bigint,
    heartbeat_at = now(),
    expires_at = now() + make_interval(secs => :dead_after::double precision)
WHERE id = :id::text AND expires_at > now()
RETURNING queue_settings
"""

QUERIES["client_delete"] = "DELETE FROM <schema>riverboat_client WHERE id = :id::text"

QUERIES["client_holder"] = """
SELECT host, pid, expires_at > now() FROM <schema>riverboat_client WHERE id = :id::text
"""

QUERIES["client_list"] = f"SELECT {_LIST} FROM <schema>riverboat_client ORDER BY host, pid, id"


# Clients with queues run the workflow sweep (runtime/workflow_promoter.py); one of them
# does it for the fleet.
QUERIES["client_sweeper"] = """
SELECT min(id) FROM <schema>riverboat_client WHERE expires_at > now() AND queues <> '{}'::jsonb
"""

# See sqlite_fleet (nothing here waits for a recent heartbeat; kept alike).
QUERIES["client_touch_lost"] = """
UPDATE <schema>riverboat_client SET heartbeat_at = now()
WHERE id = :id AND expires_at <= now()
"""

QUERIES["client_delete_dead"] = """
DELETE FROM <schema>riverboat_client
WHERE id = ANY(:ids::text[]) AND expires_at <= now()
RETURNING id
"""

# Before a dead client's jobs are rescued (see sqlite_fleet: only there can a lease
# that ran out be renewed, so here it only marks the row as the rescue's).
QUERIES["client_condemn"] = """
UPDATE <schema>riverboat_client SET expires_at = 'epoch'
WHERE id = ANY(:ids::text[]) AND expires_at <= now()
RETURNING id
"""

# An operator's request to live clients (all, or one): merge :patch into the queue's
# settings; clients apply them at their next heartbeat.
QUERIES["client_set_queue_settings"] = """
UPDATE <schema>riverboat_client
SET queue_settings = queue_settings || jsonb_build_object(
    :queue::text, coalesce(queue_settings -> :queue::text, '{}'::jsonb) || :patch::jsonb)
WHERE (:id::text IS NULL OR id = :id::text) AND expires_at > now()
  AND queues ? :queue::text
RETURNING id
"""


class PostgresFleet(FleetStatements):
    _queries: ClassVar[dict[str, str]] = QUERIES

    def fleet_interval_param(self, seconds: float) -> Any:
        return seconds

    def fleet_ids_param(self, ids: Sequence[str]) -> Any:
        return list(ids)

    def fleet_time(self, value: Any) -> datetime:
        return value  # type: ignore[no-any-return]  # psycopg/asyncpg decode timestamptz
