"""Kind aliases (River's ``JobArgsWithKindAliases``) and the ``*_tx`` reads
(``job_get_tx``, ``queue_get_tx``, ``queue_list_tx``), on Postgres and SQLite."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

import riverboat
from riverboat import InvalidInputError, Job, JobState, NotFoundError, QueueConfig, Worker, Workers
from tests.runtime.dbs import Db, any_db  # noqa: F401


@dataclass
class SendInvoice:
    kind: ClassVar[str] = "send_invoice"
    kind_aliases: ClassVar[tuple[str, ...]] = ("invoice_email", "invoice_v1")
    number: int


class Shipper(Worker[dict[str, Any]]):
    kind = "ship"
    kind_aliases = ("dispatch",)

    def work(self, job: Job[dict[str, Any]]) -> None:
        worked.append((job.kind, -1))


worked: list[tuple[str, int]] = []


def test_a_renamed_kind_still_works_jobs_of_its_old_names(any_db: Db) -> None:  # noqa: F811
    db = any_db
    worked.clear()
    workers = Workers()

    @workers.register(SendInvoice)
    def send_invoice(job: Job[SendInvoice]) -> None:
        worked.append((job.kind, job.args.number))

    workers.add(Shipper())
    client = riverboat.Client(
        db.url,
        schema=db.schema,
        queues={"default": QueueConfig()},
        workers=workers,
        fetch_poll_interval=0.1,
    )
    with client:
        new = client.insert(SendInvoice(1)).job
        # As an older deploy (or a Go service) still inserts them.
        old = client.insert({"number": 2}, kind="invoice_email").job
        legacy = client.insert({"number": 3}, kind="invoice_v1").job
        client.insert({}, kind="dispatch")
        client.run_until_idle()
        assert new.kind == "send_invoice" and old.kind == "invoice_email"
        assert all(client.job_get(j.id).state is JobState.COMPLETED for j in (new, old, legacy))
    assert sorted(worked) == [
        ("dispatch", -1),
        ("invoice_email", 2),
        ("invoice_v1", 3),
        ("send_invoice", 1),
    ]
    assert "invoice_v1" in workers and workers.kinds() == ["send_invoice", "ship"]


def test_kind_alias_errors() -> None:
    workers = Workers()
    workers.register("kind_a", kind_aliases=["kind_b"])(lambda job: None)
    with pytest.raises(InvalidInputError, match="already registered"):
        workers.register("kind_b")(lambda job: None)
    with pytest.raises(InvalidInputError, match="already registered"):
        workers.register("kind_c", kind_aliases=["kind_a"])(lambda job: None)
    with pytest.raises(InvalidInputError, match="repeat"):
        workers.register("kind_d", kind_aliases=["kind_d"])(lambda job: None)
    with pytest.raises(InvalidInputError, match="kind_aliases"):
        workers.register("kind_e", kind_aliases="old")(lambda job: None)
    with pytest.raises(InvalidInputError, match="kind_aliases"):
        workers.register("kind_f", kind_aliases=["has space"])(lambda job: None)


def test_tx_reads_see_the_callers_transaction(any_db: Db) -> None:  # noqa: F811
    db = any_db
    with riverboat.Client(db.url, schema=db.schema) as client:
        client.insert({}, riverboat.InsertOpts(queue="mail"), kind="kk")
        with db.connect() as conn:
            job = client.insert_tx(conn, {}, kind="kk").job
            assert client.job_get_tx(conn, job.id).id == job.id  # uncommitted, yet seen
            with pytest.raises(NotFoundError):
                client.job_get(job.id)  # others don't see it
            conn.rollback()
        with db.connect() as conn:
            with pytest.raises(NotFoundError):
                client.job_get_tx(conn, job.id)
            # No producer ran yet, so no queue row exists.
            assert client.queue_list_tx(conn) == client.queue_list()
            with pytest.raises(NotFoundError):
                client.queue_get_tx(conn, "nope")
            conn.rollback()
    with riverboat.Client(
        db.url, schema=db.schema, queues={"mail": QueueConfig()}, workers=Workers()
    ) as running:
        running.run_until_idle()
        with db.connect() as conn:
            assert [q.name for q in running.queue_list_tx(conn, limit=5)] == ["mail"]
            assert running.queue_get_tx(conn, "mail").name == "mail"
            conn.rollback()
