"""Job administration's input checks against real Postgres: bad ids, filters and values
are refused before any SQL runs. What the calls do (cancel, retry, delete, update,
River's JobCancel, JobRetry, JobDelete...) is tested on every driver in
tests/drivers/test_admin.py."""

from __future__ import annotations

from typing import Any

import pytest

import riverboat
from riverboat import InvalidInputError, NotFoundError
from tests.admin.helpers import counting, insert


@pytest.mark.parametrize("bad", ["1", 1.0, True, None])
def test_job_ids_are_validated_before_any_sql(
    client: riverboat.Client, pg_driver: Any, bad: Any
) -> None:
    with counting(pg_driver) as seen:
        for op in (client.job_cancel, client.job_retry, client.job_delete, client.job_update):
            with pytest.raises(InvalidInputError):
                op(bad)
    assert seen == {}


def test_delete_many_needs_a_filter_or_all(client: riverboat.Client, pg_driver: Any) -> None:
    insert(client)
    with counting(pg_driver) as seen, pytest.raises(InvalidInputError):
        client.job_delete_many()
    assert seen == {}
    with pytest.raises(InvalidInputError):
        client.job_delete_many(all="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        client.job_delete_many(kinds=[])


def test_update_validation_and_missing(client: riverboat.Client) -> None:
    with pytest.raises(NotFoundError):
        client.job_update(424242, output=1)
    with pytest.raises(InvalidInputError):
        client.job_update(1, output=object())
    with pytest.raises(InvalidInputError):
        client.job_update(1, metadata=["not", "a", "dict"])  # type: ignore[arg-type]
