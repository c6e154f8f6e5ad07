"""Scenario 23 (issue #25): args and metadata that refer to themselves or nest deeply.

* Insert refuses a value that contains itself (it used to spin at 100 % CPU for ever,
  growing memory when the value referred to itself twice) and nesting deeper than
  ``MAX_JSON_DEPTH`` (128; it used to accept 985-994 levels no worker could decode and
  raise a raw RecursionError past that), with an ``InvalidInputError`` naming the field,
  before anything is written (Postgres and SQLite).
* Rows already stored that nest deeper (written by Go or raw SQL) are read by every
  reader: the worker fails one it can't decode with a clear error and works the rest,
  the dashboard's list and job pages answer 200, the CLI prints them; ``jobs list
  --metadata`` with deeply nested JSON is one ``riverboat: error:`` line.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import threading
from dataclasses import dataclass
from typing import Any

import pytest

import riverboat
from riverboat import InvalidInputError, Job, QueueConfig, Workers
from riverboat._json import MAX_JSON_DEPTH
from riverboat.cli import main as cli_main
from riverboat.ui import create_app
from tests.reliability._support import counts_by_state, is_sqlite, job_table, query
from tests.ui.conftest import Served
from tests.waiting import wait_until_async


@pytest.fixture(params=["postgres", "sqlite"])
def db(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), request.getfixturevalue("pg_schema")
    return request.getfixturevalue("sqlite_url"), None


def nested(depth: int) -> Any:
    """``depth`` levels of objects and arrays (the outermost is level 1)."""
    value: Any = 1
    for level in range(depth - 1):
        value = [value] if level % 2 else {"n": value}
    return {"deep": value}


def nested_text(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@dataclass
class Holder:
    kind = "holder"
    inner: Any


def _within(seconds: float, call: Any) -> BaseException | None:
    """Run ``call`` on a thread; what it raised (None if it returned), failing the test if
    it is still running after ``seconds`` (a hang: the thread is left behind)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"still running after {seconds}s"
    return outcome[0]


def test_self_reference_and_deep_nesting_are_refused_at_insert(db: tuple[str, str | None]) -> None:
    url, schema = db
    itself: dict[str, Any] = {"a": 1}
    itself["me"] = itself
    twice: list[Any] = []
    twice.extend([twice, twice])
    via_dataclass: dict[str, Any] = {}
    via_dataclass["h"] = Holder(via_dataclass)
    cases: list[tuple[str, Any, str]] = [
        ("args", lambda c: c.insert(itself, kind="k_self"), "contains itself"),
        ("args", lambda c: c.insert({"l": twice}, kind="k_twice"), "contains itself"),
        ("args", lambda c: c.insert(Holder(via_dataclass)), "ircular"),
        (
            "opts.metadata",
            lambda c: c.insert({}, kind="k_meta", opts=riverboat.InsertOpts(metadata=itself)),
            "contains itself",
        ),
        ("args", lambda c: c.insert(nested(MAX_JSON_DEPTH + 1), kind="k_deep"), "128 levels"),
        ("args", lambda c: c.insert(nested(5000), kind="k_deeper"), "128 levels"),
        ("args", lambda c: c.insert(Holder(nested(MAX_JSON_DEPTH)), kind=None), "128 levels"),
        (
            "opts.metadata",
            lambda c: c.insert(
                {}, kind="k_meta", opts=riverboat.InsertOpts(metadata=nested(MAX_JSON_DEPTH + 1))
            ),
            "128 levels",
        ),
        (
            "params[1].args",
            lambda c: c.insert_many(
                [
                    riverboat.InsertManyParams({"ok": 1}, kind="k_many"),
                    riverboat.InsertManyParams(itself, kind="k_many"),
                ]
            ),
            "itself",
        ),
        ("metadata", lambda c: c.job_list(metadata=itself), "contains itself"),
        ("metadata", lambda c: c.job_list(metadata=nested(5000)), "128 levels"),
    ]

    class Text:
        kind = "k_text"

        def __init__(self, text: str) -> None:
            self.text = text

        def to_json(self) -> str:
            return self.text

    cases.append(("args", lambda c: c.insert(Text(nested_text(5000))), "128 levels"))
    with riverboat.Client(url, schema=schema) as client:
        for field, call, says in cases:
            error = _within(10, lambda call=call: call(client))
            assert isinstance(error, InvalidInputError), (field, repr(error))
            assert error.field.endswith(field.split(".")[-1]) or error.field == field, error
            assert says in str(error), str(error)
            assert "Recursion" not in str(error)
        assert counts_by_state(url, schema) == {}
        # The deepest accepted value goes in and is read back.
        job = client.insert(nested(MAX_JSON_DEPTH), kind="k_deepest").job
        assert client.job_get(job.id).args == nested(MAX_JSON_DEPTH)


def _insert_raw(url: str, schema: str | None, args_text: str, metadata_text: str = "{}") -> int:
    if is_sqlite(url):
        from riverboat.drivers._sqlite_module import sqlite_module

        conn = sqlite_module().connect(url.removeprefix("sqlite:///"))
        try:
            cur = conn.execute(
                "INSERT INTO river_job (kind, args, metadata, max_attempts, state, scheduled_at)"
                " VALUES ('deep', jsonb(?), jsonb(?), 1, 'available',"
                " strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 second')) RETURNING id",
                (args_text, metadata_text),
            )
            (job_id,) = cur.fetchone()
            conn.commit()
            return int(job_id)
        finally:
            conn.close()
    from tests.reliability._support import sql

    ((job_id,),) = sql(
        url,
        schema,
        "INSERT INTO river_job (kind, args, metadata, max_attempts, state, scheduled_at)"
        " VALUES ('deep', %s::jsonb, %s::jsonb, 1, 'available', now() - interval '1 second')"
        " RETURNING id",
        args_text,
        metadata_text,
    )
    return int(job_id)


def _get(base: str, path: str) -> tuple[int, str]:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    return response.status, body


def _cli(argv: list[str], url: str, schema: str | None) -> tuple[int | str | None, str, str]:
    full = [*argv, "--database-url", url] + (["--schema", schema] if schema else [])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code: int | str | None
        try:
            code = cli_main(full)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def test_readers_survive_deep_rows_already_stored(db: tuple[str, str | None]) -> None:
    url, schema = db
    # SQLite's JSON functions stop at 1,000 levels, so it can't store deeper.
    depths = (200, 980) if is_sqlite(url) else (200, 980, 5000)
    ids = {depth: _insert_raw(url, schema, nested_text(depth)) for depth in depths}
    deep_metadata = _insert_raw(url, schema, "{}", nested_text(depths[-1]))

    # The dashboard: the list of every available job and each job's page.
    served = Served(create_app(url, schema=schema))
    try:
        status, body = _get(served.url, "/jobs?state=available")
        assert status == 200, body[:500]
        for job_id in [*ids.values(), deep_metadata]:
            status, body = _get(served.url, f"/jobs/{job_id}")
            assert status == 200, (job_id, body[:500])
    finally:
        served.stop()

    # The CLI: a table, JSON, and a --metadata filter nested too deeply.
    job_ids = [str(job_id) for job_id in ids.values()]
    for argv in (["jobs", "list"], ["jobs", "list", "--json"], ["jobs", "get", "--json", *job_ids]):
        code, out, err = _cli(argv, url, schema)
        assert code == 0 and "Traceback" not in out + err, (argv, err[-2000:])
    code, out, err = _cli(["jobs", "list", "--metadata", nested_text(5000)], url, schema)
    assert code == 1, err
    assert err.startswith("riverboat: error: metadata:") and len(err.splitlines()) == 1, err

    # The worker: every row is settled, none stays running; a good job still runs.
    asyncio.run(_work_all(url, schema))
    table = job_table(url, schema)
    for depth, job_id in ids.items():
        state, _, errors = table[job_id]
        print(f"args nested {depth}: {state} {[e['error'][:90] for e in errors]}")
        assert state in ("completed", "discarded"), (depth, state, errors)
        if state == "discarded":
            assert "nested too deeply" in errors[-1]["error"], errors
        assert all("RecursionError" not in e["error"] for e in errors), errors
    assert table[deep_metadata][0] in ("completed", "discarded")
    assert "running" not in counts_by_state(url, schema)


async def _work_all(url: str, schema: str | None) -> None:
    workers = Workers()
    worked: list[int] = []

    @workers.register("deep")
    async def deep(job: Job[Any]) -> None:
        worked.append(job.id)

    client = riverboat.AsyncClient(
        url,
        schema=schema,
        queues={"default": QueueConfig(max_workers=4)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    )
    await client.start()
    try:
        good = (await client.insert({"fine": True}, kind="deep")).job.id

        def settled() -> bool:
            rows = query(
                url,
                schema,
                "SELECT count(*) FROM river_job WHERE state IN ('available', 'running')",
            )
            return bool(rows[0][0] == 0)

        await wait_until_async(
            lambda: asyncio.to_thread(settled), timeout=20, poll=0.05, what="every job settled"
        )
    finally:
        await asyncio.wait_for(client.stop(), 10)
        await client.close()
    assert good in worked
