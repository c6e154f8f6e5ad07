"""``riverboat workflows`` on Postgres and SQLite: get, wait (with its exit codes),
cancel, retry, and an unknown id. In this process (tests/cli_in_process.py): what the
commands print and return, not the process that runs them."""

from __future__ import annotations

import json
import subprocess

from riverboat import Client, Workflow
from tests.runtime.dbs import Db, any_db  # noqa: F401


def _cli(db: Db, *args: str) -> subprocess.CompletedProcess[str]:
    return db.cli("workflows", *args)


def test_workflows_command(any_db: Db) -> None:  # noqa: F811
    wf = Workflow("cli")
    wf.add("first", {}, kind="step")
    wf.add("second", {}, kind="step", deps=["first"])
    with Client(any_db.url, schema=any_db.schema) as client:
        client.workflow_insert(wf)

    shown = _cli(any_db, "get", wf.id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"workflow {wf.id} (cli): running, 2 tasks"
    assert lines[2].split()[:2] == ["first", "available"]
    assert lines[3].split()[:2] == ["second", "pending"] and lines[3].split()[4] == "first"

    waited = _cli(any_db, "wait", wf.id, "--timeout", "0.1")
    assert waited.returncode == 3 and "still running" in waited.stderr

    cancelled = _cli(any_db, "cancel", wf.id, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    body = json.loads(cancelled.stdout)
    assert body["state"] == "failed"
    assert [t["job"]["state"] for t in body["tasks"]] == ["cancelled", "cancelled"]
    assert _cli(any_db, "wait", wf.id).returncode == 4

    retried = json.loads(_cli(any_db, "retry", wf.id, "--json").stdout)
    assert [t["job"]["state"] for t in retried["tasks"]] == ["available", "pending"]

    listed = _cli(any_db, "list")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == [
        "ID", "NAME", "STATE", "TASKS", "COMPLETED", "FAILED", "UNFINISHED", "CREATED"
    ]  # fmt: skip
    assert row.split()[:7] == [wf.id, "cli", "running", "2", "0", "0", "2"]
    [summary] = json.loads(_cli(any_db, "list", "--json").stdout)
    assert summary["id"] == wf.id and summary["unfinished"] == 2
    refused = _cli(any_db, "list", "--limit", "0")
    assert refused.returncode == 2 and "--limit: 0 is not between 1 and 100" in refused.stderr

    missing = _cli(any_db, "get", "wf_nope")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "riverboat: error: workflow wf_nope not found"


def test_a_bulk_retry_says_which_tasks_were_cancelled_again(any_db: Db) -> None:  # noqa: F811
    """``jobs retry --kind pay_step`` retried a workflow task whose dependency (not
    matched by the filter) had failed: the retry's promotion cancelled it again at once,
    and the command still said "retried 1 job". It now counts only what stayed retried
    and names the tasks cancelled again."""
    wf = Workflow("bulk")
    wf.add("charge", {}, kind="charge_step")
    wf.add("pay", {}, kind="pay_step", deps=["charge"])
    with Client(any_db.url, schema=any_db.schema) as client:
        info = client.workflow_insert(wf)
        client.job_cancel(info.task("charge").job.id)
        pay = client.job_get(info.task("pay").job.id)
        assert pay.state == "cancelled"

    retried = any_db.cli("jobs", "retry", "--kind", "pay_step")
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.startswith("retried 0 jobs (kind=pay_step)")
    assert retried.stderr.strip() == (
        "riverboat: 1 workflow task cancelled again: a dependency still failed (retry "
        f"that task, or the workflow): {pay.id}"
    )
    with Client(any_db.url, schema=any_db.schema) as client:
        assert client.job_get(pay.id).state == "cancelled"
