"""Scenario 6: hostile or sloppy input at the public API and the CLI (complements
tests/test_insert_validation.py, which fuzzes insert arguments).

Every call must end in a riverboat exception (RiverboatError, usually
InvalidInputError) or a stored/returned value: never another exception type, and never
an injected statement. After each example the river_job table still exists and its
row count is unchanged.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import riverboat
from riverboat.cli import main as cli_main
from riverboat.errors import RiverboatError
from riverboat.runtime.producer import QueueConfig
from riverboat.runtime.worker import Workers
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
        _ok_or_riverboat_error(lambda: client.job_list(metadata=name))  # type: ignore[arg-type]
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
        try:
            code = cli_main(argv)
        except SystemExit as exc:  # argparse refusing an argument
            code = exc.code
    assert code in (0, 1, 2), (argv, err.getvalue())
    if code == 1:
        assert err.getvalue().startswith("riverboat: error:"), err.getvalue()
    seeded()
