"""Shared pieces for the leadership tests: fast timings, clients, SQL shortcuts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

from riverboat import AsyncClient, ElectorConfig, Job, MaintenanceConfig, QueueConfig, Workers
from riverboat.runtime.elector import Elector

# Seconds instead of River's 5 s / 15 s, so handovers happen within a test.
FAST_ELECTOR = ElectorConfig(
    elect_interval=0.3,
    elect_jitter=0.1,
    ttl=2.0,
    reelect_interval=0.3,
    safety_margin=0.5,
    attempt_timeout=1.0,
)


def fast_maintenance(**overrides: Any) -> MaintenanceConfig:
    """River's services, but with no start stagger and short election timings."""
    values: dict[str, Any] = {"elector": FAST_ELECTOR, "start_jitter": 0.0}
    values.update(overrides)
    return MaintenanceConfig(**values)


@dataclass
class TickArgs:
    kind = "periodic_tick"
    n: int = 0


def default_workers() -> Workers:
    workers = Workers()

    @workers.register("noop")
    async def noop(job: Job[Any]) -> None:
        return None

    @workers.register(TickArgs)
    async def tick(job: Job[Any]) -> None:
        return None

    return workers


def make_client(
    pg_url: str,
    schema: str,
    client_id: str,
    *,
    maintenance: MaintenanceConfig | None = None,
    **kwargs: Any,
) -> AsyncClient:
    kwargs.setdefault("queues", {"default": QueueConfig(max_workers=5)})
    kwargs.setdefault("workers", default_workers())
    return AsyncClient(
        pg_url,
        schema=schema,
        id=client_id,
        maintenance=maintenance or fast_maintenance(),
        **kwargs,
    )


def elector_of(client: AsyncClient) -> Elector:
    elector = client.runtime.elector
    assert isinstance(elector, Elector)
    return elector


async def wait_any_leader(clients: Iterable[AsyncClient], timeout: float) -> AsyncClient:
    """The first of ``clients`` to gain leadership (or fail after ``timeout``)."""
    by_future = {asyncio.ensure_future(elector_of(c).leader.wait()): c for c in clients}
    try:
        done, _ = await asyncio.wait(by_future, timeout=timeout, return_when="FIRST_COMPLETED")
    finally:
        for future in by_future:
            future.cancel()
    assert done, f"no leader within {timeout}s"
    return by_future[next(iter(done))]


class LeaderWatch:
    """Counts concurrent local leaders through the electors' transition callbacks."""

    def __init__(self) -> None:
        self.current: set[str] = set()
        self.max_concurrent = 0
        self.gains: list[tuple[str, float]] = []
        self.losses: list[tuple[str, float]] = []

    def add(self, client: AsyncClient) -> None:
        """Watch a started client (call right after ``start()``, before any await)."""
        elector = elector_of(client)
        callback = self._callback(elector.client_id)
        if elector.is_leader:
            callback(True)
        elector.on_change(callback)

    def _callback(self, client_id: str) -> Callable[[bool], None]:
        def changed(leading: bool) -> None:
            if leading:
                self.current.add(client_id)
                self.gains.append((client_id, time.monotonic()))
            else:
                self.current.discard(client_id)
                self.losses.append((client_id, time.monotonic()))
            self.max_concurrent = max(self.max_concurrent, len(self.current))

        return changed


def sql(pg_url: str, schema: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement in ``schema`` on a fresh autocommit connection."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description is not None else []


def leader_row(pg_url: str, schema: str) -> tuple[Any, ...] | None:
    rows = sql(pg_url, schema, "SELECT leader_id, elected_at, expires_at FROM river_leader")
    return rows[0] if rows else None
