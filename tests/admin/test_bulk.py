"""Bulk retry and cancel by filter (``job_retry_many``, ``job_cancel_many``), the new
filters (args keys, args text, created before), ``job_count_matching`` (dry runs) and
``job_count_grouped``, on Postgres and SQLite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import riverboat
from riverboat import InsertManyParams, InsertOpts, InvalidInputError, JobState
from tests.runtime.dbs import Db, any_db  # noqa: F401


def _discard(client: riverboat.Client, job_id: int) -> None:
    """Running, then cancelled: a finalized job as the tests need it (retry works on any
    finalized state the same way)."""
    client.job_cancel(job_id)


def _seed(client: riverboat.Client) -> dict[str, list[int]]:
    rows = client.insert_many(
        [
            InsertManyParams({"card": "4242", "customer": "ada"}, kind="charge_card"),
            InsertManyParams({"card": "4000", "customer": "bob"}, kind="charge_card"),
            InsertManyParams({"card": "5555"}, kind="charge_card"),
            InsertManyParams({"to": "ada@example.com"}, InsertOpts(queue="mail"), kind="email"),
            InsertManyParams({"to": "100%_sure@x"}, InsertOpts(queue="mail"), kind="email"),
        ]
    )
    ids = [r.job.id for r in rows]
    return {"charge": ids[:3], "email": ids[3:]}


def test_retry_many_by_kind_in_batches(any_db: Db) -> None:  # noqa: F811
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        ids = _seed(client)
        for job_id in ids["charge"] + ids["email"]:
            _discard(client, job_id)
        assert client.job_count_matching(kinds=["charge_card"], states=["cancelled"]) == 3
        assert client.job_count_matching(action="retry", kinds=["charge_card"]) == 3

        first = client.job_retry_many(kinds=["charge_card"], limit=2)
        assert [j.id for j in first.jobs] == ids["charge"][:2]
        assert all(j.state is JobState.AVAILABLE for j in first.jobs)
        assert first.next_after_id == ids["charge"][1]
        second = client.job_retry_many(kinds=["charge_card"], limit=2, after_id=first.next_after_id)
        assert [j.id for j in second.jobs] == ids["charge"][2:]
        assert second.next_after_id is None
        # The emails stay cancelled.
        states = {j.id: j.state for j in client.job_list(limit=10).jobs}
        assert [states[i] for i in ids["email"]] == [JobState.CANCELLED] * 2


def test_retry_many_leaves_alone_unique_jobs_whose_key_is_taken(any_db: Db) -> None:  # noqa: F811
    """A cancelled unique job whose key another job holds now, and the second of two
    cancelled twins, would each take the key on retry: the statement failed on River's
    unique index and retried nothing (the dashboard's "Retry all" answered 503). They
    are left alone, counted out of the dry run; the others are retried."""
    once = InsertOpts(unique_opts=riverboat.UniqueOpts(by_args=True))
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        ids = [client.insert({"n": n}, once, kind="blocker").job.id for n in range(3)]
        for job_id in ids:
            _discard(client, job_id)
        holder = client.insert({"n": 1}, once, kind="blocker").job  # holds ids[1]'s key
        twin = client.job_list(ids=[ids[2]]).jobs[0]
        # A second cancelled job with ids[2]'s key (as a Go client could leave it).
        any_db.execute(
            "UPDATE river_job SET unique_key = (SELECT unique_key FROM river_job WHERE id = %s)"
            " WHERE id = %s",
            ids[2],
            ids[0],
        )
        kinds, cancelled = ["blocker"], ["cancelled"]
        assert client.job_count_matching(kinds=kinds, states=cancelled) == 3
        assert client.job_count_matching(action="retry", kinds=kinds, states=cancelled) == 1
        retried = client.job_retry_many(kinds=kinds, states=cancelled)
        assert [j.id for j in retried.jobs] == [ids[0]]
        states = {j.id: j.state for j in client.job_list(kinds=["blocker"]).jobs}
        assert states == {
            ids[0]: JobState.AVAILABLE,
            ids[1]: JobState.CANCELLED,
            ids[2]: JobState.CANCELLED,
            holder.id: JobState.AVAILABLE,
        }
        assert twin.unique_key is not None


def test_retry_many_forgets_an_earlier_cancel_as_job_retry_does(any_db: Db) -> None:  # noqa: F811
    # A cancel records cancel_attempted_at; a retried job keeping it would be cancelled
    # again by its next run's completer (River 0.51 clears it on JobRetry).
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        ids = _seed(client)
        for job_id in ids["charge"]:
            client.job_cancel(job_id)
        assert all("cancel_attempted_at" in client.job_get(i).metadata for i in ids["charge"])
        client.job_retry(ids["charge"][0])
        client.job_retry_many(kinds=["charge_card"], limit=10)
        for job_id in ids["charge"]:
            job = client.job_get(job_id)
            assert job.state is JobState.AVAILABLE
            assert "cancel_attempted_at" not in job.metadata


def test_cancel_many_leaves_finalized_jobs_and_signals_running(any_db: Db) -> None:  # noqa: F811
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        ids = _seed(client)
        client.job_cancel(ids["email"][0])
        running = client.driver.fetch(client._core.dialect.job_set_running(ids["charge"][0], "op"))
        assert running
        assert client.job_count_matching(action="cancel") == 4
        done = client.job_cancel_many(all=True)
        assert [j.id for j in done.jobs] == [*ids["charge"], ids["email"][1]]
        by_id = {j.id: j for j in done.jobs}
        assert by_id[ids["charge"][0]].state is JobState.RUNNING
        assert "cancel_attempted_at" in by_id[ids["charge"][0]].metadata
        assert by_id[ids["charge"][1]].state is JobState.CANCELLED
        # The running one is signalled, not finalized: a second pass starts after it.
        assert client.job_count_matching(action="cancel") == 1


def test_filters_by_args_key_text_and_age(any_db: Db) -> None:  # noqa: F811
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        ids = _seed(client)

        def listed(**filters: object) -> list[int]:
            return [j.id for j in client.job_list(limit=50, **filters).jobs]  # type: ignore[arg-type]

        assert listed(args_keys=["customer"]) == ids["charge"][:2]
        assert listed(args_keys=["card", "customer"]) == ids["charge"][:2]
        assert listed(args_keys=["nope"]) == []
        assert listed(args_text="ADA") == [ids["charge"][0], ids["email"][0]]
        # % and _ are literal characters, not wildcards.
        assert listed(args_text="100%_") == [ids["email"][1]]
        assert listed(args_text="1_0") == []  # as a wildcard, _ would match "100"
        assert listed(created_before=datetime.now(UTC) + timedelta(minutes=1)) == sorted(
            ids["charge"] + ids["email"]
        )
        assert listed(created_before=datetime.now(UTC) - timedelta(minutes=1)) == []
        assert client.job_count_matching(args_text="ada", queues=["mail"]) == 1

        # The same answers on both databases: Postgres searched jsonb's text ("a": 1),
        # SQLite the stored text (Go's escapes \u003c for <, and "a":1).
        odd = client.insert({"query": "a<b && c>d", "name": "Élodie", "order": 1}, kind="odd")
        for text in ("a<b", "c>d", "&&", '"order":1', '"order": 1', '"name": "É', "ÉLODIE"):
            assert listed(args_text=text) == [odd.job.id], text

        # The longest text, with every character escaped or 4 bytes long, is searched;
        # one more is refused before any statement (SQLite refused a LIKE pattern past
        # 50,000 bytes: the dashboard answered 503).
        for longest in ("%" * 5000, "\U0001f600" * 5000):
            assert listed(args_text=longest) == []
        with pytest.raises(InvalidInputError, match="at most 5000"):
            client.job_list(args_text="x" * 5001)

        with pytest.raises(InvalidInputError, match="created_before"):
            client.job_list(created_before=datetime(2020, 1, 1))
        with pytest.raises(InvalidInputError, match="args_text"):
            client.job_list(args_text="")
        with pytest.raises(InvalidInputError, match="needs at least one filter"):
            client.job_retry_many()
        with pytest.raises(InvalidInputError, match="after_id"):
            client.job_retry_many(all=True, after_id=-1)


def test_count_grouped(any_db: Db) -> None:  # noqa: F811
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        ids = _seed(client)
        client.job_cancel(ids["charge"][0])
        rows = [(r.state.value, r.queue, r.kind, r.count) for r in client.job_count_grouped()]
        assert rows == [
            ("available", "default", "charge_card", 2),
            ("available", "mail", "email", 2),
            ("cancelled", "default", "charge_card", 1),
        ]
        mail = [(r.state.value, r.count) for r in client.job_count_grouped(queues=["mail"])]
        assert mail == [("available", 2)]


def test_each_batch_is_one_bounded_statement(any_db: Db) -> None:  # noqa: F811
    """Bulk retry and cancel are one statement per batch, with a LIMIT and the keyset
    (SQLite's cancel adds its outbox row in the same transaction, as job_cancel does)."""
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        dialect = client._core.dialect
        for action in ("retry", "cancel"):
            stmt = dialect.job_bulk(
                action, filters={"kinds": ["x"]}, limit=7, after_id=3, cancel_attempted_at="t"
            )
            assert "LIMIT" in stmt.query.text and stmt.params["max"] == 7
            assert stmt.params["cursor_id"] == 3
            if any_db.dialect == "postgres" or action == "retry":
                assert stmt.then == ()
            else:
                assert [s.query.name for s in stmt.then] == ["job_cancel_many_notify"]


@pytest.mark.parametrize("metadata", ['"meta"', "[1]", "null", "5", '{"riverboat_workflow": [1]}'])
def test_jobs_whose_metadata_is_not_an_object_are_cancelled_and_retried(
    any_db: Db,  # noqa: F811
    metadata: str,
) -> None:
    """Metadata another client wrote as a string, an array, null or a number reads as
    empty everywhere; a cancel or a retry writes an object in its place. On Postgres
    jsonb_set and - refused such a value: the cancel or retry of that job failed, and a
    bulk one by filter with it, every job of the batch left as it was."""
    with riverboat.Client(any_db.url, schema=any_db.schema) as client:
        rows = client.insert_many(
            [InsertManyParams({"n": n}, kind="odd_metadata") for n in range(4)]
        )
        ids = [r.job.id for r in rows]
        cast = "%s::jsonb" if any_db.dialect == "postgres" else "jsonb(%s)"
        for job_id in ids:
            any_db.execute(
                f"UPDATE river_job SET metadata = {cast} WHERE id = %s", metadata, job_id
            )
        assert client.job_cancel(ids[0]).state is JobState.CANCELLED
        cancelled = client.job_cancel_many(kinds=["odd_metadata"])
        assert sorted(j.id for j in cancelled.jobs) == ids[1:]
        assert client.job_retry(ids[0]).state is JobState.AVAILABLE
        retried = client.job_retry_many(kinds=["odd_metadata"], states=["cancelled"])
        assert sorted(j.id for j in retried.jobs) == ids[1:]
        jobs = client.job_list(kinds=["odd_metadata"], limit=10).jobs
    assert {j.state for j in jobs} == {JobState.AVAILABLE}
    assert all("cancel_attempted_at" not in j.metadata for j in jobs)


def test_args_and_tags_filters_pass_over_rows_with_malformed_json(sqlite_url: str) -> None:
    """SQLite: a row whose args or tags are not valid JSON (written by another client:
    text, or bytes) made every search by args or tags fail with 'malformed JSON', the
    dashboard's and the CLI's too. Such a row matches no args or tags filter; the
    others are found."""
    db = Db("sqlite", sqlite_url, None)
    with riverboat.Client(sqlite_url) as client:
        good = client.insert(
            {"msg": "hello"}, InsertOpts(tags=["tag1"]), kind="malformed_json"
        ).job.id
        text_args = client.insert({"msg": "hello"}, kind="malformed_json").job.id
        blob_args = client.insert({"msg": "hello"}, kind="malformed_json").job.id
        db.execute("UPDATE river_job SET args = 'not json at all' WHERE id = %s", text_args)
        db.execute("UPDATE river_job SET args = x'ffff', tags = 'nope' WHERE id = %s", blob_args)
        for options in (
            {"args_text": "hello"},
            {"args_keys": ["msg"]},
            {"tags_any": ["tag1"]},
            {"tags_all": ["tag1"]},
        ):
            assert [j.id for j in client.job_list(**options).jobs] == [good], options
            assert client.job_count_matching(action="cancel", **options) == 1, options
