"""``riverboat demo`` end to end: a real subprocess on a temporary directory, non-TTY."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

from riverboat.demo import run_demo

FAST_JOBS = 12
# Fast jobs plus the flaky, snoozed and unique ones complete; the scheduled one too when
# the runtime runs a scheduler on SQLite.
ALWAYS_COMPLETED = FAST_JOBS + 3


def _demo(cwd: Path, jobs: int = FAST_JOBS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riverboat.cli", "demo", "--jobs", str(jobs)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=90,
    )


def _summary_row(output: str, state: str) -> list[str]:
    match = re.search(rf"^\s+{state}\s+(\d+)\s+(.+)$", output, re.MULTILINE)
    assert match, f"no {state} row in:\n{output}"
    return [match.group(1), *re.split(r"\s{2,}", match.group(2).strip())]


def _duration(output: str) -> float:
    match = re.search(r"^finished in ([\d.]+) s$", output, re.MULTILINE)
    assert match, output
    return float(match.group(1))


def test_demo_runs_the_whole_mix_and_summarises_it(tmp_path: Path) -> None:
    run = _demo(tmp_path)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert (tmp_path / "riverboat-demo.sqlite3").exists()
    assert "migrated riverboat-demo.sqlite3 to River's schema (versions 1..8)" in out
    assert "\nsummary\n" in out

    # Second insert of the unique job was skipped, returning the first one.
    assert re.search(r"^duplicates skipped: 1 \(the second insert returned job #\d+\)$", out, re.M)
    assert "second insert skipped as a duplicate" in out
    # The flaky job failed twice, then completed on its third attempt.
    assert out.count("demo_charge_card") >= 3
    assert "flaky job: completed after 2 retries (attempt 3)" in out
    assert "snoozed job: snoozed 1 time(s) for 2 s, then completed" in out

    completed = _summary_row(out, "completed")
    scheduler_ran = "scheduled job: ran" in out
    assert int(completed[0]) == ALWAYS_COMPLETED + (1 if scheduler_ran else 0)
    assert completed[-1] == "2"  # retries: the flaky job's two
    assert _summary_row(out, "cancelled")[0] == "1"
    assert _summary_row(out, "discarded")[0] == "1"
    if not scheduler_ran:
        assert _summary_row(out, "scheduled")[0] == "1"
        assert "scheduled job: still scheduled" in out
    assert re.search(r"^periodic job: (skipped: |\d+ runs completed)", out, re.M)

    # Well under the minute the demo promises, by its own clock.
    assert _duration(out) < 30


def test_demo_reuses_its_database_and_clears_its_own_rows(tmp_path: Path) -> None:
    first = _demo(tmp_path, jobs=3)
    assert first.returncode == 0, first.stdout + first.stderr
    second = _demo(tmp_path, jobs=3)
    out = second.stdout
    assert second.returncode == 0, out + second.stderr
    assert "already has River's schema; reusing it" in out
    assert re.search(r"deleted \d+ jobs left by an earlier demo run", out)
    # Only this run's jobs are counted, and the unique job is new again.
    assert _summary_row(out, "cancelled")[0] == "1"
    assert "duplicates skipped: 1" in out


def test_demo_rejects_a_bad_job_count(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "riverboat.cli", "demo", "--jobs", "0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 1
    assert "--jobs" in run.stderr


def test_demo_on_postgres_uses_the_leaders_scheduler_and_periodic_jobs(
    pg_url: str, pg_schema: str
) -> None:
    sep = "&" if "?" in pg_url else "?"
    url = f"{pg_url}{sep}options=-csearch_path%3D{pg_schema}"
    out = io.StringIO()
    report = run_demo(url, jobs=5, out=out, plain=True)
    text = out.getvalue()
    assert report.ok, text
    assert report.scheduler
    assert "scheduled job: ran 3 s after insert as scheduled" in text
    assert re.search(r"^periodic job: [2-9] runs completed", text, re.M), text
    assert int(_summary_row(text, "completed")[0]) == 5 + 4
    assert "flaky job: completed after 2 retries (attempt 3)" in text
    assert report.duration < 30
