"""RawArgs (Go's json.RawMessage) through a real insert and a real worker, on Postgres
and SQLite: stored and unique-keyed as written, worked like any other args."""

from __future__ import annotations

import hashlib
from typing import Any

import riverboat
from riverboat import (
    InsertManyParams,
    InsertOpts,
    Job,
    JobState,
    QueueConfig,
    RawArgs,
    UniqueOpts,
    Workers,
)
from tests.runtime.dbs import Db, any_db  # noqa: F401

ONCE = InsertOpts(unique_opts=UniqueOpts(by_args=True))


def test_raw_args_deduplicate_on_their_written_form(any_db: Db) -> None:  # noqa: F811
    db = any_db
    seen: list[dict[str, Any]] = []
    workers = Workers()

    @workers.register("raw_report")
    def raw_report(job: Job[dict[str, Any]]) -> None:
        seen.append(job.args)

    with riverboat.Client(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_poll_interval=0.1,
    ) as client:
        first = client.insert(RawArgs('{"total": 1e21, "rate": 1.0}', kind="raw_report"), ONCE)
        # The same text spaced differently is the same job, as Go's compaction makes it.
        again = client.insert(
            RawArgs(b'{ "total" : 1e21 ,\n "rate" : 1.0 }'), ONCE, kind="raw_report"
        )
        # A dict of the same values is a Go map: Go writes 1e+21 and 1, another key.
        as_dict = client.insert({"total": 1e21, "rate": 1.0}, ONCE, kind="raw_report")
        many = client.insert_many(
            [InsertManyParams(RawArgs('{"total":1e21,"rate":1.0}', kind="raw_report"), ONCE)]
        )
        client.run_until_idle()
        rows = [client.job_get(first.job.id), client.job_get(as_dict.job.id)]

    assert again.unique_skipped_as_duplicate and again.job.id == first.job.id
    assert many[0].unique_skipped_as_duplicate and many[0].job.id == first.job.id
    assert not as_dict.unique_skipped_as_duplicate
    assert (
        first.job.unique_key
        == hashlib.sha256(b'&kind=raw_report&args={"rate":1.0,"total":1e21}').digest()
    )
    assert (
        as_dict.job.unique_key
        == hashlib.sha256(b'&kind=raw_report&args={"rate":1,"total":1e+21}').digest()
    )
    assert [row.state for row in rows] == [JobState.COMPLETED, JobState.COMPLETED]
    assert seen == [{"total": 1e21, "rate": 1.0}] * 2
