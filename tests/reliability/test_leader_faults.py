"""Scenario 3: the leader freezes past its TTL (SIGSTOP), another process takes over,
then the old leader wakes up (SIGCONT).

Both processes run the maintenance services plus a recorder service that, on every
run (every 50 ms), writes ``(leader_id, when the run began)`` to
``rel_maintenance_log``. The frozen leader's timers have all expired when it resumes;
it must notice its term is gone and stop maintenance *before* any service acts again.
So: no run of the old leader began after the new leader's first one, none after the
SIGCONT at all, and the old leader reports it lost leadership. A run that began before
the freeze may still write its row once the process wakes (the freeze came between its
leadership check and its statement): its row carries the time it began, before the
freeze, and passes: nothing fences a statement already decided on.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from tests.reliability._support import OutputReader, spawn_worker, sql, stop_process
from tests.waiting import wait_until


def _log_rows(url: str, schema: str) -> list[tuple[Any, ...]]:
    """(leader_id, at) rows, oldest first (``at``: when the run began)."""
    return sql(url, schema, "SELECT leader_id, at FROM rel_maintenance_log ORDER BY at, leader_id")


def _count(url: str, schema: str, leader: str, after: object = None) -> int:
    if after is None:
        return int(
            sql(
                url, schema, "SELECT count(*) FROM rel_maintenance_log WHERE leader_id = %s", leader
            )[0][0]
        )
    return int(
        sql(
            url,
            schema,
            "SELECT count(*) FROM rel_maintenance_log WHERE leader_id = %s AND at > %s",
            leader,
            after,
        )[0][0]
    )


def _seconds_since(pg_url: str, pg_schema: str, moment: Any) -> float:
    (now,) = sql(pg_url, pg_schema, "SELECT clock_timestamp()")[0]
    return float((now - moment).total_seconds())


def test_frozen_leader_steps_down_before_acting(
    tmp_path: Path, pg_url: str, pg_schema: str
) -> None:
    sql(
        pg_url,
        pg_schema,
        "CREATE TABLE rel_maintenance_log (leader_id text NOT NULL, at timestamptz NOT NULL)",
    )
    env = {"RB_RECORD_MAINTENANCE": "1"}
    a = spawn_worker(tmp_path, pg_url, pg_schema, **env, RB_CLIENT_ID="rel_A")
    a_out = OutputReader(a)
    b = None
    b_out = None
    try:
        a_out.wait_for(lambda line: line == "LEADER rel_A", 30)
        b = spawn_worker(tmp_path, pg_url, pg_schema, **env, RB_CLIENT_ID="rel_B")
        b_out = OutputReader(b)
        b_out.wait_for(lambda line: "started: queues" in line, 30)
        wait_until(
            lambda: _count(pg_url, pg_schema, "rel_A") >= 5, timeout=10, what="A's maintenance runs"
        )

        a.send_signal(signal.SIGSTOP)
        (stopped_at,) = sql(pg_url, pg_schema, "SELECT clock_timestamp()")[0]
        b_out.wait_for(lambda line: line == "LEADER rel_B", 15)
        wait_until(
            lambda: _count(pg_url, pg_schema, "rel_B") >= 5, timeout=10, what="B's maintenance runs"
        )
        # The scenario is a leader frozen past its term: B can take over and run five
        # times within the TTL of the freeze (when A's last re-election came just before
        # SIGSTOP), so keep A stopped until its 2 s TTL has surely passed.
        wait_until(
            lambda: _seconds_since(pg_url, pg_schema, stopped_at) > 2.5,
            timeout=10,
            what="A's term to run out",
        )
        (resumed_at,) = sql(pg_url, pg_schema, "SELECT clock_timestamp()")[0]
        frozen = (resumed_at - stopped_at).total_seconds()
        a.send_signal(signal.SIGCONT)
        a_out.wait_for(lambda line: line == "FOLLOWER rel_A", 10)
        # Let B keep acting for a while after A woke up.
        seen = _count(pg_url, pg_schema, "rel_B")
        wait_until(
            lambda: _count(pg_url, pg_schema, "rel_B") >= seen + 10, timeout=10, what="more B runs"
        )
        a_after_resume = _count(pg_url, pg_schema, "rel_A", resumed_at)
    finally:
        a.send_signal(signal.SIGCONT)
        stop_process(a)  # A first: B keeps leading, nobody takes over mid-check
        a_out.join()
        if b is not None and b_out is not None:
            stop_process(b)
            b_out.join()

    rows = _log_rows(pg_url, pg_schema)
    first_b = next(at for leader, at in rows if leader == "rel_B")
    a_rows_after_b = [at for leader, at in rows if leader == "rel_A" and at >= first_b]
    last_a = max(at for leader, at in rows if leader == "rel_A" and at < first_b)
    print(
        f"A froze {frozen:.1f}s (ttl 2s); "
        f"maintenance runs: A {sum(r[0] == 'rel_A' for r in rows)}, "
        f"B {sum(r[0] == 'rel_B' for r in rows)}; gap between A's last and B's first run "
        f"{(first_b - last_a).total_seconds():.2f}s; A runs after SIGCONT: {a_after_resume}"
    )
    assert frozen > 2.0, "the leader was frozen past its TTL"
    assert a_after_resume == 0, "the old leader acted after waking up"
    assert not a_rows_after_b, "two leaders acted at once"
    assert any("stepping down" in line or "leadership lost" in line for line in a_out.lines), (
        a_out.text()
    )
