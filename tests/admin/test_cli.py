"""``riverboat jobs ...`` and ``riverboat queues ...`` against real Postgres."""

from __future__ import annotations

import json
from typing import Any

import pytest

import riverboat
from riverboat.cli import main
from tests.admin.helpers import force_state, insert


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_jobs_commands(
    client: riverboat.Client,
    pg_url: str,
    pg_schema: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    common = ["--database-url", pg_url, "--schema", pg_schema]
    a = insert(client, kind="cli_a")
    b = insert(client, kind="cli_b", queue="other")
    c = insert(client, kind="cli_b")

    code, out, err = run(capsys, "jobs", "list", *common)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == [
        "ID", "KIND", "QUEUE", "STATE", "ATTEMPT", "PRI", "SCHEDULED_AT", "FINALIZED_AT",
        "LAST_ERROR",
    ]  # fmt: skip
    assert [line.split()[0] for line in lines[1:]] == [str(a.id), str(b.id), str(c.id)]

    code, out, err = run(
        capsys, "jobs", "list", *common, "--kind", "cli_b", "--json", "--limit", "1"
    )
    assert code == 0
    assert [j["id"] for j in json.loads(out)] == [b.id]
    assert "--cursor" in err
    cursor = err.split("--cursor", 1)[1].strip()
    code, out, err = run(capsys, "jobs", "list", *common, "--kind", "cli_b", "--json",
                         "--limit", "1", "--cursor", cursor)  # fmt: skip
    assert [j["id"] for j in json.loads(out)] == [c.id] and err == ""

    code, out, _ = run(capsys, "jobs", "cancel", *common, "--json", str(a.id))
    (cancelled,) = json.loads(out)
    assert cancelled["state"] == "cancelled" and "cancel_attempted_at" in cancelled["metadata"]

    code, out, _ = run(capsys, "jobs", "retry", *common, str(a.id))
    assert code == 0 and "available" in out.splitlines()[1]

    code, out, _ = run(capsys, "jobs", "get", *common, "--json", str(b.id), str(c.id))
    assert [j["kind"] for j in json.loads(out)] == ["cli_b", "cli_b"]

    force_state(pg_url, pg_schema, c.id, "running")
    code, _, err = run(capsys, "jobs", "delete", *common, str(c.id))
    assert code == 1 and "running" in err
    code, out, _ = run(capsys, "jobs", "delete", *common, str(b.id))
    assert code == 0 and str(b.id) in out
    code, _, err = run(capsys, "jobs", "get", *common, str(b.id))
    assert code == 1 and "not found" in err


def test_queues_commands(
    pg_driver: Any,
    pg_url: str,
    pg_schema: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", pg_url)  # the default for --database-url
    for name in ("beta", "alpha"):
        pg_driver.fetch(pg_driver.dialect.queue_create_or_set_updated_at(name))
    code, out, _ = run(capsys, "queues", "list", "--schema", pg_schema)
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == ["NAME", "alpha", "beta"]

    code, out, _ = run(capsys, "queues", "pause", "--schema", pg_schema, "--json", "beta")
    (row,) = json.loads(out)
    assert row["name"] == "beta" and row["paused_at"] is not None

    code, out, _ = run(capsys, "queues", "resume", "--schema", pg_schema, "--json", "*")
    assert [q["paused_at"] for q in json.loads(out)] == [None, None]

    code, _, err = run(capsys, "queues", "pause", "--schema", pg_schema, "ghost")
    assert code == 1 and "not found" in err


def test_missing_database_url(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    code, _, err = run(capsys, "queues", "list")
    assert code == 1 and "DATABASE_URL" in err
