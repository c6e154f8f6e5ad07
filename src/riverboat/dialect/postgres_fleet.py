"""Postgres statements for riverboat's registry of live clients (``riverboat_client``,
from riverboat's own migration line): heartbeats, the live and dead client lists, and
the per-queue settings operators send to clients. A mixin of
:class:`~riverboat.dialect.postgres.PostgresDialect`; the SQLite twin is
:mod:`~riverboat.dialect.sqlite_fleet` (same method names, arguments and rows)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from riverboat._fleet import WorkerInfo, decode_job_ids, decode_queues
from riverboat._sql import Statement
from riverboat.dialect._part import DialectPart

__all__ = ["CLIENT_COLUMNS", "PostgresFleet"]

# What client_list returns, in order; alive is computed by the database's clock.
CLIENT_COLUMNS = (
    "id host pid riverboat_version queues queue_settings slots_in_use started_at "
    "heartbeat_at expires_at alive job_ids"
).split()

_LIST = """id, host, pid, riverboat_version, queues, queue_settings, slots_in_use,
    started_at, heartbeat_at, expires_at, expires_at > now(), job_ids"""

QUERIES: dict[str, str] = {}

# A client's first row (or its row again after it was declared dead and removed). A
# leftover row under the same id (a process that reused an id) is taken over.
QUERIES["client_register"] = """
INSERT INTO <schema>riverboat_client
    (id, host, pid, riverboat_version, queues, job_ids, slots_in_use, expires_at)
VALUES (:id::text, :host::text, :pid::bigint, :version::text, :queues::jsonb,
        :job_ids::jsonb, :slots::bigint,
        now() + make_interval(secs => :dead_after::double precision))
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, riverboat_version = excluded.riverboat_version,
    queues = excluded.queues, job_ids = excluded.job_ids, queue_settings = '{}',
    slots_in_use = excluded.slots_in_use,
    started_at = now(), heartbeat_at = now(), expires_at = excluded.expires_at
RETURNING queue_settings
"""

# Back after being declared dead: only once the leader has removed the old row (and
# with it made the old run's jobs available again), never over it.
QUERIES["client_rejoin"] = """
INSERT INTO <schema>riverboat_client
    (id, host, pid, riverboat_version, queues, job_ids, slots_in_use, expires_at)
VALUES (:id::text, :host::text, :pid::bigint, :version::text, :queues::jsonb,
        :job_ids::jsonb, :slots::bigint,
        now() + make_interval(secs => :dead_after::double precision))
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

QUERIES["client_list"] = f"SELECT {_LIST} FROM <schema>riverboat_client ORDER BY host, pid, id"


QUERIES["client_delete_dead"] = """
DELETE FROM <schema>riverboat_client
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


class PostgresFleet(DialectPart):
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
            dead_after=float(dead_after),
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
            dead_after=float(dead_after),
        )

    def client_delete(self, client_id: str) -> Statement:
        return self.stmt("client_delete", id=client_id)

    def client_list(self) -> Statement:
        return self.stmt("client_list")

    def client_delete_dead(self, client_ids: list[str]) -> Statement:
        return self.stmt("client_delete_dead", ids=list(client_ids))

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
            started_at=row[7],
            heartbeat_at=row[8],
            expires_at=row[9],
            alive=bool(row[10]),
            queue_settings=settings if isinstance(settings, dict) else {},
            job_ids=decode_job_ids(self.decode_json_value(row[11])),
        )
