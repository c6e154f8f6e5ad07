"""Helpers for runtime tests: a client factory and waiting on events."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import psycopg

import riverboat
from riverboat import Event, EventKind, Job, QueueConfig, Subscription, Workers


def make_client(driver: Any, workers: Workers, **kwargs: Any) -> riverboat.AsyncClient:
    kwargs.setdefault("queues", {"default": QueueConfig(max_workers=10)})
    kwargs.setdefault("fetch_cooldown", 0.01)
    kwargs.setdefault("fetch_poll_interval", 0.2)
    return riverboat.AsyncClient(driver, workers=workers, **kwargs)


async def next_events(sub: Subscription, count: int, timeout: float = 10.0) -> list[Event]:
    """The next ``count`` events, failing the test if they don't arrive in time."""
    events: list[Event] = []
    async with asyncio.timeout(timeout):
        while len(events) < count:
            events.append(await sub.get())
    return events


async def work_outcomes(client: riverboat.AsyncClient, count: int) -> list[Event]:
    """Start ``client``, collect the next ``count`` completed or failed events, stop it."""
    sub = client.subscribe(EventKind.JOB_COMPLETED, EventKind.JOB_FAILED)
    await client.start()
    try:
        return await next_events(sub, count)
    finally:
        await client.stop()


async def wait_for(kinds: Iterable[EventKind], sub: Subscription, job_id: int) -> Event:
    wanted = set(kinds)
    async with asyncio.timeout(10):
        while True:
            event = await sub.get()
            if event.kind in wanted and event.job is not None and event.job.id == job_id:
                return event


def fetch_row(url: str, schema: str, sql: str, *params: Any) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        return conn.execute(sql, params).fetchone()


def noop_workers() -> Workers:
    """Workers with one kind, ``noop``, that does nothing."""
    workers = Workers()

    @workers.register("noop")
    async def noop(job: Job[Any]) -> None:
        return None

    return workers
