"""Scenario 6: hostile or sloppy input at the public API and the CLI (complements
tests/test_insert_validation.py, which fuzzes insert arguments).

Every call must end in a riverboat exception (RiverboatError, usually
InvalidInputError) or a stored/returned value: never another exception type, and never
an injected statement. After each example the river_job table still exists and its
row count is unchanged.
"""

from __future__ import annotations

import base64
import contextlib
import io
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import riverboat
from riverboat import InvalidInputError, QueueConfig, RiverboatError, Workers
from riverboat.cli import main as cli_main
from tests.reliability._support import sql

INJECTIONS = [
    "'; drop table river_job; --",
    '"; drop table river_job; --',
    "x) OR 1=1 --",
    "default'::text); DELETE FROM river_job; --",
    "\x00",
    "a" * 300,
    "",
    " ",
    "ünï©ødé",
]
hostile = st.one_of(st.sampled_from(INJECTIONS), st.text(max_size=80))
anything = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), hostile, st.lists(st.integers())
)
FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _ok_or_riverboat_error(call: Any) -> Any:
    try:
        return call()
    except RiverboatError as exc:
        assert str(exc), "the error says what was wrong"
        return exc


@pytest.fixture
def seeded(pg_url: str, pg_schema: str) -> Any:
    with riverboat.Client(pg_url, schema=pg_schema) as client:
        client.insert_many([riverboat.InsertManyParams({}, kind="seed") for _ in range(5)])

    def intact() -> None:
        assert sql(pg_url, pg_schema, "SELECT count(*) FROM river_job") == [(5,)]

    return intact


@given(kind=anything)
@settings(FUZZ)
def test_workers_register(kind: Any) -> None:
    workers = Workers()
    result = _ok_or_riverboat_error(lambda: workers.register(kind)(lambda job: None))
    if not isinstance(result, RiverboatError):
        assert kind in workers


@given(name=hostile, max_workers=anything)
@settings(FUZZ)
def test_queue_config(pg_url: str, name: str, max_workers: Any) -> None:
    workers = Workers()
    workers.register("noop")(lambda job: None)
    _ok_or_riverboat_error(
        lambda: riverboat.AsyncClient(
            pg_url, queues={name: QueueConfig(max_workers=max_workers)}, workers=workers
        )
    )


@given(job_id=anything, name=anything, queues=st.lists(hostile, max_size=3))
@settings(FUZZ)
def test_admin_calls(
    pg_url: str, pg_schema: str, seeded: Any, job_id: Any, name: Any, queues: list[str]
) -> None:
    with riverboat.Client(pg_url, schema=pg_schema) as client:
        _ok_or_riverboat_error(lambda: client.job_cancel(job_id))
        _ok_or_riverboat_error(lambda: client.job_get(job_id))
        listed = _ok_or_riverboat_error(lambda: client.job_list(queues=queues, kinds=queues))
        if not isinstance(listed, RiverboatError):
            assert listed.jobs == [] or queues == []
        _ok_or_riverboat_error(lambda: client.queue_pause(name))
        _ok_or_riverboat_error(lambda: client.queue_resume(name))
        _ok_or_riverboat_error(lambda: client.job_list(metadata=name))
        _ok_or_riverboat_error(lambda: client.job_list(limit=job_id))
    seeded()


@given(schema=hostile)
@settings(FUZZ)
def test_schema_names(pg_url: str, schema: str) -> None:
    def connect_and_read() -> Any:
        with riverboat.Client(pg_url, schema=schema) as client:
            return client.job_list()

    _ok_or_riverboat_error(connect_and_read)


@pytest.mark.parametrize("value", INJECTIONS[:4])
@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "list", "--queue", "{v}"],
        ["jobs", "list", "--kind", "{v}"],
        ["jobs", "list", "--metadata", "{v}"],
        ["jobs", "list", "--cursor", "{v}"],
        ["jobs", "list", "--schema", "{v}"],
        ["queues", "pause", "{v}"],
        ["queues", "resume", "{v}"],
    ],
)
def test_cli_arguments(
    pg_url: str, pg_schema: str, seeded: Any, args: list[str], value: str
) -> None:
    argv = [a.replace("{v}", value) for a in args]
    if "--schema" not in argv:
        argv += ["--schema", pg_schema]
    argv += ["--database-url", pg_url]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code: str | int | None
        try:
            code = cli_main(argv)
        except SystemExit as exc:  # argparse refusing an argument
            code = exc.code
    assert code in (0, 1, 2), (argv, err.getvalue())
    if code == 1:
        assert err.getvalue().startswith("riverboat: error:"), err.getvalue()
    seeded()


# -- values neither database (nor a Go worker) keeps as given: refused on both dialects,
# with InvalidInputError naming the field, before anything is written.

SURROGATE = "\ud800"
BAD_ARGS = [
    ("lone surrogate in a value", {"s": SURROGATE}),
    ("lone surrogate in a key", {SURROGATE: 1}),
    ("NUL in a value", {"s": "a\x00b"}),
    ("NUL in a key", {"a\x00": 1}),
    ("NUL deep inside", {"l": [{"m": ["x", "\x00"]}]}),
    ("integer above int64", {"n": 2**63}),
    ("integer below int64", {"n": [-(2**63) - 1]}),
    ("keys colliding in JSON", {1: "a", "1": "b"}),
    ("bool and str keys colliding", {True: 1, "true": 2}),
]


@pytest.fixture(params=["postgres", "sqlite"])
def any_db(request: pytest.FixtureRequest) -> tuple[str, str | None, Any]:
    """(url, schema, count of river_job rows) for each dialect."""
    if request.param == "postgres":
        url = request.getfixturevalue("pg_url")
        schema = request.getfixturevalue("pg_schema")
        return url, schema, lambda: sql(url, schema, "SELECT count(*) FROM river_job")[0][0]
    from tests.sqlite.helpers import query

    url = request.getfixturevalue("sqlite_url")
    return url, None, lambda: query(url, "SELECT count(*) FROM river_job")[0][0]


@pytest.mark.parametrize(("label", "args"), BAD_ARGS, ids=[a[0] for a in BAD_ARGS])
def test_unstorable_args_and_metadata_refused(
    any_db: tuple[str, str | None, Any], label: str, args: dict[Any, Any]
) -> None:
    url, schema, count = any_db
    with riverboat.Client(url, schema=schema) as client:
        with pytest.raises(InvalidInputError) as info:
            client.insert(args, kind="bad_args")
        assert info.value.field == "args"
        with pytest.raises(InvalidInputError) as info:
            client.insert({}, kind="bad_args", opts=riverboat.InsertOpts(metadata=args))
        assert info.value.field == "opts.metadata"
        with pytest.raises(InvalidInputError) as info:
            client.job_list(metadata=args)
        assert info.value.field == "metadata"
        # Within int64, and the same keys as str: stored as given.
        client.insert({"n": 2**63 - 1, "m": -(2**63), "1": "b"}, kind="ok_args")
    assert count() == 1


class TextArgs:
    kind = "text_args"

    def __init__(self, text: str) -> None:
        self.text = text

    def to_json(self) -> str:
        return self.text


@pytest.mark.parametrize(
    "text",
    ['{"a": 1, "a": 2}', '{"s": "\\u0000"}', '{"n": 123456789012345678901}', '{"s": "\\ud800"}'],
)
def test_unstorable_to_json_text_refused(any_db: tuple[str, str | None, Any], text: str) -> None:
    url, schema, count = any_db
    with riverboat.Client(url, schema=schema) as client, pytest.raises(InvalidInputError):
        client.insert(TextArgs(text))
    assert count() == 0


@pytest.mark.parametrize("job_id", [2**63, 2**70, -(2**63) - 1])
def test_job_ids_out_of_range(any_db: tuple[str, str | None, Any], job_id: int) -> None:
    url, schema, _count = any_db
    with riverboat.Client(url, schema=schema) as client:
        for call in (client.job_get, client.job_cancel, client.job_retry, client.job_delete):
            with pytest.raises(InvalidInputError, match="int64") as info:
                call(job_id)
            assert info.value.field == "job_id"
        with pytest.raises(InvalidInputError, match="int64"):
            client.job_list(ids=[1, job_id])


def test_cursor_with_an_out_of_range_id(any_db: tuple[str, str | None, Any]) -> None:
    import base64
    import json

    url, schema, _count = any_db
    body = json.dumps({"id": 2**70, "order_by": "id", "column": "id"}).encode()
    cursor = base64.urlsafe_b64encode(body).decode().rstrip("=")
    with riverboat.Client(url, schema=schema) as client:
        with pytest.raises(InvalidInputError) as info:
            client.job_list(cursor=cursor)
        assert info.value.field == "cursor"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["jobs", "list", "--metadata", '{"s": "\\ud800"}'], "surrogate"),
        (["jobs", "list", "--metadata", '{"s": "\\u0000"}'], "NUL"),
        (["jobs", "list", "--kind", "bad\udcffkind"], "surrogate"),  # argv bytes, not UTF-8
        (["jobs", "list", "--kind", "nul\x00kind"], "NUL"),
        # Nested arrays past json.loads' recursion limit (was a traceback).
        (["jobs", "list", "--cursor", base64.urlsafe_b64encode(b"[" * 5000).decode()], "cursor"),
    ],
    ids=[
        "surrogate-json",
        "nul-json",
        "argv",
        "nul",
        "cursor",
    ],
)
def test_cli_bad_values_one_line(
    any_db: tuple[str, str | None, Any], argv: list[str], says: str
) -> None:
    url, schema, _count = any_db
    full = [*argv, "--database-url", url] + (["--schema", schema] if schema else [])
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli_main(full)
    lines = err.getvalue().splitlines()
    assert code == 1 and len(lines) == 1, err.getvalue()
    assert lines[0].startswith("riverboat: error:"), lines
    assert says in lines[0], lines


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "get", "99999999999999999999"],
        ["jobs", "cancel", "-99999999999999999999"],
        ["jobs", "list", "--id", "99999999999999999999"],
    ],
    ids=["get", "cancel-negative", "list-id"],
)
def test_cli_ids_past_int64_are_usage_errors(
    any_db: tuple[str, str | None, Any], argv: list[str]
) -> None:
    """Refused by the argument's type (exit 2, before connecting), with argparse's usage
    line and one error line naming the range; they were exit 1 after connecting."""
    url, schema, _count = any_db
    full = [*argv, "--database-url", url] + (["--schema", schema] if schema else [])
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        with pytest.raises(SystemExit) as exited:
            cli_main(full)
    assert exited.value.code == 2, err.getvalue()
    assert "outside the range of job ids (int64)" in err.getvalue().splitlines()[-1]
