"""The flow-controlled claim's cost (riverboat.flow): none when no limit is set, and
batches as large as the unlimited producer's when a limit does not bind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

import riverboat
from riverboat import ConcurrencyLimit, InsertManyParams
from riverboat._job import JobRow
from riverboat.dialect.base import MAX_ATTEMPTED_BY
from riverboat.flow import FlowControl
from riverboat.runtime.events import EventKind
from riverboat.runtime.producer import QueueConfig
from tests.runtime.helpers import fetch_row, next_events, noop_workers
from tests.waiting import wait_until_async

JOBS = 200
MAX_WORKERS = 10


async def _work_backlog(driver: Any, queue: QueueConfig) -> dict[str, int]:
    """Work JOBS no-op jobs with one client; the claims it made, by statement."""
    client = riverboat.AsyncClient(
        driver,
        queues={"default": queue},
        workers=noop_workers(),
        fetch_poll_interval=120.0,  # every claim after the first is a refill
    )
    await client.insert_many([InsertManyParams({}, kind="noop") for _ in range(JOBS)])
    sub = client.subscribe(EventKind.JOB_COMPLETED, maxsize=JOBS + 10)
    before = dict(driver.stats.by_query)
    await client.start()
    try:
        events = await next_events(sub, JOBS, timeout=60)
    finally:
        await client.stop()
    assert len({event.job.id for event in events if event.job is not None}) == JOBS
    made = {
        name: count - before.get(name, 0)
        for name, count in driver.stats.by_query.items()
        if name.startswith("job_get_available")
    }
    # River's claim, and the flow-controlled one (whichever statement of it ran).
    return {
        "job_get_available": made.get("job_get_available", 0),
        "job_get_available_flow": sum(
            count for name, count in made.items() if name.startswith("job_get_available_flow")
        ),
    }


async def test_a_queue_without_flow_control_claims_with_rivers_statement(
    apg_driver: Any,
) -> None:
    claims = await _work_backlog(apg_driver, QueueConfig(max_workers=MAX_WORKERS))
    assert claims["job_get_available_flow"] == 0
    assert claims["job_get_available"] > 0


async def test_a_limit_that_does_not_bind_claims_in_batches(
    apg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    # As many as the slots: a job ending here makes room for the next one although its
    # outcome is still in the completer (the claim is told, and leaves it out).
    limited = QueueConfig(
        max_workers=MAX_WORKERS, concurrency=ConcurrencyLimit(global_limit=MAX_WORKERS)
    )
    claims = await _work_backlog(apg_driver, limited)
    assert claims["job_get_available"] == 0
    # As the unlimited producer: at most two claims per max_workers jobs (a refill
    # waits for half the slots), plus the one that finds the queue empty.
    assert JOBS // MAX_WORKERS <= claims["job_get_available_flow"] <= 2 * JOBS // MAX_WORKERS + 1
    # Every job completed, and the record never shows more than the limit running.
    overlap = fetch_row(
        pg_url,
        pg_schema,
        """SELECT count(*) FILTER (WHERE state <> 'completed'),
                  max((SELECT count(*) FROM river_job o
                       WHERE o.attempted_at <= j.attempted_at
                         AND o.finalized_at > j.attempted_at))
           FROM river_job j""",
    )
    assert overlap[0] == 0 and overlap[1] <= MAX_WORKERS


async def _flow_claim(
    driver: Any,
    limit: int | None,
    client_id: str,
    most: int,
    finished: Sequence[tuple[int, int]] = (),
    *,
    in_flight: int | None = None,
    local_limit: int | None = None,
) -> list[JobRow]:
    """One flow-controlled claim of the default queue under a global ``limit``, as the
    producer of ``client_id`` makes it, telling it of ``finished`` jobs and, unless it
    is None (counted by rows), how many of its jobs are ``in_flight``."""
    concurrency = ConcurrencyLimit(global_limit=limit, local_limit=local_limit)
    flow = FlowControl.of(QueueConfig(concurrency=concurrency))
    assert flow is not None
    dialect = driver.dialect
    stmt = dialect.job_get_available_flow(
        queue="default",
        max_to_lock=most,
        client_id=client_id,
        flow=flow,
        max_attempted_by=MAX_ATTEMPTED_BY,
        finished=finished,
        in_flight=in_flight,
    )
    return [dialect.decode_job(row) for row in await driver.fetch(stmt)]


async def test_a_finished_job_makes_room_in_every_claim_and_its_completer_writes_it(
    apg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    # Two processes ("a", "b") under a limit of 2. A job "a" finished, whose outcome its
    # completer still holds, is left out of every claim's count once "a" has told a
    # claim of it; the claim writes nothing of it (its completion is the completer's
    # durable write), and the table's record never shows more than 2 running.
    client = riverboat.AsyncClient(apg_driver, queues={"default": QueueConfig()})
    await client.insert_many([InsertManyParams({}, kind="noop") for _ in range(4)])
    dialect = apg_driver.dialect

    async def claim(
        client_id: str, most: int, finished: Sequence[tuple[int, int]] = ()
    ) -> list[JobRow]:
        return await _flow_claim(apg_driver, 2, client_id, most, finished)

    [first] = await claim("a", 1)
    ended = time.time()  # "a" ran it; its outcome waits in a's completer
    [second] = await claim("a", 1, finished=[(first.id, first.attempt)])
    assert (
        fetch_row(pg_url, pg_schema, "SELECT state FROM river_job WHERE id = %s", first.id)[0]
        == "running"
    )
    # "b" doesn't know of it, yet doesn't count it: one running (second), one room.
    [third] = await claim("b", 2)
    assert await claim("b", 2) == []  # second and third: the limit holds
    await apg_driver.execute(
        dialect.flow_complete_many([first.id], [first.attempt], [ended], returning=False)
    )
    done = fetch_row(
        pg_url,
        pg_schema,
        """SELECT j.state, j.finalized_at <= (SELECT min(attempted_at) FROM river_job
                                              WHERE id = ANY(%s)),
                  (SELECT count(*) FROM riverboat_flow_ended)
           FROM river_job j WHERE j.id = %s""",
        [second.id, third.id],
        first.id,
    )
    assert done == ("completed", True, 0)


async def test_a_job_reported_finished_still_counts_if_it_is_no_longer_this_clients(
    apg_driver: Any,
) -> None:
    # Only the reporting client's own running attempt is left out: a wrong or stale
    # report (another client's job, an earlier attempt) makes no room.
    client = riverboat.AsyncClient(apg_driver, queues={"default": QueueConfig()})
    await client.insert_many([InsertManyParams({}, kind="noop") for _ in range(2)])
    [row] = await _flow_claim(apg_driver, 1, "a", 1)
    assert await _flow_claim(apg_driver, 1, "b", 1, [(row.id, row.attempt)]) == []
    assert await _flow_claim(apg_driver, 1, "a", 1, [(row.id, row.attempt + 1)]) == []


async def test_stale_records_of_finished_jobs_are_pruned_by_a_flow_claim(
    apg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    # A record whose job no longer runs at that attempt (its outcome came another way:
    # rescued, cancelled, finished by another client) is removed by a flow-controlled
    # worker's first claim (then at most once a minute); one still running is kept.
    seed = riverboat.AsyncClient(apg_driver, queues={"default": QueueConfig()})
    rows = await seed.insert_many(
        [InsertManyParams({}, kind="noop", opts=riverboat.InsertOpts(queue="other"))] * 2
    )
    gone, kept = (r.job.id for r in rows)
    fetch_row(
        pg_url,
        pg_schema,
        "UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() "
        "WHERE id = %s RETURNING 1",
        kept,
    )
    fetch_row(
        pg_url,
        pg_schema,
        "INSERT INTO riverboat_flow_ended (job_id, attempt) VALUES (%s, 1), (%s, 1), (%s, 2) "
        "RETURNING 1",
        gone,
        kept,
        kept,
    )
    await seed.insert_many([InsertManyParams({}, kind="noop")])
    client = riverboat.AsyncClient(
        apg_driver,
        queues={"default": QueueConfig(concurrency=ConcurrencyLimit(global_limit=5))},
        workers=noop_workers(),
    )
    sub = client.subscribe(EventKind.JOB_COMPLETED)
    await client.start()
    try:
        await next_events(sub, 1, timeout=30)  # a flow claim has run
    finally:
        await client.stop()
    left = fetch_row(
        pg_url,
        pg_schema,
        "SELECT array_agg(job_id ORDER BY job_id), array_agg(attempt ORDER BY job_id) "
        "FROM riverboat_flow_ended",
    )
    assert left == ([kept], [1])


# -- a whole-queue limit counted by the clients' records of their jobs in flight --------


def _records(url: str, schema: str) -> dict[str, int]:
    row = fetch_row(
        url,
        schema,
        "SELECT coalesce(jsonb_object_agg(client_id, in_flight), '{}') "
        "FROM riverboat_flow_client WHERE queue = 'default'",
    )
    return dict(row[0])


def _register(url: str, schema: str, *client_ids: str, alive: bool = True) -> None:
    """Rows in riverboat's registry of live clients, their leases live or expired."""
    for client_id in client_ids:
        fetch_row(
            url,
            schema,
            "INSERT INTO riverboat_client (id, host, pid, riverboat_version, expires_at) "
            "VALUES (%s, 'test', 1, 'test', now() + make_interval(secs => %s)) "
            "ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at RETURNING 1",
            client_id,
            60 if alive else -1,
        )


async def _backlog(driver: Any, count: int) -> None:
    seed = riverboat.AsyncClient(driver, queues={"default": QueueConfig()})
    await seed.insert_many([InsertManyParams({}, kind="noop") for _ in range(count)])


async def test_each_client_is_counted_by_its_record_of_jobs_in_flight(
    apg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    # Limit 3. "a" takes 2 and records 2; "b" sees a's record and takes the last room.
    # Once a's two have finished (their outcomes still unwritten: the rows are running)
    # "a" says it has none in flight, and takes 2 again: its rows are not counted.
    _register(pg_url, pg_schema, "a", "b")
    await _backlog(apg_driver, 8)
    assert len(await _flow_claim(apg_driver, 3, "a", 2, in_flight=0)) == 2
    assert len(await _flow_claim(apg_driver, 3, "b", 5, in_flight=0)) == 1
    assert _records(pg_url, pg_schema) == {"a": 2, "b": 1}
    assert await _flow_claim(apg_driver, 3, "b", 5, in_flight=1) == []
    assert len(await _flow_claim(apg_driver, 3, "a", 5, in_flight=0)) == 2
    assert _records(pg_url, pg_schema) == {"a": 2, "b": 1}
    running = fetch_row(pg_url, pg_schema, "SELECT count(*) FROM river_job WHERE state = 'running'")
    assert running == (5,)  # two of them finished, outcomes not written yet
    # A local limit is the client's own count.
    assert await _flow_claim(apg_driver, None, "b", 5, in_flight=1, local_limit=1) == []
    assert len(await _flow_claim(apg_driver, None, "b", 5, in_flight=1, local_limit=2)) == 1


async def test_the_record_of_a_client_not_alive_in_the_registry_is_not_trusted(
    apg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    # A client that died or froze stops claiming; once the registry holds it dead (or
    # for a client that never registered) its running rows count, whatever its record
    # says.
    await _backlog(apg_driver, 8)
    _register(pg_url, pg_schema, "a")
    assert len(await _flow_claim(apg_driver, 3, "a", 2, in_flight=0)) == 2
    fetch_row(
        pg_url,
        pg_schema,
        "UPDATE riverboat_flow_client SET in_flight = 0 WHERE client_id = 'a' RETURNING 1",
    )
    _register(pg_url, pg_schema, "a", alive=False)
    assert len(await _flow_claim(apg_driver, 3, "b", 5, in_flight=0)) == 1
    _register(pg_url, pg_schema, "a")
    assert len(await _flow_claim(apg_driver, 3, "b", 5, in_flight=1)) == 2
    fetch_row(pg_url, pg_schema, "DELETE FROM riverboat_client WHERE id = 'a' RETURNING 1")
    # Without a registry row: a's two rows count (its record would leave room for 3).
    assert len(await _flow_claim(apg_driver, 3, "b", 5, in_flight=0)) == 1


async def test_running_rows_of_clients_without_a_record_count(
    apg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    # Go River workers and older riverboat releases keep no record: their rows count.
    await _backlog(apg_driver, 6)
    fetch_row(
        pg_url,
        pg_schema,
        "UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), "
        "attempted_by = ARRAY['river-go'] WHERE id IN "
        "(SELECT id FROM river_job ORDER BY id LIMIT 2) RETURNING 1",
    )
    assert len(await _flow_claim(apg_driver, 3, "b", 5, in_flight=0)) == 1


async def test_a_client_unsure_of_its_jobs_drops_its_record_and_is_counted_by_rows(
    apg_driver: Any, pg_url: str, pg_schema: str
) -> None:
    # After a claim that failed without saying whether it committed, a client passes
    # None: its record goes, and every claim (its own too) counts its rows.
    _register(pg_url, pg_schema, "a", "b")
    await _backlog(apg_driver, 8)
    assert len(await _flow_claim(apg_driver, 3, "a", 2, in_flight=0)) == 2
    assert len(await _flow_claim(apg_driver, 3, "a", 5, in_flight=None)) == 1
    assert _records(pg_url, pg_schema) == {}
    assert await _flow_claim(apg_driver, 3, "b", 5, in_flight=0) == []


def _limited_client(
    pg_url: str, pg_schema: str, client_id: str, workers: riverboat.Workers
) -> riverboat.AsyncClient:
    queue = QueueConfig(
        max_workers=4,
        concurrency=ConcurrencyLimit(global_limit=2),
        fetch_cooldown=0.01,
        fetch_poll_interval=0.1,
    )
    return riverboat.AsyncClient(
        pg_url,
        schema=pg_schema,
        id=client_id,
        queues={"default": queue},
        workers=workers,
        heartbeat_interval=0.3,
    )


def _gated_workers() -> tuple[riverboat.Workers, dict[str, asyncio.Event], list[str]]:
    """Kind ``gated``: each job waits for its args' gate; ``started`` lists who ran it."""
    workers = riverboat.Workers()
    gates: dict[str, asyncio.Event] = {}
    started: list[str] = []

    @workers.register("gated")
    async def gated(job: riverboat.Job[Any]) -> None:
        started.append(job.row.attempted_by[-1])
        await gates.setdefault(job.args["gate"], asyncio.Event()).wait()

    return workers, gates, started


@pytest.mark.parametrize("how", ["operator stop", "soft stop"])
async def test_a_client_that_stops_claiming_leaves_the_limits_room_to_the_others(
    pg_url: str, pg_schema: str, how: str
) -> None:
    """Limit 2 on the whole queue, both taken by client a, which then stops claiming:
    stopped by an operator (riverboat workers stop), or soft-stopping with one job
    still running. Its record of jobs in flight changed only at its next claim, which
    never came: b, counting a's record, started nothing while a lived (an operator stop:
    for ever; a soft stop: until a's last job ended). Now a forgets its record when it
    stops claiming, and b takes the room a's finished jobs left."""
    workers, gates, started = _gated_workers()
    for gate in ("a1", "a2", "new"):
        gates[gate] = asyncio.Event()
    a = _limited_client(pg_url, pg_schema, "client-a", workers)
    b = _limited_client(pg_url, pg_schema, "client-b", workers)
    admin = riverboat.AsyncClient(pg_url, schema=pg_schema)
    await admin.insert_many([InsertManyParams({"gate": g}, kind="gated") for g in ("a1", "a2")])
    await a.start()
    await wait_until_async(lambda: len(started) == 2, what="a runs both jobs")
    await b.start()
    stopping = None
    if how == "operator stop":
        assert await admin.workers_stop("default", worker_id="client-a") == ["client-a"]
        await wait_until_async(
            lambda: a.runtime.producers["default"].operator_stopped, what="a stopped"
        )
        gates["a1"].set()
        gates["a2"].set()
    else:
        stopping = asyncio.ensure_future(a.stop())
        gates["a1"].set()  # a2 keeps a's soft stop waiting
    # Its claims are over once it has forgotten its record (it claimed nothing since).
    await wait_until_async(
        lambda: "client-a" not in _records(pg_url, pg_schema), what="a's record forgotten"
    )
    gates["new"].set()
    new = (await admin.insert({"gate": "new"}, kind="gated")).job
    done = await admin.job_wait(new.id, timeout=10)
    assert done.attempted_by[-1] == "client-b"
    gates["a2"].set()
    if stopping is not None:
        await stopping
    await b.stop()
    for client in (a, b, admin):
        await client.close()
