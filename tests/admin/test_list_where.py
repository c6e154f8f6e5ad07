"""``job_list(where=..., where_params=...)``: River's ``JobListParams.Where``, a trusted
SQL condition with bound values, on Postgres and SQLite."""

from __future__ import annotations

import pytest

import riverboat
from riverboat import InsertManyParams, InsertOpts, InvalidInputError
from tests.runtime.dbs import Db, any_db  # noqa: F401


def test_where_fragment_with_bound_values(any_db: Db) -> None:  # noqa: F811
    db = any_db
    with riverboat.Client(db.url, schema=db.schema) as client:
        client.insert_many(
            [
                InsertManyParams({"customer": "ada"}, InsertOpts(priority=1), kind="bill"),
                InsertManyParams({"customer": "bob"}, InsertOpts(priority=2), kind="bill"),
                InsertManyParams({"customer": "ada"}, InsertOpts(priority=3), kind="bill"),
                InsertManyParams({"customer": "ada"}, kind="other"),
            ]
        )
        # A parameter named like riverboat's own (kinds, max) can't collide with them.
        page = client.job_list(
            kinds=["bill"],
            where="args ->> 'customer' = :customer AND priority >= :max",
            where_params={"customer": "ada", "max": 2},
        )
        assert [(j.args, j.priority) for j in page.jobs] == [({"customer": "ada"}, 3)]
        # Paging keeps the condition; the tx form takes it too.
        first = client.job_list(where="kind = :kinds", where_params={"kinds": "bill"}, limit=2)
        rest = client.job_list(
            where="kind = :kinds", where_params={"kinds": "bill"}, cursor=first.next_cursor
        )
        assert [j.priority for j in first.jobs + rest.jobs] == [1, 2, 3]
        with db.connect() as conn:
            tx = client.job_list_tx(conn, where="priority = :p", where_params={"p": 2})
            assert [j.args for j in tx.jobs] == [{"customer": "bob"}]
            conn.rollback()

        for kwargs, message in [
            ({"where": "priority = :p"}, "no value for p"),
            ({"where": "true", "where_params": {"p": 1}}, "not used in where: p"),
            ({"where_params": {"p": 1}}, "given without where"),
            ({"where": "  "}, "non-empty"),
            ({"where": "true; DROP TABLE river_job"}, "without ';'"),
        ]:
            with pytest.raises(InvalidInputError, match=message):
                client.job_list(**kwargs)  # type: ignore[arg-type]
