"""SQLite statements for riverboat's registry of live clients, the twins of
:mod:`~riverboat.dialect.postgres_fleet` (same method names, arguments and rows). Times
are River's SQLite text; jsonb columns are read back with ``json()``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

from riverboat._fleet import WorkerInfo, decode_job_ids, decode_queues
from riverboat._sql import Statement
from riverboat.dialect._part import DialectPart
from riverboat.dialect._sqlite_common import NOW, parse_timestamp, seconds_modifier

__all__ = ["SqliteFleet"]

_EXPIRES = "datetime('now', 'subsec', :dead_after)"
_LIST = f"""id, host, pid, riverboat_version, json(queues), json(queue_settings),
    slots_in_use, started_at, heartbeat_at, expires_at, expires_at > {NOW}, json(job_ids)"""
_VALUES = f"""(id, host, pid, riverboat_version, queues, job_ids, slots_in_use, expires_at)
VALUES (:id, :host, :pid, :version, jsonb(:queues), jsonb(:job_ids), :slots, {_EXPIRES})"""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _time(value: Any) -> datetime:
    return parse_timestamp(value) or _EPOCH  # our own rows always hold a time


QUERIES: dict[str, str] = {}

QUERIES["client_register"] = f"""
INSERT INTO <schema>riverboat_client {_VALUES}
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, riverboat_version = excluded.riverboat_version,
    queues = excluded.queues, job_ids = excluded.job_ids, queue_settings = jsonb('{{}}'),
    slots_in_use = excluded.slots_in_use,
    started_at = {NOW}, heartbeat_at = {NOW}, expires_at = excluded.expires_at
RETURNING json(queue_settings)
"""

QUERIES["client_rejoin"] = f"""
INSERT INTO <schema>riverboat_client {_VALUES}
ON CONFLICT (id) DO NOTHING
RETURNING json(queue_settings)
"""

QUERIES["client_heartbeat"] = f"""
UPDATE <schema>riverboat_client
SET queues = jsonb(:queues), job_ids = jsonb(:job_ids), slots_in_use = :slots,
    heartbeat_at = {NOW},
    expires_at = {_EXPIRES}
WHERE id = :id AND expires_at > {NOW}
RETURNING json(queue_settings)
"""

QUERIES["client_delete"] = "DELETE FROM <schema>riverboat_client WHERE id = :id"

QUERIES["client_list"] = f"SELECT {_LIST} FROM <schema>riverboat_client ORDER BY host, pid, id"


QUERIES["client_delete_dead"] = f"""
DELETE FROM <schema>riverboat_client
WHERE id IN (SELECT value FROM json_each(:ids)) AND expires_at <= {NOW}
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


class SqliteFleet(DialectPart):
    _queries: ClassVar[dict[str, str]] = QUERIES

    def client_register(
        self,
        *,
        id: str,
        host: str,
        pid: int,
        version: str,
        queues: Mapping[str, Any],
        job_ids: Sequence[int],
        slots: int,
        dead_after: float,
        rejoin: bool = False,
    ) -> Statement:
        return self.stmt(
            "client_rejoin" if rejoin else "client_register",
            id=id,
            host=host,
            pid=pid,
            version=version,
            queues=json.dumps(queues),
            job_ids=json.dumps(list(job_ids)),
            slots=slots,
            dead_after=seconds_modifier(dead_after),
        )

    def client_heartbeat(
        self,
        *,
        id: str,
        queues: Mapping[str, Any],
        job_ids: Sequence[int],
        slots: int,
        dead_after: float,
    ) -> Statement:
        return self.stmt(
            "client_heartbeat",
            id=id,
            queues=json.dumps(queues),
            job_ids=json.dumps(list(job_ids)),
            slots=slots,
            dead_after=seconds_modifier(dead_after),
        )

    def client_delete(self, client_id: str) -> Statement:
        return self.stmt("client_delete", id=client_id)

    def client_list(self) -> Statement:
        return self.stmt("client_list")

    def client_delete_dead(self, client_ids: list[str]) -> Statement:
        return self.stmt("client_delete_dead", ids=json.dumps(list(client_ids)))

    def client_set_queue_settings(
        self, *, queue: str, patch: Mapping[str, Any], client_id: str | None
    ) -> Statement:
        return self.stmt(
            "client_set_queue_settings", queue=queue, patch=json.dumps(patch), id=client_id
        )

    def decode_json_value(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, (str, bytes)) else value

    def decode_client(self, row: Sequence[Any]) -> WorkerInfo:
        """A :meth:`client_list` row."""
        settings = self.decode_json_value(row[5])
        return WorkerInfo(
            id=row[0],
            host=row[1],
            pid=int(row[2]),
            riverboat_version=row[3],
            queues=decode_queues(self.decode_json_value(row[4])),
            slots_in_use=int(row[6]),
            started_at=_time(row[7]),
            heartbeat_at=_time(row[8]),
            expires_at=_time(row[9]),
            alive=bool(row[10]),
            queue_settings=settings if isinstance(settings, dict) else {},
            job_ids=decode_job_ids(self.decode_json_value(row[11])),
        )
