"""Helpers for the SQLite parity tests: a sync client on a migrated file, raw SQL to put
jobs into any state, the outbox's rows, and statement counts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import riverboat
from riverboat import JobRow
from tests.sqlite.helpers import query, raw

__all__ = ["counting", "force_state", "insert", "outbox", "query", "raw"]


def force_state(url: str, job_id: int, state: str, **extra: Any) -> None:
    """Put a job into ``state`` directly, keeping River's finalized_at constraint."""
    finalized = state in ("cancelled", "completed", "discarded")
    sets = ["state = ?", "finalized_at = " + ("datetime('now', 'subsec')" if finalized else "NULL")]
    params: list[Any] = [state]
    if state == "running":
        sets.append("attempt = attempt + 1, attempted_at = datetime('now', 'subsec')")
    for column, value in extra.items():
        sets.append(f"{column} = ?")
        params.append(value)
    query(url, f"UPDATE river_job SET {', '.join(sets)} WHERE id = ?", *params, job_id)


def insert(client: riverboat.Client, kind: str = "thing", **opts: Any) -> JobRow:
    args = opts.pop("args", {"n": 1})
    return client.insert(args, riverboat.InsertOpts(**opts), kind=kind).job


def outbox(url: str, topic: str | None = None) -> list[Any]:
    """Outbox payloads (decoded), oldest first, for one topic or all as (topic, payload)."""
    rows = query(url, "SELECT topic, payload FROM river_notification ORDER BY id")
    if topic is None:
        return [(t, json.loads(p)) for t, p in rows]
    return [json.loads(p) for t, p in rows if t == topic]


@contextmanager
def counting(driver: Any) -> Iterator[dict[str, int]]:
    """The statements run inside the block, by query name."""
    before = dict(driver.stats.by_query)
    seen: dict[str, int] = {}
    yield seen
    for name, count in driver.stats.by_query.items():
        delta = count - before.get(name, 0)
        if delta:
            seen[name] = delta
