"""Queue administration's input checks against real Postgres: bad queue names are
refused before any SQL runs. What the calls do (get, list, pause, resume, update, and
the river_control payload they send) is tested on every driver in
tests/drivers/test_admin.py."""

from __future__ import annotations

from typing import Any

import pytest

import riverboat
from riverboat import InvalidInputError
from tests.admin.helpers import counting


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
