"""A dialect without the admin statements (SQLite, until they are written) fails with a
clear NotSupportedError naming the operation, before any SQL."""

from __future__ import annotations

from typing import Any

import pytest

import riverboat
from riverboat.dialect.base import Dialect
from riverboat.drivers.base import Capabilities, DriverStats


class BareDialect(Dialect):
    name = "bare"


class NoSqlDriver:
    def __init__(self) -> None:
        self.dialect = BareDialect()
        self.stats = DriverStats()
        self.capabilities = Capabilities(sync=True)

    def fetch(self, stmt: Any) -> list[Any]:  # pragma: no cover - must not be reached
        raise AssertionError("no statement should run")


@pytest.mark.parametrize(
    ("call", "operation"),
    [
        (lambda c: c.job_cancel(1), "job_cancel"),
        (lambda c: c.job_retry(1), "job_retry"),
        (lambda c: c.job_delete(1), "job_delete"),
        (lambda c: c.job_delete_many(all=True), "job_delete_many"),
        (lambda c: c.job_list(), "job_list"),
        (lambda c: c.job_update(1, output=1), "job_update"),
        (lambda c: c.queue_get("q"), "queue_get"),
        (lambda c: c.queue_list(), "queue_list"),
        (lambda c: c.queue_pause("*"), "queue_pause"),
        (lambda c: c.queue_resume("q"), "queue_resume"),
        (lambda c: c.queue_update("q", metadata={}), "queue_update"),
    ],
)
def test_missing_statements_raise_not_supported(call: Any, operation: str) -> None:
    client = riverboat.Client(NoSqlDriver())
    with pytest.raises(riverboat.NotSupportedError, match=f"{operation} .*bare") as info:
        call(client)
    assert isinstance(info.value, NotImplementedError)
