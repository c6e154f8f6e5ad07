from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import riverboat
from tests.admin.helpers import ControlListener


@pytest.fixture
def client(pg_driver: Any) -> riverboat.Client:
    return riverboat.Client(pg_driver)


@pytest.fixture
def control(pg_url: str, pg_schema: str) -> Iterator[ControlListener]:
    listener = ControlListener(pg_url, pg_schema)
    yield listener
    listener.close()
