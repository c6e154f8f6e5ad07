"""The ``flow`` part of the benchmark (a global limit that does not bind, four worker
processes) runs end to end with a tiny backlog and reports every figure; a long
scenario (sixteen runs of four processes). Its speed is in docs/flow-control.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from riverboat.bench.flow import PROCESSES, ROUNDS, SLOTS


@pytest.mark.long
def test_flow_part_pairs_each_round_and_reports_the_median(pg_url: str) -> None:
    bench = [sys.executable, "-m", "riverboat.cli", "bench", "--json", "--quiet"]
    out = subprocess.run(
        [*bench, "--database-url", pg_url, "--only", "flow", "--jobs", "400"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    flow = json.loads(out.stdout)["flow"]
    assert (flow["jobs"], flow["processes"], flow["slots"]) == (400, PROCESSES, SLOTS)
    assert flow["unlimited_jobs_per_sec"] > 0 and flow["global_limit_40_jobs_per_sec"] > 0
    # The workers' CPU per job, start-up subtracted (a tiny backlog may leave little).
    assert {"unlimited_worker_cpu_us_per_job", "global_limit_40_worker_cpu_us_per_job"} <= set(flow)
    ratios = flow["round_ratios"]
    assert len(ratios) == ROUNDS and all(r > 0 for r in ratios)
    middle = sorted(ratios)[ROUNDS // 2 - 1 : ROUNDS // 2 + 1]
    assert middle[0] <= flow["ratio"] <= middle[1]  # their median
