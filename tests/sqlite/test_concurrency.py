"""Several processes on one SQLite file: claims never overlap and "database is locked"
never escapes, even with a busy_timeout far too short to wait contention out."""

from __future__ import annotations

import multiprocessing
import random
import time
from typing import Any

from riverboat import Client, InsertManyParams, JobState
from riverboat.dialect.base import JobStateUpdate
from riverboat.drivers.sqlite import SqliteDriver

TOTAL = 1500


def _claimer(
    url: str, name: str, busy_timeout: float, out: Any, seed: int, start: Any, inserted: Any
) -> None:
    rng = random.Random(seed)
    try:
        claimed: list[int] = []
        with SqliteDriver(url, busy_timeout=busy_timeout) as driver:
            dialect = driver.dialect
            start.wait(timeout=60)  # every process begins together, however slow its spawn
            empty = 0
            # Stop after a quiet spell once everything is inserted (an early quiet spell,
            # before the inserter's first commit, is no reason to leave).
            while empty < 20 or not inserted.is_set():
                stmt = dialect.job_get_available(
                    queue="default", max_to_lock=rng.randint(1, 12), client_id=name
                )
                jobs = dialect.decode_jobs(driver.fetch(stmt))
                if not jobs:
                    empty += 1
                    time.sleep(0.005)  # an idle claimer's back-off, as a producer's poll
                    continue
                empty = 0
                claimed.extend(j.id for j in jobs)
                if rng.random() < 0.5:
                    driver.execute(
                        dialect.job_set_state_if_running_many(
                            [
                                JobStateUpdate(id=j.id, state=JobState.COMPLETED, finalized=True)
                                for j in jobs
                            ],
                            returning=False,
                        )
                    )
                else:
                    with driver.transaction() as tx:
                        tx.fetch(
                            dialect.job_set_state_if_running_many(
                                [
                                    JobStateUpdate(
                                        id=j.id, state=JobState.COMPLETED, finalized=True
                                    )
                                    for j in jobs
                                ]
                            )
                        )
        out.put((name, claimed, None))
    except BaseException as exc:  # reported to the parent, which fails the test
        out.put((name, [], repr(exc)))


def _inserter(url: str, busy_timeout: float, out: Any, start: Any, done: Any) -> None:
    try:
        with SqliteDriver(url, busy_timeout=busy_timeout) as driver:
            client = Client(driver, fetch_cooldown=0)
            start.wait(timeout=60)
            inserted = 0
            while inserted < TOTAL:
                n = min(50, TOTAL - inserted)
                client.insert_many(
                    [InsertManyParams({"i": inserted + k}, kind="contended") for k in range(n)]
                )
                inserted += n
        done.set()
        out.put(("inserter", [], None))
    except BaseException as exc:
        done.set()
        out.put(("inserter", [], repr(exc)))


def test_processes_never_claim_the_same_job(sqlite_url: str, test_seed: int) -> None:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    busy_timeout = 0.002  # shorter than any real contention, so the retry loop must cope
    start = ctx.Barrier(4)
    inserted = ctx.Event()
    procs = [ctx.Process(target=_inserter, args=(sqlite_url, busy_timeout, out, start, inserted))]
    procs += [
        ctx.Process(
            target=_claimer,
            args=(sqlite_url, f"worker-{i}", busy_timeout, out, test_seed + i, start, inserted),
        )
        for i in range(3)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=100) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    errors = [(name, err) for name, _, err in results if err]
    assert errors == []
    claimed = [job_id for _, ids, _ in results for job_id in ids]
    assert len(claimed) == len(set(claimed)), "a job was claimed twice"
    # Workers stop after a quiet spell; whatever they left is still claimable exactly once.
    with SqliteDriver(sqlite_url) as driver:
        rest = driver.dialect.decode_jobs(
            driver.fetch(
                driver.dialect.job_get_available(
                    queue="default", max_to_lock=TOTAL, client_id="sweeper"
                )
            )
        )
        all_ids = set(claimed) | {j.id for j in rest}
        assert len(all_ids) == len(claimed) + len(rest) == TOTAL
        multi = [j for j in rest if j.attempt != 1]
        assert multi == []
    # Several claimers really took part.
    assert sum(1 for _, ids, _ in results if ids) >= 2


def test_threads_sharing_one_driver(sqlite_url: str) -> None:
    import threading

    with SqliteDriver(sqlite_url) as driver:
        client = Client(driver)
        client.insert_many([InsertManyParams({"i": i}, kind="threaded") for i in range(300)])
        seen: list[int] = []
        lock = threading.Lock()

        def work() -> None:
            while True:
                jobs = driver.dialect.decode_jobs(
                    driver.fetch(
                        driver.dialect.job_get_available(
                            queue="default", max_to_lock=7, client_id="t"
                        )
                    )
                )
                if not jobs:
                    return
                with lock:
                    seen.extend(j.id for j in jobs)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(seen) == len(set(seen)) == 300
