"""The CLI against input and surroundings a user did not mean: each is one
``riverboat: error:`` line and an exit code, never a traceback, and nothing is changed
silently."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

import riverboat
from tests.cli_in_process import cli_in_process
from tests.runtime.dbs import Db, any_db  # noqa: F401


def _riverboat(
    *argv: str, stdout: int | IO[str] = subprocess.PIPE
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riverboat.cli", *argv],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )


def test_output_that_cannot_be_written_is_one_line() -> None:
    with open("/dev/full", "w") as full:
        out = _riverboat("migrate", "get-sql", stdout=full)
    assert out.returncode == 1
    assert out.stderr.strip() == "riverboat: error: writing output: No space left on device"


def test_an_empty_token_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ui.db'}"
    out = _riverboat("ui", "--database-url", url, "--token", "")
    assert out.returncode == 1
    assert out.stderr.strip() == "riverboat: error: --token: must not be empty"


def test_ids_act_on_each_and_name_the_missing(any_db: Db) -> None:  # noqa: F811
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        params = [riverboat.InsertManyParams({"n": n}, kind="tidy") for n in (1, 2)]
        ids = [r.job.id for r in client.insert_many(params)]
    out = any_db.cli("jobs", "delete", str(ids[0]), "424242", str(ids[1]))
    assert out.returncode == 1
    assert out.stderr.strip() == "riverboat: error: job 424242 not found"
    assert [line.split()[0] for line in out.stdout.splitlines()[1:]] == [str(i) for i in ids]
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        assert client.job_list(ids=ids).jobs == []
        again = client.insert({"n": 3}, kind="tidy").job.id
    # An id given twice acts once: it was deleted, then "not found", exit 1.
    out = any_db.cli("jobs", "delete", str(again), str(again))
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()[1:]] == [str(again)]
    # A running job among them is refused and the others still deleted (the refusal
    # stopped the command, and the ids after it were left).
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        params = [riverboat.InsertManyParams({"n": n}, kind="tidy") for n in (4, 5, 6)]
        first, running, last = [r.job.id for r in client.insert_many(params)]
    any_db.execute(
        "UPDATE river_job SET state = 'running', attempt = 1,"
        " attempted_at = '2024-01-01 00:00:00+00' WHERE id = %s",
        running,
    )
    out = any_db.cli("jobs", "delete", str(first), str(running), str(last))
    assert out.returncode == 1 and f"job {running}" in out.stderr, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()[1:]] == [str(first), str(last)]
    # Only missing ids: the errors, and no empty table above them.
    out = any_db.cli("jobs", "retry", "424242")
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr.strip() == "riverboat: error: job 424242 not found"


@pytest.mark.parametrize(
    "argv",
    [
        ("jobs", "count", "--args-text", "\udcff"),
        ("workflows", "get", "wf-\udcff"),
        ("periodic", "forget", "p-\udcff"),
        ("workers", "stop", "default", "--worker", "w-\udcff"),
    ],
    ids=["args-text", "workflow-id", "periodic-id", "worker-id"],
)
def test_bytes_that_are_not_utf8_are_one_line(any_db: Db, argv: tuple[str, ...]) -> None:  # noqa: F811
    """Bytes argv can't decode arrive as lone surrogates (``$'\\xff'`` in a shell); a
    real process, whose stdout refuses them."""
    out = any_db.cli(*argv, process=True)
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("riverboat: error: ") and "lone surrogate" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_stored_template_that_is_not_an_object_reads_as_none() -> None:
    """A periodic job's template stored as a JSON string (by hand, or by another client)
    reaches the decoder as its text from psycopg (which decodes jsonb): the CLI's and
    the dashboard's periodic lists were a JSONDecodeError."""
    from riverboat.dialect.postgres import PostgresDialect
    from riverboat.dialect.sqlite import SqliteDialect

    for dialect in (PostgresDialect(), SqliteDialect()):
        assert dialect.decode_json_object("hello") is None
        assert dialect.decode_json_object('"hello"') is None
        assert dialect.decode_json_object('{"kind": "k"}') == {"kind": "k"}


def test_stored_text_does_not_drive_the_terminal(any_db: Db) -> None:  # noqa: F811
    """A job's error (user data in an exception message) with escape sequences, a bell
    and a carriage return is printed with each control character escaped: raw, it
    cleared the operator's screen, retitled the window and faked output."""
    hostile = "x@y\x1b[2J\x1b]0;owned\x07\rAll jobs completed OK\x9b"
    workers = riverboat.Workers()

    @workers.register("signup")
    def signup(job: riverboat.Job[Any]) -> None:
        raise ValueError(f"invalid email {job.args['email']}")

    with riverboat.Client(
        any_db.url,
        schema=any_db.schema,
        queues={"default": riverboat.QueueConfig(max_workers=1)},
        workers=workers,
    ) as client:
        job = client.insert(
            {"email": hostile}, riverboat.InsertOpts(max_attempts=1), kind="signup"
        ).job
        client.run_until_idle()
    for argv in (("jobs", "list", "--state", "discarded"), ("jobs", "get", str(job.id))):
        out = any_db.cli(*argv)
        assert out.returncode == 0, out.stderr
        assert not any(c in out.stdout for c in "\x1b\x07\r\x9b"), argv
        assert "x@y\\x1b[2J\\x1b]0;owned\\x07" in out.stdout, argv
    # The detail keeps the carriage return, escaped (the list's one line folds it).
    assert "\\x07\\x0dAll jobs completed OK\\x9b" in out.stdout


def test_a_stored_workflow_name_does_not_drive_the_terminal(any_db: Db) -> None:  # noqa: F811
    """The header line of ``workflows get|wait|retry|cancel`` names the stored workflow:
    its control characters are escaped as the task table's are (raw, a name could fake
    a line of output or clear the screen)."""
    wf = riverboat.Workflow("report\rFAKE: all good\x1b[2J\nworkflow wf_x: completed")
    wf.add("only", {}, kind="never_worked")
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        client.workflow_insert(wf)
    for argv in (("get", wf.id), ("wait", wf.id, "--timeout", "0"), ("cancel", wf.id)):
        out = any_db.cli("workflows", *argv)
        assert not any(c in out.stdout for c in "\x1b\r"), argv
        assert "report\\x0dFAKE: all good\\x1b[2J\\x0aworkflow wf_x" in out.stdout, argv


def test_a_job_detail_shows_null_array_items_and_escapes_separators(
    pg_url: str, pg_schema: str
) -> None:
    """``jobs get`` of a row another client wrote: a NULL among its tags or attempted_by
    is shown as ``null`` (it was a traceback), a line separator in its args can't start
    a line of its own that looks like a field, and a right-to-left override in its kind
    is escaped."""
    import psycopg

    from tests.runtime.dbs import Db

    with psycopg.connect(pg_url, autocommit=True) as conn:
        job_id = conn.execute(
            f'INSERT INTO "{pg_schema}".river_job (args, kind, queue, tags, attempted_by) '
            "VALUES (%s, %s, 'default', ARRAY[NULL, 'a']::varchar[], ARRAY['host', NULL]) "
            "RETURNING id",
            ('{"note": "abc\u2028state  completed"}', "evil\u202ekind"),
        ).fetchone()[0]  # type: ignore[index]
    out = Db("postgres", pg_url, pg_schema).cli("jobs", "get", str(job_id))
    assert out.returncode == 0, out.stderr
    assert "null, a" in out.stdout and "host, null" in out.stdout
    assert "\u2028" not in out.stdout and "abc\\u2028state  completed" in out.stdout
    assert "evil\\u202ekind" in out.stdout


def _strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_json_output_of_a_number_past_float_range_is_json(sqlite_url: str) -> None:
    """A row River's Go client wrote on SQLite keeps a number such as ``1e400`` as it was
    given (a ``json.RawMessage``); Python reads it as ``inf``. ``--json`` printed it as
    ``Infinity``, which no JSON reader (``jq``) accepts: it is shown as its text, and
    named in ``decode_errors``."""
    from tests.runtime.dbs import Db

    db = Db("sqlite", sqlite_url, None)
    db.execute(
        "INSERT INTO river_job (args, kind, metadata) VALUES (%s, 'go_wrote', %s)",
        '{"big":1e400,"neg":-1e400,"ok":[1.5,2]}',
        '{"m":1e999}',
    )
    (job_id,) = db.execute("SELECT id FROM river_job WHERE kind = 'go_wrote'")[0]
    for argv in (("get", "--json", str(job_id)), ("list", "--json", "--kind", "go_wrote")):
        out = db.cli("jobs", *argv)
        assert out.returncode == 0, out.stderr
        (job,) = _strict_json(out.stdout)
        assert job["args"] == {"big": "1e400", "neg": "-1e400", "ok": [1.5, 2]}, argv
        assert job["metadata"] == {"m": "Infinity"}, argv
        assert any("args" in p for p in job["decode_errors"]), argv
        assert any("metadata" in p for p in job["decode_errors"]), argv
    # The text detail names the same problems (it named only the row's own).
    out = db.cli("jobs", "get", str(job_id))
    assert out.returncode == 0, out.stderr
    block = out.stdout.split("could not decode:\n", 1)[-1]
    assert "args: a number past float" in block and "metadata: a number past" in block, out.stdout


def test_lone_surrogates_from_json_escapes_are_printed_as_escapes(sqlite_url: str) -> None:
    """JSON's ``"\\ud800"`` escape decodes to a lone surrogate (Python's json.dumps and
    JavaScript write it; SQLite's json() keeps it), which no terminal encoding can
    write: ``jobs get``, ``jobs list`` and ``jobs tail`` (every line through the same
    ``printable``) printed a traceback in place of the job. They print its escape, as
    for control characters. (Postgres refuses such a value in jsonb.)"""
    db = Db("sqlite", sqlite_url, None)
    with riverboat.Client(sqlite_url) as client:
        job = client.insert({}, kind="surrogate").job
    db.execute(
        "UPDATE river_job SET args = jsonb(%s), errors = jsonb(%s), state = 'discarded',"
        " finalized_at = datetime('now'), attempt = 1 WHERE id = %s",
        '{"x":"\\ud800"}',
        '[{"at":"2024-01-01T00:00:00Z","attempt":1,"error":"e \\udfff"}]',
        job.id,
    )
    for argv in (
        ("jobs", "get", str(job.id)),
        ("jobs", "list", "--kind", "surrogate", "--state", "discarded"),
    ):
        out = db.cli(*argv)
        assert out.returncode == 0, out.stderr
        assert "e \\udfff" in out.stdout and "Traceback" not in out.stderr


def test_what_could_not_be_decoded_is_shown_in_text_and_json(sqlite_url: str) -> None:
    """A row another client wrote with times riverboat can't read (and an error entry
    without a readable "at"): ``jobs get`` printed the stand-in times as if stored, the
    reason only under ``--json``; and --json wrote the entry's stand-in time without an
    offset, unlike every other time there."""
    db = Db("sqlite", sqlite_url, None)
    with riverboat.Client(sqlite_url) as client:
        job = client.insert({}, kind="undecodable").job
    db.execute(
        "UPDATE river_job SET scheduled_at = 'garbage', errors = jsonb(%s) WHERE id = %s",
        '[{"at":"never","attempt":1,"error":"e"}]',
        job.id,
    )
    out = db.cli("jobs", "get", str(job.id))
    assert out.returncode == 0, out.stderr
    shown = out.stdout.split("could not decode:\n", 1)
    assert len(shown) == 2 and "scheduled_at" in shown[1].split("errors")[0], out.stdout
    out = db.cli("jobs", "get", str(job.id), "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert any(p.startswith("scheduled_at") for p in row["decode_errors"]), row
    assert [e["at"] for e in row["errors"]] == ["0001-01-01T00:00:00+00:00"]


@pytest.mark.parametrize(
    "argv",
    [
        ("jobs", "get", "\u0663"),  # an Arabic-Indic three
        ("jobs", "get", "\uff13"),  # a fullwidth three
        ("jobs", "delete", "1_0"),
        ("jobs", "list", "--older-than", "\u0663d"),
        ("jobs", "wait", "3", "--timeout", "1_0"),
        ("worker", "app:make_client", "--soft-stop-timeout", "\u0663"),
        # Past int64, the id column's range: these exited 1 after connecting.
        ("jobs", "get", "9223372036854775808"),
        ("jobs", "delete", "99999999999999999999"),
        ("jobs", "list", "--id", "9223372036854775808"),
        ("jobs", "wait", "9223372036854775808", "--timeout", "1"),
    ],
)
def test_numbers_are_ascii_digits(sqlite_url: str, argv: tuple[str, ...]) -> None:
    """Python's int() and float() read other scripts' digits and underscores: the
    first three acted on jobs 3 and 10. Refused before connecting (exit 2), as the
    dashboard refuses them."""
    with riverboat.Client(sqlite_url) as client:
        for n in range(10):
            client.insert({"n": n}, kind="ascii_ids")
    out = cli_in_process(*argv, "--database-url", sqlite_url)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    with riverboat.Client(sqlite_url) as client:
        assert len(client.job_list(kinds=["ascii_ids"], limit=20).jobs) == 10
