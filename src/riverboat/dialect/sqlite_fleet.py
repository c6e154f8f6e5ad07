"""SQLite statements for riverboat's registry of live clients, the twins of
:mod:`~riverboat.dialect.postgres_fleet` (same method names, arguments and rows). Times
are River's SQLite text; jsonb columns are read back with ``json()``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

from riverboat._job import RESCUE_ERROR
from riverboat.dialect._fleet_common import FleetStatements
from riverboat.dialect._sqlite_common import NOW, parse_timestamp, seconds_modifier

__all__ = ["SqliteFleet"]

_EXPIRES = "datetime('now', 'subsec', :dead_after)"
_LIST = f"""id, host, pid, riverboat_version, json(queues), json(queue_settings),
    slots_in_use, started_at, heartbeat_at, expires_at, expires_at > {NOW}, json(job_ids)"""
_VALUES = f"""(id, host, pid, riverboat_version, queues, job_ids, slots_in_use, expires_at)
VALUES (:id, :host, :pid, :version, jsonb(:queues), jsonb(:job_ids), :slots, {_EXPIRES})"""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

QUERIES: dict[str, str] = {}

# See postgres_fleet.
QUERIES["client_register"] = f"""
INSERT INTO <schema>riverboat_client {_VALUES}
ON CONFLICT (id) DO NOTHING
RETURNING json(queue_settings)
"""

# What a leader's dead-client rescue writes into a dead client's expires_at before it
# rescues the client's jobs (client_condemn): the row then can't be renewed.
_CONDEMNED = "'1970-01-01 00:00:00.000'"

# On SQLite a lease runs out while its client lives when another connection held the
# database's one write lock past dead_after: that stopped every heartbeat, and every
# rescue too. So a lease that ran out is renewed (Postgres renews only a live one)
# unless the row was condemned by a leader's dead-client rescue, or a job the row listed
# was handed out since (rescued by River's rule, by a Go leader, or by a leader of an
# earlier release, which rescued before removing the row): claimed by another client
# since, or its attempt's last error is the rescuer's. A job this client ended itself
# (completed, failed and retryable, snoozed) is still its own.
QUERIES["client_heartbeat"] = f"""
UPDATE <schema>riverboat_client
SET queues = jsonb(:queues), job_ids = jsonb(:job_ids), slots_in_use = :slots,
    heartbeat_at = {NOW},
    expires_at = {_EXPIRES}
WHERE id = :id
  AND (expires_at > {NOW}
       OR (expires_at > {_CONDEMNED}
           AND NOT EXISTS (
               SELECT 1 FROM json_each(riverboat_client.job_ids) AS held
               JOIN <schema>river_job j ON j.id = held.value
               WHERE coalesce(json_extract(j.attempted_by, '$[#-1]'), '') <> :id
                  OR (j.state <> 'running'
                      AND json_extract(j.errors, '$[#-1].error') = '{RESCUE_ERROR}'
                      AND json_extract(j.errors, '$[#-1].attempt') = j.attempt))))
RETURNING json(queue_settings)
"""

# A client that counts itself dead, before each attempt to join again: its old row
# says it is still there (heartbeat_at) without renewing the lease. The condemn step
# needs some recent heartbeat, and a lone client that lost its place has no one else's.
QUERIES["client_touch_lost"] = f"""
UPDATE <schema>riverboat_client SET heartbeat_at = {NOW}
WHERE id = :id AND expires_at <= {NOW}
"""

QUERIES["client_delete"] = "DELETE FROM <schema>riverboat_client WHERE id = :id"

QUERIES["client_holder"] = f"""
SELECT host, pid, expires_at > {NOW} FROM <schema>riverboat_client WHERE id = :id
"""

QUERIES["client_list"] = f"SELECT {_LIST} FROM <schema>riverboat_client ORDER BY host, pid, id"

QUERIES["client_sweeper"] = f"""
SELECT min(id) FROM <schema>riverboat_client WHERE expires_at > {NOW} AND json(queues) <> '{{}}'
"""

QUERIES["client_delete_dead"] = f"""
DELETE FROM <schema>riverboat_client
WHERE id IN (SELECT value FROM json_each(:ids)) AND expires_at <= {NOW}
RETURNING id
"""

# Only while some client's heartbeat is recent: just after another connection held the
# write lock for longer than dead_after, every lease has run out, the live clients' too,
# and none could renew yet (the leader's own rescue also waits dead_after after its
# writes last waited for the lock; this covers a lock that began after it decided).
QUERIES["client_condemn"] = f"""
UPDATE <schema>riverboat_client SET expires_at = {_CONDEMNED}
WHERE id IN (SELECT value FROM json_each(:ids)) AND expires_at <= {NOW}
  AND EXISTS (SELECT 1 FROM <schema>riverboat_client recent
              WHERE recent.heartbeat_at > datetime({NOW}, :recent))
RETURNING id
"""

QUERIES["client_set_queue_settings"] = f"""
UPDATE <schema>riverboat_client
SET queue_settings = jsonb_set(
    queue_settings, '$.' || json_quote(:queue),
    jsonb_patch(coalesce(queue_settings -> ('$.' || json_quote(:queue)), jsonb('{{}}')),
                jsonb(:patch)))
WHERE (:id IS NULL OR id = :id) AND expires_at > {NOW}
  AND json_type(queues, '$.' || json_quote(:queue)) IS NOT NULL
RETURNING id
"""


class SqliteFleet(FleetStatements):
    _queries: ClassVar[dict[str, str]] = QUERIES

    def fleet_interval_param(self, seconds: float) -> Any:
        return seconds_modifier(seconds)

    def fleet_ids_param(self, ids: Sequence[str]) -> Any:
        return json.dumps(list(ids))  # one JSON array parameter: SQLite binds no arrays

    def fleet_time(self, value: Any) -> datetime:
        return parse_timestamp(value) or _EPOCH  # our own rows always hold a time
