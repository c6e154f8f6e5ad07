"""What an operator does with ``riverboat jobs`` on Postgres and SQLite: find failed jobs
and why (list's last error, get's traces), count them, watch outcomes as they happen, and
retry/cancel/delete by filter with a dry run first. What the commands print and change
is checked in this process (tests/cli_in_process.py); following outcomes live, writing
into a closed pipe and a mistyped path run real subprocesses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import riverboat
from riverboat import InsertManyParams, InsertOpts, Job, JobState, QueueConfig, Workers
from tests.cli_in_process import cli_in_process
from tests.runtime.dbs import Db, any_db  # noqa: F401


class CardDeclined(Exception):
    pass


def _workers() -> Workers:
    workers = Workers()

    @workers.register("charge_card")
    async def charge_card(job: Job[Any]) -> None:
        raise CardDeclined(f"card {job.args['card']} was declined")

    @workers.register("send_email")
    async def send_email(job: Job[Any]) -> None:
        return None

    return workers


def _work(db: Db, params: list[InsertManyParams]) -> list[int]:
    with riverboat.Client(
        db.url,
        schema=db.schema,
        workers=_workers(),
        queues={"default": QueueConfig(max_workers=4), "mail": QueueConfig(max_workers=2)},
    ) as client:
        ids = [r.job.id for r in client.insert_many(params)]
        client.run_until_idle()
    return ids


def _charges(n: int, start: int = 0) -> list[InsertManyParams]:
    return [
        InsertManyParams(
            {"card": f"40{i:02d}", "customer": f"c{i}"},
            InsertOpts(max_attempts=1),
            kind="charge_card",
        )
        for i in range(start, start + n)
    ]


def _emails(n: int) -> list[InsertManyParams]:
    return [
        InsertManyParams({"to": f"u{i}@example.com"}, InsertOpts(queue="mail"), kind="send_email")
        for i in range(n)
    ]


def cli(db: Db, *argv: str) -> subprocess.CompletedProcess[str]:
    """``riverboat jobs ARGV`` against ``db``, in this process."""
    common = ["--database-url", db.url, *(["--schema", db.schema] if db.schema else [])]
    return cli_in_process("jobs", argv[0], *common, *argv[1:])


def test_find_what_failed_and_why(any_db: Db) -> None:  # noqa: F811
    ids = _work(any_db, _charges(3) + _emails(2))
    failed = ids[:3]

    listed = cli(any_db, "list", "--state", "discarded")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[-1] == "LAST_ERROR"
    assert len(rows) == 3
    assert all("CardDeclined: card 40" in row and "was declined" in row for row in rows), rows

    shown = cli(any_db, "get", str(failed[0]))
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert re.search(r"^state\s+discarded$", out, re.M)
    assert '"customer": "c0"' in out and '"card": "4000"' in out  # args, pretty-printed
    assert "metadata:" in out
    assert "errors (1):" in out and "attempt 1 at" in out
    assert "card 4000 was declined" in out
    assert "Traceback" in out and "raise CardDeclined" in out  # the trace, indented

    counted = cli(any_db, "count")
    assert counted.returncode == 0, counted.stderr
    by_state = {line.split()[0]: line.split()[1] for line in counted.stdout.splitlines()[1:]}
    assert by_state["discarded"] == "3" and by_state["completed"] == "2"
    assert by_state["total"] == "5" and by_state["running"] == "0"
    grouped = cli(any_db, "count", "--by", "queue", "--by", "kind", "--json")
    assert json.loads(grouped.stdout) == [
        {"queue": "default", "kind": "charge_card", "count": 3},
        {"queue": "mail", "kind": "send_email", "count": 2},
    ]


def test_bulk_retry_cancel_delete_by_filter(any_db: Db) -> None:  # noqa: F811
    _work(any_db, _charges(5) + _emails(2))

    dry = cli(any_db, "retry", "--kind", "charge_card", "--state", "discarded", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would retry 5 jobs (kind=charge_card, state=discarded")
    # With --json, a dry run is JSON too (it printed the sentence, and `| jq` failed).
    dry = cli(
        any_db, "retry", "--kind", "charge_card", "--state", "discarded", "--dry-run", "--json"
    )
    assert json.loads(dry.stdout) == {"action": "retry", "would": 5, "matching": 5}
    done = cli(
        any_db, "retry", "--kind", "charge_card", "--state", "discarded", "--batch-size", "2"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "retried 5 jobs (kind=charge_card, state=discarded)"
    counted = json.loads(cli(any_db, "count", "--json").stdout)
    assert {"state": "available", "count": 5} in counted

    again = cli(any_db, "retry", "--kind", "charge_card", "--state", "discarded")
    assert again.stdout.strip() == "no job to retry (kind=charge_card, state=discarded)"

    picked = cli(any_db, "cancel", "--args-key", "customer", "--args-text", "C3")
    assert picked.stdout.strip().startswith("cancelled 1 job "), picked.stdout
    gone = cli(any_db, "delete", "--state", "cancelled", "--older-than", "1h")
    assert gone.stdout.strip().startswith("no job to delete"), gone.stdout
    gone = cli(any_db, "delete", "--state", "cancelled", "--json")
    assert [j["args"]["customer"] for j in json.loads(gone.stdout)] == ["c3"]

    refused = cli(any_db, "delete")
    assert refused.returncode == 1
    assert refused.stderr.startswith("riverboat: error: filters: give job ids, or filters")
    bad_age = cli(any_db, "retry", "--older-than", "soon")
    assert bad_age.returncode == 2 and "not an age" in bad_age.stderr
    # Past year 1 it was an OverflowError's traceback.
    too_old = cli(any_db, "list", "--older-than", "99999999999d")
    assert too_old.returncode == 2 and "is more than 100 years (36500d)" in too_old.stderr
    assert cli(any_db, "list", "--older-than", "36500d").returncode == 0
    # A page size out of range is a usage error too, as a malformed one is (it was exit
    # 1, the API's refusal, after connecting).
    for limit in ("-1", "0", "10001"):
        bad_limit = cli(any_db, "list", "--limit", limit)
        assert bad_limit.returncode == 2, (limit, bad_limit.stderr)
        assert "is not between 1 and 10000" in bad_limit.stderr
    assert cli(any_db, "list", "--limit", "10000").returncode == 0
    for command in ("queues", "workflows"):
        common = [
            "--database-url",
            any_db.url,
            *(["--schema", any_db.schema] if any_db.schema else []),
        ]
        assert cli_in_process(command, "list", "--limit", "0", *common).returncode == 2
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        states = [j.state for j in client.job_list(limit=50, kinds=["charge_card"]).jobs]
    assert states.count(JobState.AVAILABLE) == 4 and len(states) == 4


def test_tag_filters_mean_the_same_for_list_count_and_the_actions(any_db: Db) -> None:  # noqa: F811
    """--tag was "every one" for list and "any of" for count and the actions: `cancel
    --tag a --tag b` acted on jobs that `list --tag a --tag b` did not show."""
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        ids = [
            client.insert({}, InsertOpts(tags=tags), kind="send_email").job.id
            for tags in (["aaa"], ["bbb"], ["aaa", "bbb"])
        ]
    for flag, expected in (("--tag", [ids[2]]), ("--any-tag", ids)):
        filters = [flag, "aaa", flag, "bbb"]
        listed = json.loads(cli(any_db, "list", *filters, "--json").stdout)
        assert sorted(j["id"] for j in listed) == expected
        counted = json.loads(cli(any_db, "count", *filters, "--json").stdout)
        assert sum(row["count"] for row in counted) == len(expected)
        dry = cli(any_db, "cancel", *filters, "--dry-run")
        assert dry.stdout.startswith(f"would cancel {len(expected)} job"), dry.stdout


def test_tail_prints_outcomes_as_they_happen(any_db: Db) -> None:  # noqa: F811
    _work(any_db, _charges(1) + _emails(1))
    # The two outcomes so far (--since), then one that happens while it watches.
    common = ["--database-url", any_db.url, *(["--schema", any_db.schema] if any_db.schema else [])]
    proc = subprocess.Popen(
        [sys.executable, "-m", "riverboat.cli", "jobs", "tail", *common, "--since", "1h",
         "--max-events", "3", "--timeout", "60", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    first = [proc.stdout.readline(), proc.stdout.readline()]
    assert any("completed" in line and "send_email" in line for line in first), first
    assert any(
        "discarded" in line and "error: CardDeclined: card 4000 was declined" in line
        for line in first
    ), first
    _work(any_db, _charges(1, start=7))
    third = proc.stdout.readline()
    assert "discarded" in third and "card 4007 was declined" in third, third
    assert proc.wait(timeout=30) == 0
    proc.stdout.close()
    assert proc.stderr is not None and proc.stderr.read() == ""
    proc.stderr.close()


def test_tail_prints_an_outcome_committed_after_a_newer_one(pg_url: str, pg_schema: str) -> None:
    """A job finalized in a transaction that commits late has its transaction's start
    (now()) as finalized_at, older than outcomes tail printed meanwhile: tail's cursor
    had moved past it, and it was never printed."""
    import psycopg

    with riverboat.Client(pg_url, schema=pg_schema) as client:
        late, early = (client.insert({}, kind=kind).job.id for kind in ("late", "early"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "riverboat.cli", "jobs", "tail", "--database-url", pg_url,
         "--schema", pg_schema, "--since", "1m", "--max-events", "2", "--timeout", "20",
         "--interval", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    try:
        with psycopg.connect(pg_url) as conn:
            conn.execute(
                f"UPDATE \"{pg_schema}\".river_job SET state = 'cancelled',"
                " finalized_at = now() WHERE id = %s",
                (late,),
            )
            with riverboat.Client(pg_url, schema=pg_schema) as client:
                client.job_cancel(early)
            first = proc.stdout.readline()
            assert f" job {early} " in first, first
        # committed now, its finalized_at before the outcome printed
        second = proc.stdout.readline()
        assert f" job {late} " in second, second
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_json_into_a_closed_pipe_is_quiet(any_db: Db) -> None:  # noqa: F811
    _work(any_db, _emails(300))
    common = ["--database-url", any_db.url, *(["--schema", any_db.schema] if any_db.schema else [])]
    command = [sys.executable, "-m", "riverboat.cli", "jobs", "list", *common, "--json",
               "--limit", "300"]  # fmt: skip
    reader = subprocess.Popen(["head", "-n", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    writer = subprocess.run(command, stdout=reader.stdin, stderr=subprocess.PIPE, timeout=60)
    assert reader.stdin is not None
    reader.stdin.close()
    assert reader.stdout is not None
    assert reader.stdout.read() == b"[\n"
    reader.stdout.close()
    assert reader.wait(timeout=30) == 0
    assert writer.stderr == b"", writer.stderr.decode()
    assert writer.returncode in (0, 141)


@pytest.mark.parametrize(
    "command",
    [["jobs", "list"], ["jobs", "get", "1"], ["jobs", "count"], ["queues", "list"], ["ui"]],
)
def test_a_mistyped_sqlite_path_is_an_error_not_a_new_file(
    tmp_path: Path, command: list[str]
) -> None:
    missing = tmp_path / "typo.sqlite3"
    done = subprocess.run(
        [sys.executable, "-m", "riverboat.cli", *command, "--database-url", f"sqlite:///{missing}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RIVERBOAT_TRACEBACK": ""},
    )
    assert done.returncode == 1
    assert done.stderr.startswith(f"riverboat: error: database_url: no SQLite file at {missing}")
    assert "riverboat migrate up" in done.stderr
    assert not missing.exists()


def test_a_sqlite_url_naming_a_directory_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from riverboat.cli import main as cli_main

    code = cli_main(["jobs", "list", "--database-url", f"sqlite:///{tmp_path}"])
    err = capsys.readouterr().err
    assert code == 1 and f"{tmp_path} is a directory, not a SQLite file" in err, err


@pytest.mark.parametrize("command", [["jobs", "count"], ["queues", "list"], ["ui"]])
def test_a_mistyped_sqlite_schema_is_an_error_not_a_new_file(
    sqlite_url: str, command: list[str]
) -> None:
    """On SQLite a schema is a file beside the database, which opening it attached (and
    so created, empty): a mistyped --schema left litter and said "not migrated"."""
    database = Path(sqlite_url.removeprefix("sqlite:///"))
    sibling = database.with_name(f"{database.stem}-typo{database.suffix}")
    argv = [*command, "--database-url", sqlite_url, "--schema", "typo"]
    done = subprocess.run(
        [sys.executable, "-m", "riverboat.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RIVERBOAT_TRACEBACK": ""},
    )
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"riverboat: error: schema: no SQLite file for schema 'typo' at {sibling}"
    ), done.stderr
    assert not sibling.exists()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # NaN passed the old check: as the interval, tail polled without pausing; as
        # the timeout, it never stopped.
        (["jobs", "tail", "--interval", "0"], "above 0"),
        (["jobs", "tail", "--interval", "nan"], "above 0"),
        (["jobs", "tail", "--interval", "inf"], "above 0"),
        (["jobs", "tail", "--timeout", "nan"], "at least 0"),
        (["jobs", "tail", "--max-events", "0"], "below 1"),
        (["jobs", "wait", "1", "--timeout", "-5"], "at least 0"),
        (["jobs", "retry", "--all", "--batch-size", "0"], "between 1 and 10000"),
        (["jobs", "list", "--priority", "9"], "between 1 and 4"),
        (["workers", "scale", "default", "0"], "between 1 and 10000"),
        (["workflows", "wait", "wf_x", "--timeout", "-1"], "at least 0"),
    ],
)
def test_bad_option_values_are_usage_errors_before_anything_connects(
    argv: list[str], says: str
) -> None:
    """They were refused by the call after connecting (exit 1): against a database
    that does not answer, the user waited and saw only the connection's error."""
    unreachable = "postgresql://postgres@127.0.0.1:9/nowhere"  # nothing listens
    done = cli_in_process(*argv, "--database-url", unreachable)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert "error: argument" in done.stderr and says in done.stderr, done.stderr
