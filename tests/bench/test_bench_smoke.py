"""The benchmark runs end to end with tiny sizes and reports every figure the issue
names. Its shape is checked here, never its speed (speed lives in docs/benchmarks.md)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_in_process import cli_in_process

E2E_FIELDS = {
    "python_cpu_ms_per_job",
    "postgres_cpu_ms_per_job",
    "total_cpu_ms_per_job",
    "jobs_per_sec",
    "statements_per_job",
    "connection_resets",
    "followup_job_reads",
    "insert_many",
    "insert_single",
}
OPERATIONS = {
    "claim_50",
    "claim_complete",
    "update_job",
    "merge_metadata",
    "insert_pending",
    "upsert_queue",
    "leader_elect_resign",
    "cancel",
    "retry",
    "delete_finalized_1000",
}


# Under pytest-timeout's 120 s, so that a run that hangs says where (below).
BENCH_TIMEOUT = 100.0


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (Linux's /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(
        (line.split()[1] for line in status.splitlines() if line.startswith("SigCgt")), "0"
    )
    return bool(int(caught, 16) >> (signum - 1) & 1)


def _bench(*args: str) -> dict[str, object]:
    bench = subprocess.Popen(
        [sys.executable, "-m", "riverboat.cli", "bench", "--json", "--quiet", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    try:
        stdout, stderr = bench.communicate(timeout=BENCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        # What each of its tasks waits on (riverboat.runtime.stacks, while its event loop
        # runs), then every thread's stack (faulthandler, at SIGABRT) and the end.
        if _catches(bench.pid, signal.SIGUSR1):
            bench.send_signal(signal.SIGUSR1)
            with contextlib.suppress(subprocess.TimeoutExpired):
                bench.communicate(timeout=5)
        bench.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            bench.communicate(timeout=5)
        bench.kill()
        _, stderr = bench.communicate()
        pytest.fail(f"riverboat bench {' '.join(args)} hung; its stacks:\n{stderr[-20000:]}")
    assert bench.returncode == 0, stderr
    report: dict[str, object] = json.loads(stdout)
    return report


# The default driver (psycopg) runs every part, 'scenarios' too. The other drivers run
# the parts whose statements go through the driver under test and whose code differs
# between drivers: the operations, the end-to-end loop, the defaults' pools and the
# inserts. What runs on psycopg alone is the same code on every driver: the raw-SQL
# floor (plain psycopg; with it, e2e would run in 4 rounds), the job kinds (the
# executor's, over the e2e loop's statements), the scenarios (a SQLite batch claim, and
# a plan read over a plain psycopg connection) and the latency part (its inserter is a
# psycopg client in another process, its SQLite half needs no Postgres driver; the
# listeners it wakes through are each driver's, tested in tests/drivers/test_listen.py).
_DRIVER_PARTS = ("ops", "e2e", "defaults", "inserts")
LATENCY_JOBS = 4
BURST_JOBS = 40
# The scenarios' shape needs a few hundred rows, not the seed's 5,000 claims and 100,000
# rows (the plan is chosen from the statistics, which say the table is empty either way).
SCENARIO_SIZES = ("--claim-jobs", "300", "--stale-rows", "2000")


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg", "sqlalchemy"])
def test_bench_json_shape_on_postgres(pg_url: str, driver: str) -> None:
    parts = None if driver == "psycopg" else _DRIVER_PARTS
    only = [] if parts is None else [arg for part in parts for arg in ("--only", part)]
    args = ("--database-url", pg_url, "--driver", driver, "--jobs", "300", "--calls", "5")
    # The latency part's sizes: its shape needs a few jobs per pick-up figure and a
    # burst, not the 10 and 150 that --jobs 300 implies (each pick-up spaces its jobs
    # 20 ms apart; the burst is single inserts from another process).
    sizes = ("--latency-jobs", str(LATENCY_JOBS), "--burst-jobs", str(BURST_JOBS))
    report = _bench(*args, *sizes, *SCENARIO_SIZES, *only)
    ran = {
        "ops": "operations",
        "e2e": "end_to_end",
        "floor": "raw_sql_floor",
        "defaults": "defaults",
        "inserts": "inserts",
        "latency": "latency",
        "job-kinds": "job_kinds",
        "scenarios": "scenarios",
    }
    if parts is not None:  # only what was named
        assert {part for part, key in ran.items() if key in report} == set(parts)
    assert report["driver"] == driver
    # What the figures were measured with: Python, psycopg's implementation, durability.
    assert report["python_version"] and report["psycopg_impl"] in ("c", "binary", "python")
    assert report["fsync"] in ("on", "off") and report["synchronous_commit"]
    ops = {op["name"]: op for op in report["operations"]}  # type: ignore[attr-defined]
    assert set(ops) == OPERATIONS
    assert all(op["statements_per_call"] > 0 for op in ops.values())
    e2e = report["end_to_end"]
    assert isinstance(e2e, dict) and E2E_FIELDS <= set(e2e)
    assert e2e["jobs"] == 300
    assert e2e["connection_resets"] == 0 and e2e["followup_job_reads"] == 0
    assert e2e["statements_per_job"] < 1
    # At defaults (only max_workers set): every job of the backlog worked, for 20 and 100.
    defaults = report["defaults"]
    assert isinstance(defaults, list)
    assert [(d["max_workers"], d["jobs"]) for d in defaults] == [(20, 300), (100, 300)]
    inserts = {figure["name"]: figure for figure in report["inserts"]}  # type: ignore[attr-defined]
    assert set(inserts) == {"insert_many", "insert_many_fast", "insert"}
    assert inserts["insert_many_fast"]["floor"] == "raw_copy"
    assert all(figure["jobs_per_sec"] > 0 for figure in inserts.values())
    if "latency" in (parts or ran):
        _check_latency(report["latency"])
    if parts is not None:
        return
    assert e2e["rounds"] == 4  # interleaved with the floor's
    floor = report["raw_sql_floor"]
    assert isinstance(floor, dict) and floor["jobs"] == 300
    # Jobs/s of async and sync no-op jobs and of 10 ms I/O jobs, at max_workers=100.
    kinds = {figure["name"]: figure for figure in report["job_kinds"]}  # type: ignore[attr-defined]
    assert set(kinds) == {"async_noop", "sync_noop", "async_io_10ms"}
    assert all(k["jobs"] == 300 and k["jobs_per_sec"] > 0 for k in kinds.values())
    scenarios = report["scenarios"]
    assert isinstance(scenarios, dict)
    stale = scenarios["stale_statistics_completion"]
    assert stale["plan_uses_primary_key"] and not stale["plan_has_seq_scan_on_river_job"]
    assert scenarios["sqlite_batch_claim"]["batch_50_us_per_job"] > 0


def _check_latency(latency: object) -> None:
    """Pick-up latency at defaults and with River's pacing, on Postgres and on SQLite."""
    assert isinstance(latency, dict) and set(latency) == {"postgres", "sqlite"}
    pickups = [
        (p["database"], p["pacing"], p["inserter"]) for d in latency.values() for p in d["pickup"]
    ]
    assert sorted(pickups) == sorted(
        (db, pacing, inserter)
        for db, inserters in (
            ("postgres", ["other process"]),
            ("sqlite", ["other process", "same process"]),
        )
        for pacing in ("defaults", "river")
        for inserter in inserters
    )
    assert all(p["jobs"] == LATENCY_JOBS for d in latency.values() for p in d["pickup"])
    assert all(
        b["jobs"] == BURST_JOBS and b["claims_per_job"] > 0
        for d in latency.values()
        for b in d["burst"]
    )


def test_bench_on_sqlite_and_compare(tmp_path: Path) -> None:
    report = _bench("--driver", "sqlite", "--jobs", "200", "--calls", "5", "--only", "e2e")
    e2e = report["end_to_end"]
    assert isinstance(e2e, dict) and E2E_FIELDS <= set(e2e)
    assert e2e["postgres_cpu_ms_per_job"] is None  # no server to measure
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(report))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "riverboat.cli",
            "bench",
            "--driver",
            "sqlite",
            "--jobs",
            "200",
            "--only",
            "e2e",
            "--quiet",
            "--compare",
            str(baseline),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "end_to_end.jobs_per_sec" in out.stdout and "ratio" in out.stdout


def test_bench_duration_caps_the_working_phase() -> None:
    report = _bench("--driver", "sqlite", "--only", "e2e", "--jobs", "20000", "--duration", "0.3")
    e2e = report["end_to_end"]
    assert isinstance(e2e, dict)
    # Whatever was worked in the time, counted from completion events, never more.
    assert 0 < e2e["jobs"] <= 20000


# Imports of both SQLite modules fail, as on a machine without the sqlite extra (and a
# stdlib sqlite3 older than 3.45, or none at all).
_WITHOUT_SQLITE = """
import sys
sys.modules["sqlite3"] = None
sys.modules["sqlean"] = None
from riverboat.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_bench_on_postgres_without_the_sqlite_extra(pg_url: str, tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _WITHOUT_SQLITE,
            "bench",
            "--json",
            "--quiet",
            "--database-url",
            pg_url,
            "--jobs",
            "200",
            "--calls",
            "3",
            *SCENARIO_SIZES,
            "--only",
            "scenarios",
            "--only",
            "e2e",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )
    report = json.loads(out.stdout)
    # The SQLite scenario says why it was skipped; every other figure is there.
    skipped = report["scenarios"]["sqlite_batch_claim"]["skipped"]
    assert "riverboat[sqlite]" in skipped
    assert report["scenarios"]["stale_statistics_completion"]["plan_uses_primary_key"]
    assert report["end_to_end"]["jobs"] == 200
    assert list(tmpdir.iterdir()) == []  # no temp directories left behind


def test_bench_scale_part_works_every_job(pg_url: str) -> None:
    report = _bench(
        "--database-url", pg_url, "--only", "scale", "--jobs", "300", "--finalized-rows", "2000"
    )
    scale = report["scale"]
    assert isinstance(scale, dict)
    processes = scale["processes"]
    # riverboat worker --processes 1 and 2 each drained the backlog and exited.
    assert processes["processes_1_jobs_per_sec"] > 0 and processes["processes_2_jobs_per_sec"] > 0
    finalized = scale["finalized_rows"]
    assert finalized["finalized_rows"] == 2000
    assert finalized["empty_jobs_per_sec"] > 0 and finalized["finalized_jobs_per_sec"] > 0


def test_bench_process_part_reports_overhead_and_scaling() -> None:
    # 5 ms CPU-bound jobs instead of 100: the part's shape, not its figures, and ~11
    # CPU-seconds less on a machine the rest of the suite shares.
    report = _bench("--driver", "sqlite", "--jobs", "100", "--only", "process", "--cpu-job-ms", "5")
    process = report["process_executor"]
    assert isinstance(process, dict)
    noop = process["noop"]
    assert noop["jobs"] == 100 and noop["target_ms_per_job"] == 1.0
    assert noop["thread_ms_per_job"] > 0 and noop["process_ms_per_job"] > 0
    e2e = process["end_to_end"]
    assert e2e["jobs"] == 100 and e2e["children"] == process["cores"]
    for executor in ("thread", "process"):
        assert e2e[executor]["jobs_per_sec"] > 0 and e2e[executor]["cpu_ms_per_job"] > 0
    cpu = process["cpu"]
    assert cpu["job_seconds"] == 0.005
    assert [row["children"] for row in cpu["processes"]] == list(range(1, process["cores"] + 1))
    assert all(row["jobs_per_sec"] > 0 for row in cpu["processes"])
    assert cpu["threads"]["threads"] == process["cores"]
    assert "end_to_end" not in report  # only what was named


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--cpu-job-ms", "0"),
        ("--latency-jobs", "0"),
        ("--burst-jobs", "0"),
        ("--claim-jobs", "0"),
        ("--stale-rows", "-1"),
        ("--jobs", "0"),
        # NaN passed the test (no comparison with it is true) and ran the bench uncapped.
        ("--duration", "nan"),
        ("--duration", "inf"),
        ("--cpu-job-ms", "nan"),
    ],
)
def test_sizes_must_be_positive(flag: str, value: str) -> None:
    done = cli_in_process("bench", "--driver", "sqlite", flag, value)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(f"riverboat: error: {flag}"), done.stderr


@pytest.mark.parametrize(
    ("flag", "content", "said"),
    [
        ("--compare", None, "No such file or directory"),
        ("--compare", "not json", "is not a JSON report"),
        ("--compare", "[1]", "is not a JSON report (an object)"),
        ("--output", None, "no such directory"),
    ],
)
def test_report_files_are_checked_before_the_run(
    tmp_path: Path, flag: str, content: str | None, said: str
) -> None:
    """A --compare path that did not open (the docs' baselines are relative to the
    checkout) ended a whole run in a traceback, after it; the report is checked first."""
    path = tmp_path / ("baseline.json" if content is not None else "missing/report.json")
    if content is not None:
        path.write_text(content)
    done = cli_in_process("bench", "--driver", "sqlite", flag, str(path))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(f"riverboat: error: {flag}: ") and said in done.stderr


# River at its defaults works 20 jobs per 100 ms cooldown: 50 jobs are 0.25 s a run, of
# the twelve runs (two rounds of three, on Postgres and on SQLite); 200 took 1 s each.
RIVER_JOBS = 50


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the Go toolchain")
def test_compare_river_works_the_backlog_with_river_too(pg_url: str) -> None:
    report = _bench(
        "--database-url",
        pg_url,
        "--only",
        "ops",
        "--calls",
        "1",
        "--jobs",
        str(RIVER_JOBS),
        "--compare-river",
    )
    river = report["compare_river"]
    assert isinstance(river, dict) and "skipped" not in river, river
    runs = {run["name"]: run for run in river["runs"]}
    assert set(runs) == {"riverboat_defaults", "river_defaults", "river_fetch_cooldown_1ms"}
    # Every job of each backlog was worked, by riverboat and by River's process. (CPU is
    # read in clock ticks of 10 ms for the Go process: a small backlog may cost fewer.)
    assert all(run["jobs"] == RIVER_JOBS for run in runs.values()), runs
    assert all(run["client_cpu_ms_per_job"] >= 0 for run in runs.values()), runs
    # The same on a SQLite file, River through riversqlite.
    on_sqlite = report["compare_river_sqlite"]
    assert isinstance(on_sqlite, dict) and "skipped" not in on_sqlite, on_sqlite
    runs = {run["name"]: run for run in on_sqlite["runs"]}
    assert set(runs) == {"riverboat_defaults", "river_defaults", "river_fetch_cooldown_1ms"}
    assert all(run["jobs"] == RIVER_JOBS for run in runs.values())
    # River's own bench needs its CLI (go install from the module proxy, or
    # RIVERBOAT_RIVER_CLI): run beside riverboat, or skipped with the reason.
    river_bench = report["river_bench"]
    assert isinstance(river_bench, dict)
    if "skipped" in river_bench:
        assert "RIVERBOAT_RIVER_CLI" in river_bench["skipped"] or "Go" in river_bench["skipped"]
    else:
        names = {run["name"]: run for run in river_bench["runs"]}
        assert set(names) == {"river_bench", "riverboat_river_bench_settings"}
        assert all(run["jobs"] == RIVER_JOBS for run in names.values())


@pytest.mark.parametrize("database", ["postgres", "sqlite"])
def test_workflow_part_measures_the_graph_against_plain_jobs(pg_url: str, database: str) -> None:
    where = ["--database-url", pg_url] if database == "postgres" else ["--driver", "sqlite"]
    report = _bench(*where, "--only", "workflow")
    workflow = report["workflow"]
    assert isinstance(workflow, dict) and "end_to_end" not in report
    # Every figure is there and positive: both runs finished (their completions
    # counted from events), the chain ran, promotion statements were counted.
    for key in (
        "fan_out_fan_in_s",
        "plain_1000_s",
        "fan_vs_plain",
        "fan_vs_plain_started",
        "pickup_latency_median_ms",
        "chain_100_s",
        "chain_vs_100_pickups",
        "chain_promotion_statements_per_task",
    ):
        assert isinstance(workflow[key], (int, float)) and workflow[key] > 0, (key, workflow)
    assert workflow["fan_out_fan_in_started_s"] <= workflow["fan_out_fan_in_s"]
    # Where the fan-out/fan-in's time goes: each phase measured (the join starts after
    # the last leaf's completion, so that phase is positive too).
    for key in (
        "plain_insert_ms",
        "fan_insert_ms",
        "fan_root_to_leaves_ms",
        "plain_run_ms",
        "fan_leaves_ms",
        "fan_last_leaf_to_join_ms",
    ):
        assert isinstance(workflow[key], (int, float)) and workflow[key] > 0, (key, workflow)
    # Promotion is per completer batch, not per task.
    assert 0 < workflow["fan_promotion_statements_per_task"] < 0.5
