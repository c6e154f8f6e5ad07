"""A network that stops answering without closing anything (issue #25.2).

A real ``riverboat worker`` process works jobs through :class:`FreezingProxy`, a TCP
proxy in front of Postgres that can stop forwarding while keeping every socket open:
a stalled peer, a NAT or failover black hole. Keepalives don't help there (the proxy's
kernel acknowledges them); the runtime's per-call deadline and the LISTEN health check
must find the dead connections, drop them and carry on over fresh ones.

(a) The connections open at the freeze stay frozen, new ones work: the worker says once
    per path that its calls fail, reconnects, says it recovered, and finishes every job,
    each run once, nothing left ``running``.
(b) Every connection, new ones too, frozen, then SIGTERM: the process exits within
    ``soft_stop_timeout`` + the stop's grace, saying what it could not write; a worker
    started afterwards finishes everything, re-running only jobs whose outcome the
    first could not write.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from riverboat.runtime.runner import STOP_GRACE
from tests.reliability._support import (
    FreezingProxy,
    OutputReader,
    counts_by_state,
    executions,
    insert_jobs,
    running_ids,
    spawn_worker,
    stop_process,
)
from tests.waiting import wait_until

CALL_TIMEOUT = 1.5

pytestmark = pytest.mark.serial


def _proxy(pg_url: str) -> FreezingProxy:
    import psycopg

    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    return FreezingProxy(str(info.get("host", "127.0.0.1")), int(info.get("port") or 5432)).start()


def _warnings(reader: OutputReader, since: int) -> list[str]:
    return [line for line in reader.lines[since:] if " WARNING " in line]


def test_worker_drops_frozen_connections_and_finishes_every_job(
    pg_url: str, pg_schema: str, tmp_path: Path
) -> None:
    jobs = 3000
    ids = insert_jobs(pg_url, pg_schema, "rel_work", [{"sleep": 0.01} for _ in range(jobs)])
    proxy = _proxy(pg_url)
    proc = spawn_worker(
        tmp_path,
        proxy.url(pg_url),
        pg_schema,
        RB_CALL_TIMEOUT=str(CALL_TIMEOUT),
        # A claim whose reply the freeze swallowed leaves its jobs running without
        # them ever starting here; the rescuer hands them back after this long.
        RB_RESCUE_AFTER="6",
        RB_MAX_WORKERS="20",
    )
    reader = OutputReader(proc)
    try:
        reader.wait_for(lambda line: "started: queues" in line, timeout=30)
        wait_until(
            lambda: counts_by_state(pg_url, pg_schema).get("completed", 0) >= 300,
            timeout=30,
            what="300 jobs completed before the freeze",
        )
        start = len(reader.lines)
        frozen = proxy.freeze()
        frozen_at = time.monotonic()
        # Found dead within the deadline (plus the time to log it on a busy machine).
        first = reader.wait_for(
            lambda line: "database calls failing" in line, timeout=CALL_TIMEOUT + 10, start=start
        )
        found_after = time.monotonic() - frozen_at
        reader.wait_for(lambda line: "database calls work again" in line, timeout=30, start=first)
        wait_until(
            lambda: counts_by_state(pg_url, pg_schema) == {"completed": jobs},
            timeout=60,
            poll=0.2,
            what=f"all {jobs} jobs completed after the freeze",
        )
        outage_lines = _warnings(reader, start)
    finally:
        code = stop_process(proc)
        reader.join()
        proxy.close()
    counts = executions(tmp_path)
    print(
        f"frozen {frozen} connections; first WARNING after {found_after:.2f}s; "
        f"{len(outage_lines)} WARNING lines during the outage; "
        f"{proxy.connections} connections through the proxy"
    )
    print("\n".join(outage_lines))
    assert code == 0, reader.text()
    assert set(counts) == set(ids), "every job ran"
    assert not [job for job, n in counts.items() if n > 1], "no job ran twice"
    assert not running_ids(pg_url, pg_schema)
    # One line per path found dead and one per recovery, not one per failed poll.
    paths = {m.group(1) for line in outage_lines if (m := re.search(r"riverboat\.(\w+):", line))}
    assert len(outage_lines) <= 4 * max(len(paths), 1) + 4, "\n".join(outage_lines)


def test_sigterm_while_every_connection_is_frozen_exits_in_bounded_time(
    pg_url: str, pg_schema: str, tmp_path: Path
) -> None:
    jobs = 60
    soft_stop = 2.0
    ids = insert_jobs(pg_url, pg_schema, "rel_work", [{"sleep": 0.3} for _ in range(jobs)])
    proxy = _proxy(pg_url)
    first_out = tmp_path / "first"
    first_out.mkdir()
    proc = spawn_worker(
        first_out,
        proxy.url(pg_url),
        pg_schema,
        "--soft-stop-timeout",
        str(soft_stop),
        RB_CALL_TIMEOUT=str(CALL_TIMEOUT),
        RB_MAX_WORKERS="10",
    )
    reader = OutputReader(proc)
    try:
        reader.wait_for(lambda line: "started: queues" in line, timeout=30)
        wait_until(
            lambda: counts_by_state(pg_url, pg_schema).get("completed", 0) >= 10,
            timeout=30,
            what="some jobs completed before the freeze",
        )
        proxy.freeze(new_too=True)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        code = proc.wait(soft_stop + STOP_GRACE + 15)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        reader.join()
        proxy.close()
    print(f"SIGTERM while frozen: exit {code} after {took:.2f}s (soft stop {soft_stop:g}s)")
    print("\n".join(reader.lines[-12:]))
    assert code == 0, reader.text()
    assert "not written" in reader.text(), "the stop says what it left behind"
    left_running = running_ids(pg_url, pg_schema)

    # A second worker, straight to Postgres, rescues and finishes what was left.
    second_out = tmp_path / "second"
    second_out.mkdir()
    second = spawn_worker(second_out, pg_url, pg_schema, RB_RESCUE_AFTER="2")
    second_reader = OutputReader(second)
    try:
        wait_until(
            lambda: counts_by_state(pg_url, pg_schema) == {"completed": jobs},
            timeout=30,
            poll=0.2,
            what="every job completed by the second worker",
        )
    finally:
        stop_process(second)
        second_reader.join()
    counts = executions(first_out) + executions(second_out)
    assert set(counts) == set(ids)
    twice = {job for job, n in counts.items() if n > 1}
    # At least once: only a job whose outcome the frozen worker could not write ran again.
    assert twice <= left_running, (twice - left_running, reader.text())
