"""Scenario 5: rows another River client wrote that riverboat cannot decode or work.

Each row is inserted with raw SQL: args that don't fit the worker's dataclass, args
that are a JSON array or a string, an unknown kind, attempt counts past max_attempts or
at smallint's limit, metadata that is an array or a string, errors entries that are not
objects. Each must end with a clear error entry (discarded: max_attempts is 1, or
already used up) or complete, and never stop the worker or the queue: a good job
inserted after all of them still completes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import riverboat
from riverboat import Job, QueueConfig, Workers
from tests.reliability._support import sql
from tests.waiting import wait_until_async


@dataclass
class Typed:
    kind = "rel_typed"
    n: int


# (label, kind, args, attempt, max_attempts, metadata, errors) as SQL expressions
BAD_ROWS = [
    ("args missing a field", "'rel_typed'", "'{\"m\": 1}'", "0", "1", "'{}'", "NULL"),
    ("args a JSON array", "'rel_typed'", "'[1, 2]'", "0", "1", "'{}'", "NULL"),
    ("args a JSON string", "'rel_typed'", "'\"text\"'", "0", "1", "'{}'", "NULL"),
    ("args a JSON number", "'rel_typed'", "'42'", "0", "1", "'{}'", "NULL"),
    ("unknown kind", "'rel_nobody_works_this'", "'{}'", "0", "1", "'{}'", "NULL"),
    ("attempt > max_attempts", "'rel_typed'", "'{\"n\": 1}'", "30", "25", "'{}'", "NULL"),
    ("attempt 32767", "'rel_typed'", "'{\"n\": 1}'", "32767", "25", "'{}'", "NULL"),
    ("attempt 32766", "'rel_typed'", "'{\"n\": 1}'", "32766", "25", "'{}'", "NULL"),
    ("metadata a JSON array", "'rel_typed'", "'{\"n\": 1}'", "0", "1", "'[1]'", "NULL"),
    ("metadata a JSON string", "'rel_typed'", "'{\"n\": 1}'", "0", "1", "'\"m\"'", "NULL"),
    ("metadata null", "'rel_typed'", "'{\"n\": 1}'", "0", "1", "'null'", "NULL"),
    (
        "errors entries not objects",
        "'rel_typed'",
        "'{\"n\": 1}'",
        "0",
        "1",
        "'{}'",
        "ARRAY['1'::jsonb, '\"x\"'::jsonb, '[]'::jsonb]",
    ),
    (
        "errors entry with wrong field types",
        "'rel_typed'",
        "'{\"n\": 1}'",
        "0",
        "1",
        "'{}'",
        'ARRAY[\'{"at": 5, "attempt": "x", "error": {}}\'::jsonb]',
    ),
    (
        "args with a wrong field type",
        "'rel_fail_on_str'",
        '\'{"n": "x"}\'',
        "0",
        "1",
        "'{}'",
        "NULL",
    ),
]


async def test_undecodable_rows_fail_alone(pg_url: str, pg_schema: str) -> None:
    workers = Workers()
    worked: list[int] = []

    @workers.register(Typed)
    async def typed(job: Job[Typed]) -> None:
        worked.append(job.id)

    @workers.register("rel_fail_on_str")
    async def fail_on_str(job: Job[Any]) -> None:
        if not isinstance(job.args["n"], int):
            raise TypeError(f"n must be an int, got {job.args['n']!r}")

    ids: dict[int, str] = {}
    for label, kind, args, attempt, max_attempts, metadata, errors in BAD_ROWS:
        ((job_id,),) = sql(
            pg_url,
            pg_schema,
            "INSERT INTO river_job (kind, args, attempt, max_attempts, metadata, errors, state,"
            f" scheduled_at) VALUES ({kind}, {args}::jsonb, {attempt}, {max_attempts},"
            f" {metadata}::jsonb, {errors}, 'available', now() - interval '1 second')"
            " RETURNING id",
        )
        ids[job_id] = label
    client = riverboat.AsyncClient(
        pg_url,
        schema=pg_schema,
        queues={"default": QueueConfig(max_workers=4)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.1,
    )
    await client.start()
    try:
        # The good job goes in after the bad ones, so it is fetched after them.
        good = (await client.insert(Typed(n=7))).job.id

        def settled() -> bool:
            unsettled = sql(
                pg_url,
                pg_schema,
                "SELECT id, state::text, errors FROM river_job "
                "WHERE state IN ('available', 'running', 'retryable') AND id <> ALL(%s)",
                [],
            )
            done = sql(pg_url, pg_schema, "SELECT state::text FROM river_job WHERE id = %s", good)
            return not unsettled and done == [("completed",)]

        await wait_until_async(
            lambda: asyncio.to_thread(settled), timeout=20, poll=0.05, what="every job settled"
        )
        producer = client.runtime.producers["default"]
        assert producer._task is not None and not producer._task.done(), "producer alive"
    finally:
        await client.stop()
        await client.close()
    assert good in worked
    result = {
        r[0]: r[1:] for r in sql(pg_url, pg_schema, "SELECT id, state::text, errors FROM river_job")
    }
    for job_id, label in ids.items():
        state, errors = result[job_id]
        last = errors[-1] if errors else None
        message = last.get("error") if isinstance(last, dict) else None
        print(f"{label:38} -> {state:9} {message!r}")
        assert state in ("discarded", "completed"), (label, state, errors)
        if state == "discarded":
            assert message, (label, errors)
