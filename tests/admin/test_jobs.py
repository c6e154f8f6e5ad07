"""Job administration's input checks against real Postgres: bad ids, filters and values
are refused before any SQL runs. What the calls do (cancel, retry, delete, update,
River's JobCancel, JobRetry, JobDelete...) is tested on every driver in
tests/drivers/test_admin.py."""

from __future__ import annotations

import math
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


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"output": math.nan}, "output"),
        ({"output": {"x": math.inf}}, "output"),
        ({"output": "a\x00b"}, "output"),
        ({"output": "a\ud800"}, "output"),
        ({"output": 2**64}, "output"),
        ({"output": _nested(200)}, "output"),
        ({"output": "x" * (32 * 1024 * 1024)}, "output"),
        ({"metadata": {"a": math.inf}}, "metadata"),
        ({"metadata": {"a": math.nan}}, "metadata"),
    ],
    ids=[
        "nan",
        "inf",
        "nul",
        "surrogate",
        "past-int64",
        "too-deep",
        "over-32MB",
        "md-inf",
        "md-nan",
    ],
)
def test_update_refuses_what_a_job_could_not_record_before_any_sql(
    client: riverboat.Client, pg_driver: Any, kwargs: dict[str, Any], field: str
) -> None:
    """job_update(output=...) took what record_output() refuses: NaN and infinities
    (Postgres failed with a raw driver error; SQLite stored them, as 9e999 and null), a
    NUL (stored by SQLite), integers Go can't read, nesting past what riverboat reads
    back, more than River's 32 MB; metadata took NaN and infinities. Each is refused,
    naming the field, before any SQL."""
    job = insert(client)
    with counting(pg_driver) as seen, pytest.raises(InvalidInputError) as info:
        client.job_update(job.id, **kwargs)
    assert info.value.field == field
    assert seen == {}
    with pytest.raises(InvalidInputError) as info:
        client.job_list(metadata={"a": math.nan})
    assert info.value.field == "metadata"
    assert client.job_get(job.id).metadata == {}
