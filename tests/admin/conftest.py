from __future__ import annotations

from typing import Any

import pytest

import riverboat


@pytest.fixture
def client(pg_driver: Any) -> riverboat.Client:
    return riverboat.Client(pg_driver)
