"""Queue administration: get, list, pause, resume, update, with the
river_control payload sent by the same statement."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import riverboat
from riverboat import InvalidInputError, NotFoundError, QueueRow
from tests.admin.helpers import ControlListener, counting, sql


def make_queue(driver: Any, name: str) -> QueueRow:
    # The producer's upsert is how River creates queue rows.
    rows = driver.fetch(driver.dialect.queue_create_or_set_updated_at(name))
    queue: QueueRow = driver.dialect.decode_queue(rows[0])
    return queue


def test_get_and_list(client: riverboat.Client, pg_driver: Any) -> None:
    for name in ("zeta", "alpha", "mid"):
        make_queue(pg_driver, name)
    with counting(pg_driver) as seen:
        alpha = client.queue_get("alpha")
    assert seen == {"queue_get": 1}
    assert alpha.name == "alpha" and alpha.metadata == {} and alpha.paused_at is None
    assert not alpha.paused
    assert [q.name for q in client.queue_list()] == ["alpha", "mid", "zeta"]
    assert [q.name for q in client.queue_list(limit=2)] == ["alpha", "mid"]
    with pytest.raises(NotFoundError):
        client.queue_get("nope")


@pytest.mark.parametrize("bad", ["", "Bad Name", "*", 3, None])
def test_queue_names_are_validated(client: riverboat.Client, pg_driver: Any, bad: Any) -> None:
    with counting(pg_driver) as seen:
        for op in (client.queue_get, client.queue_update):
            with pytest.raises(InvalidInputError):
                op(bad)
        if bad != "*":
            for control in (client.queue_pause, client.queue_resume):
                with pytest.raises(InvalidInputError):
                    control(bad)
    assert seen == {}


def test_pause_and_resume_one_queue(
    client: riverboat.Client, pg_driver: Any, control: ControlListener
) -> None:
    created = make_queue(pg_driver, "work")
    make_queue(pg_driver, "other")
    with counting(pg_driver) as seen:
        (paused,) = client.queue_pause("work")
    assert seen == {"queue_pause": 1}
    assert paused.name == "work" and paused.paused_at is not None
    assert paused.updated_at > created.updated_at
    assert control.drain() == [{"action": "pause", "queue": "work"}]
    assert client.queue_get("other").paused_at is None

    # Pausing again keeps paused_at and updated_at (River's rule), but still notifies.
    (again,) = client.queue_pause("work")
    assert again.paused_at == paused.paused_at and again.updated_at == paused.updated_at
    assert control.drain() == [{"action": "pause", "queue": "work"}]

    (resumed,) = client.queue_resume("work")
    assert resumed.paused_at is None and resumed.updated_at > paused.updated_at
    assert control.drain() == [{"action": "resume", "queue": "work"}]
    (still,) = client.queue_resume("work")
    assert still.updated_at == resumed.updated_at


def test_pause_missing_queue(client: riverboat.Client, control: ControlListener) -> None:
    with pytest.raises(NotFoundError):
        client.queue_pause("ghost")
    with pytest.raises(NotFoundError):
        client.queue_resume("ghost")
    assert control.drain() == []


def test_pause_and_resume_all(
    client: riverboat.Client, pg_driver: Any, control: ControlListener
) -> None:
    # With no queue rows "*" matches nothing, yet producers are still told (as River does).
    assert client.queue_pause("*") == []
    assert control.drain() == [{"action": "pause", "queue": "*"}]

    make_queue(pg_driver, "one")
    make_queue(pg_driver, "two")
    client.queue_pause("one")
    one_before = client.queue_get("one")
    paused = client.queue_pause("*")
    assert [q.name for q in paused] == ["one", "two"]
    assert all(q.paused_at is not None for q in paused)
    assert paused[0].paused_at == one_before.paused_at  # already paused: untouched
    control.drain()
    resumed = client.queue_resume("*")
    assert [q.paused_at for q in resumed] == [None, None]
    assert control.drain() == [{"action": "resume", "queue": "*"}]


def test_pause_tx_is_sent_only_on_commit(
    client: riverboat.Client, pg_driver: Any, pg_url: str, control: ControlListener
) -> None:
    make_queue(pg_driver, "txq")
    with psycopg.connect(pg_url) as conn:
        client.queue_pause_tx(conn, "txq")
        conn.rollback()
    assert client.queue_get("txq").paused_at is None
    assert control.drain() == []
    with psycopg.connect(pg_url) as conn:
        client.queue_pause_tx(conn, "txq")
    assert client.queue_get("txq").paused_at is not None
    assert control.drain() == [{"action": "pause", "queue": "txq"}]


def test_update_replaces_metadata_and_notifies(
    client: riverboat.Client,
    pg_driver: Any,
    pg_url: str,
    pg_schema: str,
    control: ControlListener,
) -> None:
    make_queue(pg_driver, "meta")
    sql(pg_url, pg_schema, """UPDATE river_queue SET metadata = '{"old": 1}' WHERE name = 'meta'""")
    with counting(pg_driver) as seen:
        out = client.queue_update("meta", metadata={"new": {"deep": True}})
    assert seen == {"queue_update": 1}
    assert out.metadata == {"new": {"deep": True}}
    assert client.queue_get("meta") == out
    assert control.drain() == [
        {"action": "metadata_changed", "metadata": {"new": {"deep": True}}, "queue": "meta"}
    ]
    # Without metadata only updated_at moves, and nobody is told.
    touched = client.queue_update("meta")
    assert touched.metadata == out.metadata and touched.updated_at > out.updated_at
    assert control.drain() == []
    with pytest.raises(NotFoundError):
        client.queue_update("ghost", metadata={})
    with pytest.raises(InvalidInputError):
        client.queue_update("meta", metadata={"x": object()})
    assert control.drain() == []


async def test_async_queue_ops(apg_driver: Any) -> None:
    client = riverboat.AsyncClient(apg_driver)
    await apg_driver.fetch(apg_driver.dialect.queue_create_or_set_updated_at("aq"))
    assert (await client.queue_get("aq")).name == "aq"
    assert [q.name for q in await client.queue_list()] == ["aq"]
    assert (await client.queue_pause("aq"))[0].paused
    assert not (await client.queue_resume("*"))[0].paused
    assert (await client.queue_update("aq", metadata={"k": 1})).metadata == {"k": 1}
