"""Scenario 25 (issue #25.9): args decode into the declared field types, and the worker
command refuses a bad ``--log-level`` with a usage error instead of a traceback.

Postgres keeps jsonb numbers in their shortest form, so ``1e16`` (Python's float) comes
back as ``10000000000000000``, which JSON decodes as an int; a dataclass field declared
``float`` still gets a float, whoever wrote the row (Postgres and SQLite).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import riverboat
from riverboat.testing import work_job
from tests.reliability._support import REPO
from tests.runtime.dbs import Db, any_db  # noqa: F401


@dataclass
class Measure:
    kind = "measure"
    ratio: float
    limit: float | None
    count: int


def test_floats_stored_in_exponent_form_decode_as_floats(any_db: Db) -> None:  # noqa: F811
    db = any_db
    seen: list[Measure] = []
    workers = riverboat.Workers()

    @workers.register(Measure)
    def measure(job: riverboat.Job[Measure]) -> None:
        seen.append(job.args)

    with riverboat.Client(db.url, schema=db.schema) as client:
        ours = client.insert(Measure(ratio=1e16, limit=1e20, count=3)).job
        assert client.job_get(ours.id).args["ratio"] == 1e16
        # As another client (Go, raw SQL) writes it: plain digits.
        raw = '{"ratio": 10000000000000000, "limit": 5, "count": 3}'
        cast = "jsonb(%s)" if db.dialect == "sqlite" else "%s::jsonb"
        db.execute(
            "INSERT INTO river_job (kind, args, state, max_attempts)"
            f" VALUES ('measure', {cast}, 'available', 1)",
            raw,
        )
        rows = client.job_list(kinds=["measure"]).jobs
        for row in rows:
            result: Any = work_job(client, workers, row)
            assert result.job.state.value == "completed", result
    assert len(seen) == 2
    for args in seen:
        assert type(args.ratio) is float and args.ratio == 1e16
        assert type(args.limit) is float
        assert type(args.count) is int


def test_worker_refuses_a_bad_log_level_with_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "riverboat.cli", "worker", "nosuch:client", "--log-level", "bogus"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "riverboat worker: error: argument --log-level: 'bogus' is not a logging level "
        "(DEBUG, INFO, WARNING, ERROR or CRITICAL)"
    )
