"""``job_delete_many(where=..., where_params=...)``: the trusted SQL condition of
``job_list(where=)`` applied to a delete, sync and async, on Postgres and SQLite."""

from __future__ import annotations

import pytest

import riverboat
from riverboat import InsertManyParams, InsertOpts, InvalidInputError
from tests.runtime.dbs import Db, any_db  # noqa: F401


def _bills() -> list[InsertManyParams]:
    return [
        InsertManyParams({"customer": "ada"}, InsertOpts(priority=1), kind="bill"),
        InsertManyParams({"customer": "bob"}, InsertOpts(priority=2), kind="bill"),
        InsertManyParams({"customer": "ada"}, InsertOpts(priority=3), kind="bill"),
        InsertManyParams({"customer": "ada"}, kind="other"),
    ]


def test_delete_many_where_deletes_only_matching_rows(any_db: Db) -> None:  # noqa: F811
    db = any_db
    with riverboat.Client(db.url, schema=db.schema) as client:
        client.insert_many(_bills())
        deleted = client.job_delete_many(
            kinds=["bill"],
            where="args ->> 'customer' = :customer AND priority >= :max",
            where_params={"customer": "ada", "max": 2},
        )
        assert [(j.kind, j.args, j.priority) for j in deleted] == [("bill", {"customer": "ada"}, 3)]
        left = client.job_list(limit=10).jobs
        assert [(j.kind, j.priority) for j in left] == [("bill", 1), ("bill", 2), ("other", 1)]

        # A condition alone is a filter: no all=True needed.
        gone = client.job_delete_many(where="kind = :kind", where_params={"kind": "other"})
        assert [j.kind for j in gone] == ["other"]

        # The tx form takes it too, and rolls back with the caller's transaction.
        with db.connect() as conn:
            in_tx = client.job_delete_many_tx(conn, where="priority = :p", where_params={"p": 2})
            assert [j.priority for j in in_tx] == [2]
            conn.rollback()
        assert len(client.job_list(limit=10).jobs) == 2

        for kwargs, message in [
            ({"where": "priority = :p"}, "no value for p"),
            ({"where": "true", "where_params": {"p": 1}}, "not used in where: p"),
            ({"where_params": {"p": 1}}, "given without where"),
            ({"where": "true; DROP TABLE river_job"}, "without ';'"),
        ]:
            with pytest.raises(InvalidInputError, match=message):
                client.job_delete_many(**kwargs)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="is not a job filter"):
            client.job_delete_many_tx(None, wher="true")  # type: ignore[call-arg]
        assert len(client.job_list(limit=10).jobs) == 2


async def test_delete_many_where_async(any_db: Db) -> None:  # noqa: F811
    db = any_db
    async with riverboat.AsyncClient(db.url, schema=db.schema) as client:
        await client.insert_many(_bills())
        deleted = await client.job_delete_many(
            where="args ->> 'customer' = :who", where_params={"who": "bob"}
        )
        assert [j.args for j in deleted] == [{"customer": "bob"}]
        assert len((await client.job_list(limit=10)).jobs) == 3
