"""The ``workflow`` part of ``riverboat bench`` (runs only when named): what dependencies
cost (docs/workflows.md).

- ``fan_out_fan_in``: 1,000 no-op tasks (one root, 998 in parallel, one join) beside the
  same 1,000 jobs inserted with ``insert_many`` and no dependencies, each from the call
  that inserts them to the last one finished, its completion written (counted from the
  client's completion events, the same way for both); the ratio is the price of the
  graph. Also to the last one started (the figure earlier releases reported). Five
  rounds, alternating, the plain jobs first in the odd ones and the fan-out first in the
  even ones; the medians. Each timed insert starts from an idle producer
  (``IDLE_GAP`` after the previous round): otherwise the fan-out's root waited out the
  fetch cooldown left by the plain round's last full claim (30 to 50 ms) while the plain
  round, after the join's one-job claim, did not.
- ``chain``: 100 tasks each waiting for the one before, beside 100 times the median
  pick-up latency of one job inserted into the idle queue (what a chain cannot beat).
- promotion statements per task, counted by the runtime's promoter.
- where a fan-out/fan-in's extra time goes (medians, ms): the insert call beside the plain
  ``insert_many``; the insert's return to the root's start beside the plain insert's
  return to the first job's start; the root's start to the first leaf's start (the root's run, its
  completion written, the promotion of its 998 dependents, their claim); the first
  leaf's start to the last leaf's completion beside the plain jobs' first start to their
  last completion; the last leaf's completion to the join's start.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from riverboat.runtime.producer import DEFAULT_FETCH_COOLDOWN

__all__ = ["run_workflow_bench"]

FAN_TASKS = 1000
# Idle time before each timed insert: longer than the producer's fetch cooldown, so a
# round does not wait out the pacing of the previous round's claims.
IDLE_GAP = DEFAULT_FETCH_COOLDOWN + 0.05
FAN_ROUNDS = 5
CHAIN_TASKS = 100
LATENCY_SAMPLES = 21


async def run_workflow_bench(
    make_client: Callable[..., Any], progress: Callable[[str], None]
) -> dict[str, Any]:
    import riverboat
    from riverboat import Job, QueueConfig, Workers, Workflow

    workers = Workers()
    state: dict[str, Any] = {
        "left": 0,
        "done": asyncio.Event(),
        "started": {},
        "completed": {},
        "unfinished": 0,
        "finished": asyncio.Event(),
    }

    @workers.register("bench_wf_step")
    async def step(job: Job[Any]) -> None:
        state["started"][job.id] = time.perf_counter()
        state["left"] -= 1
        if state["left"] == 0:
            state["done"].set()

    client: riverboat.AsyncClient = make_client(
        queues={"default": QueueConfig(max_workers=100)}, workers=workers
    )
    completions = client.subscribe(riverboat.EventKind.JOB_COMPLETED, maxsize=10 * FAN_TASKS)

    async def count_completions() -> None:
        async for event in completions:
            if event.job is not None and event.job.kind == "bench_wf_step":
                state["completed"][event.job.id] = time.perf_counter()
                state["unfinished"] -= 1
                if state["unfinished"] == 0:
                    state["finished_at"] = time.perf_counter()
                    state["finished"].set()

    await client.start()
    counter = asyncio.create_task(count_completions())
    try:

        def expect(count: int) -> None:
            state["left"] = count
            state["done"] = asyncio.Event()
            state["unfinished"] = count
            state["completed"] = {}
            state["finished"] = asyncio.Event()

        async def finish(t0: float) -> tuple[float, float]:
            """(to the last start, to the last completion written) since ``t0``."""
            await asyncio.wait_for(state["done"].wait(), 300)
            started = time.perf_counter() - t0
            await asyncio.wait_for(state["finished"].wait(), 300)
            return started, state["finished_at"] - t0

        # Where the time goes, per round (ms), for the medians reported beside the totals.
        phases: dict[str, list[float]] = {
            name: []
            for name in (
                "plain_insert",
                "fan_insert",
                "plain_insert_to_first",
                "fan_insert_to_root",
                "fan_root_to_leaves",
                "plain_run",
                "fan_leaves",
                "fan_last_leaf_to_join",
            )
        }

        def ms(seconds: float) -> float:
            return seconds * 1000

        async def run_plain() -> tuple[float, float]:
            await asyncio.sleep(IDLE_GAP)
            expect(FAN_TASKS)
            t0 = time.perf_counter()
            inserted = await client.insert_many(
                [
                    riverboat.InsertManyParams({"i": i}, kind="bench_wf_step")
                    for i in range(FAN_TASKS)
                ]
            )
            inserted_at = time.perf_counter()
            result = await finish(t0)
            ids = [r.job.id for r in inserted]
            started, completed = state["started"], state["completed"]
            phases["plain_insert"].append(ms(inserted_at - t0))
            phases["plain_insert_to_first"].append(ms(min(started[i] for i in ids) - inserted_at))
            phases["plain_run"].append(
                ms(max(completed[i] for i in ids) - min(started[i] for i in ids))
            )
            return result

        async def run_fan() -> tuple[float, float]:
            wf = Workflow("bench-fan")
            root = wf.add("root", {}, kind="bench_wf_step")
            leaves = [
                wf.add(f"leaf{i}", {}, kind="bench_wf_step", deps=[root])
                for i in range(FAN_TASKS - 2)
            ]
            wf.add("join", {}, kind="bench_wf_step", deps=leaves)
            await asyncio.sleep(IDLE_GAP)
            expect(FAN_TASKS)
            t0 = time.perf_counter()
            info = await client.workflow_insert(wf)
            inserted_at = time.perf_counter()
            result = await finish(t0)
            root_id, join_id = info.task("root").job.id, info.task("join").job.id
            leaf_ids = [t.job.id for t in info.tasks if t.job.id not in (root_id, join_id)]
            started, completed = state["started"], state["completed"]
            first_leaf = min(started[i] for i in leaf_ids)
            last_leaf_done = max(completed[i] for i in leaf_ids)
            phases["fan_insert"].append(ms(inserted_at - t0))
            phases["fan_insert_to_root"].append(ms(started[root_id] - inserted_at))
            phases["fan_root_to_leaves"].append(ms(first_leaf - started[root_id]))
            phases["fan_leaves"].append(ms(last_leaf_done - first_leaf))
            phases["fan_last_leaf_to_join"].append(ms(started[join_id] - last_leaf_done))
            return result

        promoter = client.runtime.workflow_promoter
        assert promoter is not None
        # Runs of a few hundred ms swing with whatever else the machine does: several
        # rounds, alternating, and the median of each.
        plains: list[tuple[float, float]] = []
        fans: list[tuple[float, float]] = []
        fan_statements = 0
        for round_ in range(1, FAN_ROUNDS + 1):
            # Which goes first alternates: each round leaves 1,000 to 2,000 finalized rows
            # and their dead row versions behind, which every later claim walks past
            # until autovacuum runs, so the one always second ran on a bigger table.
            plain_first = round_ % 2 == 1
            progress(
                "workflow: 1,000 plain jobs and a 1,000-task fan-out/fan-in, "
                f"{'plain' if plain_first else 'fan-out'} first ({round_})"
            )
            if plain_first:
                plains.append(await run_plain())
            before = promoter.statements
            fans.append(await run_fan())
            fan_statements += promoter.statements - before
            if not plain_first:
                plains.append(await run_plain())
        fan_statements //= FAN_ROUNDS
        plain_started, plain = (statistics.median(p[i] for p in plains) for i in (0, 1))
        fan_started, fan = (statistics.median(f[i] for f in fans) for i in (0, 1))

        progress("workflow: pick-up latency of one job into an idle queue")
        latencies = []
        for i in range(LATENCY_SAMPLES):
            expect(1)
            t0 = time.perf_counter()
            job = (await client.insert({"i": i}, kind="bench_wf_step")).job
            await asyncio.wait_for(state["done"].wait(), 60)
            latencies.append(state["started"][job.id] - t0)
            await client.job_wait(job.id, timeout=60)  # its completion is written
        pickup = statistics.median(latencies)

        progress("workflow: 100-step chain")
        wf = Workflow("bench-chain")
        previous = None
        for i in range(CHAIN_TASKS):
            previous = wf.add(
                f"step{i}", {}, kind="bench_wf_step", deps=[previous] if previous else []
            )
        await asyncio.sleep(IDLE_GAP)
        expect(CHAIN_TASKS)
        before = promoter.statements
        t0 = time.perf_counter()
        await client.workflow_insert(wf)
        chain, _ = await finish(t0)
        chain_statements = promoter.statements - before
    finally:
        completions.close()
        counter.cancel()
        await client.stop()
        await client.close()
    return {
        "fan_out_fan_in_s": round(fan, 3),
        "plain_1000_s": round(plain, 3),
        "fan_vs_plain": round(fan / plain, 2) if plain else None,
        "fan_out_fan_in_started_s": round(fan_started, 3),
        "plain_1000_started_s": round(plain_started, 3),
        "fan_vs_plain_started": round(fan_started / plain_started, 2) if plain_started else None,
        "fan_promotion_statements_per_task": round(fan_statements / FAN_TASKS, 3),
        **{f"{name}_ms": round(statistics.median(v), 1) for name, v in phases.items()},
        "pickup_latency_median_ms": round(pickup * 1000, 2),
        "chain_100_s": round(chain, 3),
        "chain_vs_100_pickups": round(chain / (CHAIN_TASKS * pickup), 2) if pickup else None,
        "chain_promotion_statements_per_task": round(chain_statements / CHAIN_TASKS, 3),
    }
