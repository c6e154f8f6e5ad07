"""Queue administration's input checks against real Postgres: bad queue names are
refused before any SQL runs. What the calls do (get, list, pause, resume, update, and
the river_control payload they send) is tested on every driver in
tests/drivers/test_admin.py."""

from __future__ import annotations

from typing import Any

import pytest

import riverboat
from riverboat import InvalidInputError, NotFoundError
from tests.admin.helpers import counting


@pytest.mark.parametrize("bad", ["", "x" * 1025, "a\x00b", "\ud800", 3, None])
def test_queue_names_are_validated(client: riverboat.Client, pg_driver: Any, bad: Any) -> None:
    with counting(pg_driver) as seen:
        for op in (client.queue_get, client.queue_update):
            with pytest.raises(InvalidInputError):
                op(bad)
        for control in (client.queue_pause, client.queue_resume):
            with pytest.raises(InvalidInputError):
                control(bad)
    assert seen == {}


@pytest.mark.parametrize("foreign", ["Bad Name", "team/a", "x" * 100])
def test_a_queue_another_client_named_is_found_and_paused(
    client: riverboat.Client, foreign: str
) -> None:
    """River's inserts refuse these names; its queue table holds any text another
    client wrote. Such a queue is looked up, paused and resumed as written, as River's
    QueuePause does (they were refused as bad input: the dashboard listed the queue and
    could not pause it); an absent one is not found."""
    with pytest.raises(NotFoundError):
        client.queue_get(foreign)
    with pytest.raises(NotFoundError):
        client.queue_pause(foreign)
    client.driver.fetch(client.driver.dialect.queue_create_or_set_updated_at(foreign))
    assert client.queue_get(foreign).name == foreign
    assert [q.name for q in client.queue_pause(foreign)] == [foreign]
    assert client.queue_get(foreign).paused_at is not None
    client.queue_resume(foreign)
    assert client.queue_get(foreign).paused_at is None
    assert client.queue_update(foreign, metadata={"team": "a"}).metadata == {"team": "a"}
    with pytest.raises(NotFoundError):
        client.queue_get("*")
