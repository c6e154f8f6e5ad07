"""Helpers for admin tests: a sync client, raw SQL to put jobs into any state, and
counting statements."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

import riverboat
from riverboat import JobRow


def sql(url: str, schema: str, text: str, *params: Any) -> list[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        cur = conn.execute(text, params)
        return cur.fetchall() if cur.description is not None else []


def force_state(url: str, schema: str, job_id: int, state: str, **extra: Any) -> None:
    """Put a job into ``state`` directly, keeping River's finalized_at constraint."""
    finalized = state in ("cancelled", "completed", "discarded")
    sets = ["state = %s::river_job_state", "finalized_at = " + ("now()" if finalized else "NULL")]
    params: list[Any] = [state]
    if state == "running":
        sets.append("attempt = attempt + 1, attempted_at = now()")
    for column, value in extra.items():
        sets.append(f"{column} = %s")
        params.append(value)
    sql(url, schema, f"UPDATE river_job SET {', '.join(sets)} WHERE id = %s", *params, job_id)


def insert(client: riverboat.Client, kind: str = "thing", **opts: Any) -> JobRow:
    args = opts.pop("args", {"n": 1})
    return client.insert(args, riverboat.InsertOpts(**opts), kind=kind).job


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
