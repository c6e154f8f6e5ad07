"""A periodic job added at runtime is stored with a template of its runs, which a leader
without the job's code inserts (riverboat/runtime/maintenance/periodic.py). Its runs
must have the args, byte for byte, and the unique key that the adding client's own
insert has, whatever the args are (a dict, an args class, JSON text), and a template
whose unique options can't be used here must still give runs (unique per tick), not a
refusal at every tick. No database: the template goes through JSON as it does through
riverboat_periodic_job."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from riverboat import InsertManyParams, InsertOpts, PeriodicJob, RawArgs, UniqueOpts
from riverboat._insert import InsertDefaults, resolve_insert
from riverboat._periodic import PeriodicJobRecord
from riverboat.runtime.maintenance.periodic import _job_of, _template_of, _unpack

BY_ARGS = UniqueOpts(by_args=True)
UNIQUE = InsertOpts(unique_opts=BY_ARGS)
SOME_STATES = ["available", "pending", "running", "scheduled"]
NOW = datetime(2026, 1, 1, 12, 30, tzinfo=UTC)


@dataclasses.dataclass
class Point:
    y: int
    x: int


@dataclasses.dataclass
class Reading:
    value: float
    extra: dict[str, Any]
    kind: str = dataclasses.field(default="reading", init=False)


@dataclasses.dataclass
class Narrowed:
    a: int
    b: dict[str, Any]
    kind: str = dataclasses.field(default="narrowed", init=False)
    unique_fields = ("b",)


@dataclasses.dataclass
class OwnOptions:
    a: int
    kind: str = dataclasses.field(default="own_options", init=False)

    def insert_opts(self) -> InsertOpts:
        return InsertOpts(unique_opts=UniqueOpts(by_args=True, by_queue=True))


class Encoded:
    kind = "encoded"

    def to_json(self) -> str:
        return '{"b": 1.0, "a": {"z": 1, "y": 2}}'


CASES: dict[str, tuple[Any, InsertOpts | None, str | None]] = {
    "dict": ({"a": 1, "b": [1.5, "x"], "big": 1e21}, UNIQUE, "kk"),
    "dict with a dataclass": ({"p": Point(y=1, x=2), "n": 1.0}, UNIQUE, "kk"),
    "dataclass": (Reading(1.0, {"b": 1, "a": 2}), UNIQUE, None),
    "unique fields": (Narrowed(1, {"z": 1, "y": 2.0}), UNIQUE, None),
    "own insert_opts": (OwnOptions(1), None, None),
    "to_json": (Encoded(), UNIQUE, None),
    "RawArgs": (RawArgs('{"b": 1.0, "a": {"z": 1}}', kind="raw"), UNIQUE, None),
    "RawArgs fields": (
        RawArgs('{"b": 1.0, "a": {"z": 1}}', kind="raw", unique_fields=["a"]),
        UNIQUE,
        None,
    ),
    "by period": ({"a": 1}, InsertOpts(unique_opts=UniqueOpts(by_period=3600)), "kk"),
    "by state": (
        {"a": 1},
        InsertOpts(unique_opts=UniqueOpts(by_args=True, by_state=SOME_STATES)),
        "kk",
    ),
}  # fmt: skip


def _record(template: dict[str, Any]) -> PeriodicJobRecord:
    stored = json.loads(json.dumps(template))  # stored as JSON, read back
    return PeriodicJobRecord("per_job", "0 * * * *", "all", None, None, NOW, NOW, template=stored)


@pytest.mark.parametrize("case", list(CASES))
def test_runs_from_a_template_have_the_adding_clients_args_and_key(case: str) -> None:
    args, opts, kind = CASES[case]
    made = InsertManyParams(args, opts, kind=kind) if kind else (args, opts)
    job = PeriodicJob("0 * * * *", lambda: made, id="per_job")
    template = asyncio.run(_template_of(job, InsertDefaults()))
    assert template is not None
    rebuilt = _job_of(_record(template))
    assert rebuilt is not None
    own = resolve_insert(*_unpack(made), InsertDefaults(), now=NOW)
    run = resolve_insert(*_unpack(rebuilt.constructor()), InsertDefaults(), now=NOW)
    assert own.unique_key is not None
    assert (run.kind, run.encoded_args) == (own.kind, own.encoded_args)
    assert (run.unique_key, run.unique_states) == (own.unique_key, own.unique_states)


@pytest.mark.parametrize(
    "unique_opts",
    [
        {"by_args": True},  # its args' part of the key missing
        {"by_state": ["bogus"]},
        {"by_state": ["available"]},  # River's required states left out
        {"by_period": -5},
    ],
)
def test_a_template_whose_unique_options_cant_be_used_still_runs(
    unique_opts: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    template = {"kind": "kk", "args": {"a": 1}, "args_text": '{"a":1}', "unique_opts": unique_opts}
    with caplog.at_level(logging.WARNING, "riverboat.maintenance"):
        rebuilt = _job_of(_record(template))
    assert rebuilt is not None
    run = resolve_insert(*_unpack(rebuilt.constructor()), InsertDefaults(), now=NOW)
    assert run.encoded_args == '{"a":1}'
    assert run.unique_key is None  # the enqueuer makes it unique per tick
    assert "unique options can't be used here" in caplog.text
