"""What ``riverboat queues limits`` (and ``client.queue_limits()``) show of the limits
live workers report: each limit per partition, its use and the due jobs it holds back;
real worker processes on Postgres and SQLite."""

from __future__ import annotations

import json
from typing import Any

import pytest

from riverboat import InsertManyParams, InsertOpts
from riverboat.cli import main
from tests.flow.test_flow import _insert, workers
from tests.runtime.dbs import Db, any_db  # noqa: F401
from tests.waiting import wait_until

FLOW = {
    "concurrency": {"global_limit": 1, "by_args": ["customer_id"]},
    "rate_limit": {"limit": 100, "period": 60},
}


def _limits(db: Db, capsys: pytest.CaptureFixture[str], *extra: str) -> Any:
    common = ["--database-url", db.url] + (["--schema", db.schema] if db.schema else [])
    code = main(["queues", "limits", *common, *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out) if "--json" in extra else out


def test_limits_show_use_and_held_back_jobs(
    any_db: Db,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    jobs = [InsertManyParams({"customer_id": 1, "sleep": 30}, kind="flow_job") for _ in range(3)]
    jobs.append(InsertManyParams({"customer_id": 2, "sleep": 30}, kind="flow_job"))
    client = _insert(any_db, jobs)
    with client, workers(any_db, 1, FLOW, hard_stop=True):

        def settled() -> bool:
            uses = _limits(any_db, capsys, "--json")
            return [(u["limit"], u["partition"], u["in_use"], u["held_back"]) for u in uses] == [
                ("concurrency", [1], 1, 2),
                ("concurrency", [2], 1, 0),
                ("rate", [], 2, 0),
            ]

        wait_until(settled, timeout=60, what="one job per customer running, two held back")
        uses = client.queue_limits("default")
        by_customer = {tuple(u.partition): u for u in uses if u.limit == "concurrency"}
        assert by_customer[(1,)].due == 2 and by_customer[(1,)].value == 1
        rate = [u for u in uses if u.limit == "rate"]
        assert rate[0].value == 100 and rate[0].period == 60
        table = _limits(any_db, capsys, "default").splitlines()
        assert table[0].split() == ["QUEUE", "LIMIT", "PARTITION", "IN_USE", "DUE", "HELD_BACK"]
        assert table[1].split() == ["default", "concurrency", "1", "[1]", "1", "2", "2"]
        assert table[3].split() == ["default", "rate", "100/60s", "(queue)", "2", "2", "0"]
        assert client.queue_limits("other") == []


def test_local_limits_and_sequences_show_their_use_per_worker_and_key(
    any_db: Db,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Two workers of local_limit 1: in id order, one claims the sequence's head "a" and
    # the other the first unsequenced job (the next "a" waits for its head).
    jobs = [
        InsertManyParams({"sleep": 30}, InsertOpts(sequence="a"), kind="flow_job") for _ in range(3)
    ]
    jobs += [InsertManyParams({"sleep": 30}, kind="flow_job") for _ in range(3)]
    client = _insert(any_db, jobs)
    flow = {"concurrency": {"local_limit": 1}, "sequences": True}
    with client, workers(any_db, 2, flow, hard_stop=True):

        def settled() -> bool:
            uses = _limits(any_db, capsys, "--json")
            return sorted(
                (u["limit"], u["partition"], u["in_use"], u["due"], u["held_back"]) for u in uses
            ) == [("local", [], 1, 4, 4), ("local", [], 1, 4, 4), ("sequence", ["a"], 1, 2, 2)]

        wait_until(settled, timeout=60, what="one job per worker running, the sequence waiting")
        uses = client.queue_limits("default")
        local = [u for u in uses if u.limit == "local"]
        live = {w.id for w in client.workers_list() if w.alive}
        assert {u.worker for u in local} == live and len(live) == 2
        assert all(u.value == 1 for u in local)
        table = _limits(any_db, capsys, "default").splitlines()
        rows = sorted(line.split()[1] for line in table[1:] if line.strip())
        assert rows[:2] == ["local", "local"] and rows[2] == "sequence"
        assert any(line.split()[1:3] == ["sequence", '["a"]'] for line in table[1:])


def test_numbers_of_one_value_are_one_partition_on_postgres(
    pg_url: str, pg_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Postgres's claim compares JSON numbers by value: customer 1 and customer 1.0 are
    one partition (docs/flow-control.md). The view grouped them by text and showed two,
    the 1.0 one in use 0 while the claim held both its jobs back; and a local limit's
    rows split the same way. (SQLite keeps them apart, as its claim does.)"""
    db = Db("postgres", pg_url, pg_schema)
    jobs = [
        InsertManyParams({"customer_id": value, "sleep": 30}, kind="flow_job")
        for value in (1, 1.0, 1.0)
    ]
    client = _insert(db, jobs)
    flow = {"concurrency": {"global_limit": 1, "local_limit": 1, "by_args": ["customer_id"]}}
    with client, workers(db, 1, flow, hard_stop=True):

        def settled() -> bool:
            uses = _limits(db, capsys, "--json")
            return sorted(
                (u["limit"], u["partition"], u["in_use"], u["due"], u["held_back"]) for u in uses
            ) == [("concurrency", [1], 1, 2, 2), ("local", [1], 1, 2, 2)]

        wait_until(settled, timeout=60, what="one partition: one job running, two held back")


def test_a_long_partition_is_cut_in_the_table_not_in_json() -> None:
    """A 300-character args value widened every row of the table past 300 columns."""
    from riverboat.cli.queues import PARTITION_WIDTH, _cut

    long = json.dumps(["x" * 300])
    assert len(_cut(long)) == PARTITION_WIDTH and _cut(long).endswith("…")
    assert _cut("[1]") == "[1]"


def test_a_partition_key_with_a_quote_or_backslash_is_read_per_value(any_db: Db) -> None:  # noqa: F811
    """On SQLite the view's JSON path held the key unescaped, as the claim's no longer
    did: it named no key, and the view put every job in one partition of nulls while
    the claim counted them apart."""
    import riverboat

    key = 'customer "id" \\ 2'
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        client.insert_many([InsertManyParams({key: c}, kind="flow_job") for c in (1, 1, 2)])
        any_db.execute(
            "UPDATE river_job SET state = 'running', attempted_by = %s",
            '["w1"]' if any_db.dialect == "sqlite" else ["w1"],
        )
        dialect = client.driver.dialect
        use = client.driver.fetch(
            dialect.flow_use(queue="default", by_kind=False, by_args=[key], rate_period=None)
        )
        local = client.driver.fetch(
            dialect.flow_local_use(queue="default", by_kind=False, by_args=[key])
        )
    assert sorted((json.loads(r[1]) if isinstance(r[1], str) else r[1], r[2]) for r in use) == [
        ([1], 2),
        ([2], 1),
    ]
    assert sorted((json.loads(r[2]) if isinstance(r[2], str) else r[2], r[3]) for r in local) == [
        ([1], 2),
        ([2], 1),
    ]


def test_number_forms_are_joined_by_exact_value() -> None:
    """As Postgres's jsonb equality sees numbers: by exact value (1 and 1.0, 1e20 and
    its digits, objects in any key order), not through floats (which joined 0.1 with
    0.10000000000000001, and kept 9007199254740993 apart from its .0 form); a boolean
    or a string is not a number. Counts are added; numbers are written exactly."""
    from riverboat.flow import merge_number_forms

    rows = [
        (None, text, running, 0, due)
        for text, running, due in [
            ("[1]", 1, 0),
            ("[1.0]", 0, 2),
            ("[0.1]", 0, 1),
            ("[0.10000000000000001]", 0, 1),
            ("[9007199254740993]", 1, 0),
            ("[9007199254740993.0]", 0, 1),
            ("[true]", 1, 0),
            ('["1"]', 0, 1),
            ('[{"a": 1, "b": 2.0}]', 1, 0),
            ('[{"b": 2, "a": 1.00}]', 0, 3),
            ("[1e20]", 0, 1),
            ("[100000000000000000000]", 1, 0),
        ]
    ]
    assert [list(r) for r in merge_number_forms(rows, args_at=1, counts_from=2)] == [
        [None, "[1]", 1, 0, 2],
        [None, "[0.1]", 0, 0, 1],
        [None, "[0.10000000000000001]", 0, 0, 1],
        [None, "[9007199254740993]", 1, 0, 1],
        [None, "[true]", 1, 0, 0],
        [None, '["1"]', 0, 0, 1],
        [None, '[{"a": 1, "b": 2}]', 1, 0, 3],
        [None, "[100000000000000000000]", 1, 0, 1],
    ]
