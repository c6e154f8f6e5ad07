"""The Python half of riverboat's registry of live clients (``riverboat_client``), shared
by both dialects: parameters encoded and rows decoded once. A dialect's SQL lives in
``dialect/<name>_fleet.py``, with the three hooks below saying how it spells an interval,
a list of ids and a stored time."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from riverboat._fleet import WorkerInfo, decode_job_ids, decode_queues
from riverboat._sql import Statement
from riverboat.dialect._part import DialectPart

__all__ = ["CLIENT_COLUMNS", "FleetStatements"]

# What client_list returns, in order; alive is computed by the database's clock.
CLIENT_COLUMNS = (
    "id host pid riverboat_version queues queue_settings slots_in_use started_at "
    "heartbeat_at expires_at alive job_ids"
).split()


class FleetStatements(DialectPart, ABC):
    """Registry statements; :class:`~riverboat.dialect.base.Dialect` inherits them."""

    @abstractmethod
    def fleet_interval_param(self, seconds: float) -> Any:
        """How long a client stays alive without a heartbeat, as the SQL adds it to now."""

    @abstractmethod
    def fleet_ids_param(self, ids: Sequence[str]) -> Any:
        """A list of client ids as one parameter."""

    @abstractmethod
    def fleet_time(self, value: Any) -> datetime:
        """A time column of ``riverboat_client`` as the driver returns it."""

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
    ) -> Statement:
        """A client's row, at start or when it joins again after it was declared dead:
        never over a row that holds its id (no row comes back then; see
        runtime/registry.py)."""
        return self.stmt(
            "client_register",
            id=id,
            host=host,
            pid=pid,
            version=version,
            **self._liveness(queues, job_ids, slots, dead_after),
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
            "client_heartbeat", id=id, **self._liveness(queues, job_ids, slots, dead_after)
        )

    def _liveness(
        self, queues: Mapping[str, Any], job_ids: Sequence[int], slots: int, dead_after: float
    ) -> dict[str, Any]:
        return {
            "queues": json.dumps(queues),
            "job_ids": json.dumps(list(job_ids)),
            "slots": slots,
            "dead_after": self.fleet_interval_param(float(dead_after)),
        }

    def client_touch_lost(self, client_id: str) -> Statement:
        """For a client that counts itself dead: its expired row's ``heartbeat_at`` is
        brought to now, the lease left as it is (see client_condemn's recent check)."""
        return self.stmt("client_touch_lost", id=client_id)

    def client_delete(self, client_id: str) -> Statement:
        return self.stmt("client_delete", id=client_id)

    def client_holder(self, client_id: str) -> Statement:
        """``(host, pid, lease still valid)`` of the row that holds ``client_id`` (none:
        the id is free)."""
        return self.stmt("client_holder", id=client_id)

    def client_list(self) -> Statement:
        return self.stmt("client_list")

    def client_delete_dead(self, client_ids: list[str]) -> Statement:
        return self.stmt("client_delete_dead", ids=self.fleet_ids_param(client_ids))

    def client_condemn(self, client_ids: list[str], recent: float) -> Statement:
        """Mark the rows of ``client_ids`` whose lease ran out as a rescue's, before it
        rescues their jobs: a condemned lease is never renewed. Returns their ids. On
        SQLite only while some client heartbeat within ``recent`` seconds (see its
        statement); Postgres ignores it."""
        return self.stmt(
            "client_condemn",
            ids=self.fleet_ids_param(client_ids),
            recent=self.fleet_interval_param(-recent),
        )

    def client_sweeper(self) -> Statement:
        """The id of the live client with queues that sweeps workflows (the smallest),
        or NULL when there is none: one row."""
        return self.stmt("client_sweeper")

    def client_set_queue_settings(
        self, *, queue: str, patch: Mapping[str, Any], client_id: str | None
    ) -> Statement:
        """An operator's request to live clients (all, or one): merge ``patch`` into the
        queue's settings; clients apply them at their next heartbeat."""
        return self.stmt(
            "client_set_queue_settings", queue=queue, patch=json.dumps(patch), id=client_id
        )

    def decode_json_value(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, (str, bytes)) else value

    def decode_client(self, row: Sequence[Any]) -> WorkerInfo:
        """A :meth:`client_list` row (columns in :data:`CLIENT_COLUMNS` order)."""
        settings = self.decode_json_value(row[5])
        return WorkerInfo(
            id=row[0],
            host=row[1],
            pid=int(row[2]),
            riverboat_version=row[3],
            queues=decode_queues(self.decode_json_value(row[4])),
            slots_in_use=int(row[6]),
            started_at=self.fleet_time(row[7]),
            heartbeat_at=self.fleet_time(row[8]),
            expires_at=self.fleet_time(row[9]),
            alive=bool(row[10]),
            queue_settings=settings if isinstance(settings, dict) else {},
            job_ids=decode_job_ids(self.decode_json_value(row[11])),
        )
