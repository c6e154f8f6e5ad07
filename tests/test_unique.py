"""Unit tests of riverboat's unique keys against River's current (Go) algorithm. No database.

River (``internal/dbunique``) hashes, with SHA-256, a key string of the form
``&kind=<kind>&args=<json>&period=<RFC3339>&queue=<queue>`` (each part optional, in that
order, and no ``&state=``); the states go into the separate ``unique_states`` bitmask.
Every expected value below is the exact key string River would build, written out by hand,
and the test asserts ``sha256(that string)`` equals riverboat's 32-byte key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar

import pytest

from riverboat import InsertOpts, InvalidInputError, JobState, RawArgs, UniqueOpts
from riverboat._insert import InsertDefaults, encode_args, resolve_insert
from riverboat._unique import (
    DEFAULT_UNIQUE_STATES,
    STATE_BITS,
    unique_key,
    unique_states_bitmask,
    validate_unique_opts,
)

# A Friday afternoon, with a fraction, so every truncation has work to do.
NOW = datetime(2026, 8, 7, 14, 37, 12, 345678, tzinfo=UTC)


def sha(key_string: str) -> bytes:
    return hashlib.sha256(key_string.encode()).digest()


def key_for(
    args: Any,
    opts: UniqueOpts,
    *,
    kind: str | None = None,
    queue: str = "default",
    now: datetime = NOW,
) -> bytes:
    job_kind, encoded = encode_args(args, kind)
    return unique_key(
        opts,
        kind=job_kind,
        encoded_args=encoded,
        queue=queue,
        now=now,
        unique_fields=getattr(args, "unique_fields", None),
        args=args,
    )


# --- River's own test vectors -------------------------------------------------------------
# The cases below reproduce the expected key strings published in River's
# internal/dbunique/db_unique_test.go (TestUniqueKey), with Go struct tags expressed as
# riverboat's `unique_fields` and Go structs as dataclasses or dicts.


@dataclass
class EmailArgs:
    kind: ClassVar[str] = "worker_1"
    unique_fields: ClassVar[tuple[str, ...]] = ("recipient", "subject")
    recipient: str
    subject: str
    body: str
    template_id: int
    scheduled_at: str


def test_river_vector_by_args_with_unique_fields() -> None:
    args = EmailArgs(
        "user@example.com", "Test Email", "This is a test email.", 101, "2024-09-15T10:00:00Z"
    )
    expected = '&kind=worker_1&args={"recipient":"user@example.com","subject":"Test Email"}'
    assert key_for(args, UniqueOpts(by_args=True)) == sha(expected)


class _Fields:
    """Dict-like args with a kind and unique_fields, built per test."""

    def __init__(self, kind: str, data: dict[str, Any], unique_fields: list[str]) -> None:
        self.kind = kind
        self.unique_fields = unique_fields
        self._data = data

    def to_json(self) -> str:
        return json.dumps(self._data)


def test_river_vector_unique_field_absent_is_skipped() -> None:
    # Go: `json:"message,omitempty" river:"unique"` with an empty message is left out.
    args = _Fields(
        "worker_2", {"phone_number": "555-5678", "template_id": 202}, ["phone_number", "message"]
    )
    expected = '&kind=worker_2&args={"phone_number":"555-5678"}'
    assert key_for(args, UniqueOpts(by_args=True)) == sha(expected)


def test_river_vector_unique_field_null_is_kept() -> None:
    # gjson's Exists() is true for an explicit null, so River keeps it (only absent keys go).
    args = _Fields("worker_2", {"phone_number": None, "x": 1}, ["phone_number"])
    assert key_for(args, UniqueOpts(by_args=True)) == sha(
        '&kind=worker_2&args={"phone_number":null}'
    )


def test_river_vector_nested_unique_field() -> None:
    args = _Fields(
        "worker_1",
        {
            "addresses": {"recipient": "john@example.com", "bcc": ""},
            "subject": "Another Test Email",
            "body": "This is another test email.",
        },
        ["subject", "addresses.recipient"],
    )
    expected = (
        '&kind=worker_1&args={"addresses":{"recipient":"john@example.com"},'
        '"subject":"Another Test Email"}'
    )
    assert key_for(args, UniqueOpts(by_args=True)) == sha(expected)


def test_river_vector_whole_substruct_keeps_its_own_key_order() -> None:
    # A tagged struct whose fields are untagged is taken whole, bytes as encoded: "bcc"
    # stays after "recipient" (nested objects are never re-sorted).
    args = _Fields(
        "worker_1",
        {
            "addresses": {"recipient": "john@example.com", "bcc": ""},
            "subject": "Another Test Email",
            "body": "This is another test email.",
        },
        ["addresses", "subject"],
    )
    expected = (
        '&kind=worker_1&args={"addresses":{"recipient":"john@example.com","bcc":""},'
        '"subject":"Another Test Email"}'
    )
    assert key_for(args, UniqueOpts(by_args=True)) == sha(expected)


def test_river_vector_multi_level_nesting() -> None:
    args = _Fields(
        "worker_1",
        {
            "headers": {
                "addresses": {"recipient": "john@example.com"},
                "subject": "Another Test Email",
            },
            "body": "This is another test email.",
        },
        ["headers.subject", "headers.addresses.recipient"],
    )
    expected = (
        '&kind=worker_1&args={"headers":{"addresses":{"recipient":"john@example.com"},'
        '"subject":"Another Test Email"}}'
    )
    assert key_for(args, UniqueOpts(by_args=True)) == sha(expected)


def test_river_vector_all_keys_sorted_without_unique_fields() -> None:
    args = {"description": "A generic job without unique fields.", "count": 10}
    expected = (
        '&kind=worker_3&args={"count":10,"description":"A generic job without unique fields."}'
    )
    assert key_for(args, UniqueOpts(by_args=True), kind="worker_3") == sha(expected)


@dataclass
class NoFields:
    kind: ClassVar[str] = "worker_1"


def test_river_vector_empty_args() -> None:
    assert key_for(NoFields(), UniqueOpts(by_args=True)) == sha("&kind=worker_1&args={}")


def test_river_vector_period_with_custom_states() -> None:
    # River's CustomByStateWithPeriod: the hour bound, and the states only in the bitmask.
    opts = UniqueOpts(by_period=timedelta(hours=1), by_state=[JobState.COMPLETED])
    key = key_for({"TaskID": "task_123"}, opts, kind="worker_4")
    assert key == sha("&kind=worker_4&period=2026-08-07T14:00:00Z")
    assert unique_states_bitmask(opts.by_state) == 0b00000100


def test_river_vector_exclude_kind() -> None:
    opts = UniqueOpts(by_args=True, exclude_kind=True)
    key = key_for({"task_id": "task_123"}, opts, kind="worker_5")
    assert key == sha('&args={"task_id":"task_123"}')


def test_river_vector_by_queue() -> None:
    key = key_for(
        {"task_id": "task_123"}, UniqueOpts(by_queue=True), kind="w6", queue="email_queue"
    )
    assert key == sha("&kind=w6&queue=email_queue")


def test_river_vector_empty_opts_hash_only_the_kind() -> None:
    # unique_key() itself, like Go's buildUniqueKeyString, writes just the kind; inserts
    # never call it for empty options (see test_empty_and_exclude_kind_only_are_not_unique).
    assert key_for({"task_id": "x"}, UniqueOpts(), kind="worker_7") == sha("&kind=worker_7")


# --- The riverqueue-ruby gem's vectors ------------------------------------------------------
# Reproduced from the key strings spelled out in riverqueue-ruby spec/client_spec.rb
# ("inserts a new unique job with ..."), which follow River's string format.


def test_ruby_vector_minimal_by_queue() -> None:
    assert key_for({"job_num": 1}, UniqueOpts(by_queue=True), kind="simple") == sha(
        "&kind=simple&queue=default"
    )


def test_ruby_vector_all_options() -> None:
    # by_args + 15-minute period + by_queue + exclude_kind; args sorted by key.
    opts = UniqueOpts(
        by_args=True,
        by_period=15 * 60,
        by_queue=True,
        by_state=["available", "cancelled", "pending", "running", "scheduled"],
        exclude_kind=True,
    )
    args = {"customer_id": 1, "order_id": 2, "trace_id": 3, "email": "john@example.com"}
    expected = (
        '&args={"customer_id":1,"email":"john@example.com","order_id":2,"trace_id":3}'
        "&period=2026-08-07T14:30:00Z&queue=default"
    )
    assert key_for(args, opts, kind="complex") == sha(expected)
    assert unique_states_bitmask(opts.by_state) == 0x01 | 0x02 | 0x10 | 0x40 | 0x80


def test_ruby_vector_custom_by_args_subset() -> None:
    args = _Fields(
        "complex",
        {"customer_id": 1, "order_id": 2, "trace_id": 3, "email": "john@example.com"},
        ["order_id", "customer_id"],
    )
    assert key_for(args, UniqueOpts(by_args=True)) == sha(
        '&kind=complex&args={"customer_id":1,"order_id":2}'
    )


# --- The algorithm, case by case -------------------------------------------------------------


def test_part_order_is_kind_args_period_queue_and_no_state() -> None:
    opts = UniqueOpts(by_args=True, by_period=timedelta(minutes=5), by_queue=True)
    key = key_for({"b": 2, "a": 1}, opts, kind="k1", queue="q1")
    assert key == sha('&kind=k1&args={"a":1,"b":2}&period=2026-08-07T14:35:00Z&queue=q1')
    # The same options plus custom states give the same key: states are not hashed.
    with_states = UniqueOpts(
        by_args=True,
        by_period=timedelta(minutes=5),
        by_queue=True,
        by_state=[*DEFAULT_UNIQUE_STATES, JobState.CANCELLED],
    )
    assert key_for({"b": 2, "a": 1}, with_states, kind="k1", queue="q1") == key


def test_key_is_32_raw_bytes() -> None:
    key = key_for({"a": 1}, UniqueOpts(by_args=True), kind="k1")
    assert isinstance(key, bytes)
    assert len(key) == 32


def test_dict_keys_are_sorted_at_every_level_like_a_go_map() -> None:
    # Go: map[string]any args. encoding/json writes every map's keys sorted, so the raw
    # bytes River copies for "b" (and the maps inside the list) are already sorted.
    first = key_for({"b": {"z": 1, "a": 2}, "a": 1}, UniqueOpts(by_args=True), kind="k1")
    second = key_for({"a": 1, "b": {"a": 2, "z": 1}}, UniqueOpts(by_args=True), kind="k1")
    assert first == second == sha('&kind=k1&args={"a":1,"b":{"a":2,"z":1}}')
    deep = {
        "b": {"z": 1, "a": {"y": 1, "x": [{"k": 1, "c": 2}]}},
        "a": [{"n": 1, "m": {"q": 1, "p": 2}}],
    }
    expected = (
        '&kind=k1&args={"a":[{"m":{"p":2,"q":1},"n":1}],'
        '"b":{"a":{"x":[{"c":2,"k":1}],"y":1},"z":1}}'
    )
    assert key_for(deep, UniqueOpts(by_args=True), kind="k1") == sha(expected)


@dataclass
class Inner:
    zulu: int
    alpha: int


@dataclass
class OrderArgs:
    kind: ClassVar[str] = "order"
    zeta: str
    inner: Inner
    labels: dict[str, Any]
    lines: list[Inner]


def test_struct_fields_keep_their_order_while_dicts_inside_them_are_sorted() -> None:
    # Go: type Inner struct{ Zulu int `json:"zulu"`; Alpha int `json:"alpha"` } keeps its
    # declaration order; Labels map[string]any is sorted. River sorts only the top level.
    args = OrderArgs(
        zeta="z",
        inner=Inner(zulu=1, alpha=2),
        labels={"y": {"d": 1, "c": 2}, "x": Inner(zulu=3, alpha=4)},
        lines=[Inner(zulu=5, alpha=6)],
    )
    expected = (
        '&kind=order&args={"inner":{"zulu":1,"alpha":2},'
        '"labels":{"x":{"zulu":3,"alpha":4},"y":{"c":2,"d":1}},'
        '"lines":[{"zulu":5,"alpha":6}],"zeta":"z"}'
    )
    assert key_for(args, UniqueOpts(by_args=True)) == sha(expected)


@dataclass
class TaggedOrderArgs:
    kind: ClassVar[str] = "order"
    unique_fields: ClassVar[tuple[str, ...]] = ("labels", "inner")
    zeta: str
    inner: Inner
    labels: dict[str, Any]


def test_unique_fields_copy_go_encoded_values_sorted_maps_and_ordered_structs() -> None:
    # Go: `river:"unique"` on Inner (a struct without tagged fields: taken whole, in field
    # order) and on Labels (a map: its bytes as encoding/json wrote them, sorted).
    args = TaggedOrderArgs("z", Inner(zulu=1, alpha=2), {"b": 1, "a": {"z": 0, "y": 9}})
    expected = '&kind=order&args={"inner":{"zulu":1,"alpha":2},"labels":{"a":{"y":9,"z":0},"b":1}}'
    assert key_for(args, UniqueOpts(by_args=True)) == sha(expected)


def test_pydantic_models_keep_field_order_and_their_dicts_are_sorted() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Point(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        y: int
        x: int

    class Shape(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        kind: ClassVar[str] = "shape"
        origin: Point
        tags: dict[str, int]

    args = Shape(origin=Point(y=1, x=2), tags={"b": 1, "a": 2})
    expected = '&kind=shape&args={"origin":{"y":1,"x":2},"tags":{"a":2,"b":1}}'
    assert key_for(args, UniqueOpts(by_args=True)) == sha(expected)


def test_resolve_insert_sorts_nested_dicts_of_a_dataclass() -> None:
    args = OrderArgs("z", Inner(zulu=1, alpha=2), {"y": 2, "x": 1}, [])
    params = resolve_insert(
        args, InsertOpts(unique_opts=UniqueOpts(by_args=True)), None, InsertDefaults(), now=NOW
    )
    expected = (
        '&kind=order&args={"inner":{"zulu":1,"alpha":2},"labels":{"x":1,"y":2},'
        '"lines":[],"zeta":"z"}'
    )
    assert params.unique_key == sha(expected)


def test_values_are_encoded_as_go_encodes_them() -> None:
    # Go's encoding/json: HTML characters escaped, UTF-8 verbatim, float64 1.0 as "1",
    # 1e16 in plain notation, 1e-7 as "1e-7", lists compact.
    args = {
        "html": "<a href='x'>&</a>",
        "name": "José 🚀",
        "amount": 10.0,
        "big": 1e16,
        "tiny": 1e-7,
        "list": [1, 2.5, None, True],
    }
    expected = (
        '&kind=k1&args={"amount":10,"big":10000000000000000,'
        '"html":"\\u003ca href=\'x\'\\u003e\\u0026\\u003c/a\\u003e",'
        '"list":[1,2.5,null,true],"name":"José 🚀","tiny":1e-7}'
    )
    assert key_for(args, UniqueOpts(by_args=True), kind="k1") == sha(expected)


def test_to_json_spacing_and_escapes_do_not_change_the_key() -> None:
    spaced = _Fields("k1", {}, [])
    spaced.to_json = lambda: '{ "b" : [1, 2],\n "a": "Jos\\u00e9" }'  # type: ignore[method-assign]
    compact = {"a": "José", "b": [1, 2]}
    expected = sha('&kind=k1&args={"a":"José","b":[1,2]}')
    assert key_for(spaced, UniqueOpts(by_args=True)) == expected
    assert key_for(compact, UniqueOpts(by_args=True), kind="k1") == expected


def test_ascii_keys_are_written_verbatim_like_sjson() -> None:
    # River rebuilds the object with sjson, which writes plain ASCII keys between quotes
    # without HTML escaping; only keys needing JSON escapes go through Go's encoder.
    args = {"a<b": 1, "é&": 2, 'q"': 3}
    expected = '&kind=k1&args={"a<b":1,"q\\"":3,"é\\u0026":2}'
    assert key_for(args, UniqueOpts(by_args=True), kind="k1") == sha(expected)


def test_non_ascii_keys_sort_by_code_point() -> None:
    # Go sorts keys bytewise; UTF-8 byte order is code point order, so "Z" < "a" < "é".
    args = {"é": 1, "a": 2, "Z": 3}
    expected = '&kind=k1&args={"Z":3,"a":2,"é":1}'
    assert key_for(args, UniqueOpts(by_args=True), kind="k1") == sha(expected)


def test_by_args_distinguishes_args() -> None:
    one = key_for({"id": 1}, UniqueOpts(by_args=True), kind="k1")
    two = key_for({"id": 2}, UniqueOpts(by_args=True), kind="k1")
    assert one != two
    # Without by_args the args are not part of the key at all.
    assert key_for({"id": 1}, UniqueOpts(by_queue=True), kind="k1") == key_for(
        {"id": 2}, UniqueOpts(by_queue=True), kind="k1"
    )


def test_unique_fields_mixed_with_dotted_siblings_follow_sorted_path_order() -> None:
    # "a-x" < "a.b" < "a.c" bytewise, so the object is built a-x first, then a.{b,c}.
    args = _Fields("k1", {"a": {"c": 3, "b": 2, "d": 4}, "a-x": 1}, ["a.c", "a-x", "a.b"])
    expected = '&kind=k1&args={"a-x":1,"a":{"b":2,"c":3}}'
    assert key_for(args, UniqueOpts(by_args=True)) == sha(expected)


def test_unique_fields_none_present_gives_nothing_after_args() -> None:
    # River assembles the filtered object with sjson starting from empty bytes (not "{}"),
    # so when every unique field is absent nothing is written: "&args=" and then nothing.
    args = _Fields("k1", {"other": 1}, ["missing"])
    assert key_for(args, UniqueOpts(by_args=True)) == sha("&kind=k1&args=")
    by_queue = UniqueOpts(by_args=True, by_queue=True)
    assert key_for(args, by_queue, queue="q") == sha("&kind=k1&args=&queue=q")


@dataclass
class CustomerArgs:
    kind: ClassVar[str] = "notify"
    unique_fields: ClassVar[tuple[str, ...]] = ("customer.id", "customer.region")
    customer: dict[str, Any] | None


def test_unique_fields_through_null_count_as_absent() -> None:
    # Go: Customer *Customer `json:"customer"` with `river:"unique"` fields inside. A nil
    # pointer encodes as null, gjson finds no "customer.id" under it, so nothing is
    # written; a present null leaf is kept as null.
    assert key_for(CustomerArgs(None), UniqueOpts(by_args=True)) == sha("&kind=notify&args=")
    assert key_for(CustomerArgs({"name": "x"}), UniqueOpts(by_args=True)) == sha(
        "&kind=notify&args="
    )
    assert key_for(CustomerArgs({"region": None, "id": 7}), UniqueOpts(by_args=True)) == sha(
        '&kind=notify&args={"customer":{"id":7,"region":null}}'
    )
    # A path through a value that is not an object is absent too.
    assert key_for(CustomerArgs("plain"), UniqueOpts(by_args=True)) == sha(  # type: ignore[arg-type]
        "&kind=notify&args="
    )


def test_empty_unique_fields_means_all_fields() -> None:
    args = _Fields("k1", {"b": 1, "a": 2}, [])
    assert key_for(args, UniqueOpts(by_args=True)) == sha('&kind=k1&args={"a":2,"b":1}')


@pytest.mark.parametrize("bad", ["email", ["a..b"], [""], [3], [()], [("a", 1)], ["0"], ["a.12"]])
def test_unique_fields_must_be_a_list_of_paths(bad: Any) -> None:
    args = _Fields("k1", {"email": "x"}, bad)
    with pytest.raises(InvalidInputError) as info:
        key_for(args, UniqueOpts(by_args=True))
    assert info.value.field == "args.unique_fields"


# --- by_period --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("period", "bound"),
    [
        (timedelta(seconds=1), "2026-08-07T14:37:12Z"),
        (timedelta(minutes=15), "2026-08-07T14:30:00Z"),
        (timedelta(hours=1), "2026-08-07T14:00:00Z"),
        (timedelta(hours=5), "2026-08-07T14:00:00Z"),
        (timedelta(days=1), "2026-08-07T00:00:00Z"),
        # Go truncates from its zero time, 0001-01-01, a Monday, so weekly buckets start on
        # Mondays (2026-08-03). Truncating from the Unix epoch (a Thursday) would give
        # 2026-08-06: the two origins are 719162 days apart, 3 more than a whole week.
        (timedelta(days=7), "2026-08-03T00:00:00Z"),
        (3600.0, "2026-08-07T14:00:00Z"),
        (900, "2026-08-07T14:30:00Z"),
    ],
)
def test_period_bound(period: timedelta | float, bound: str) -> None:
    key = key_for({}, UniqueOpts(by_period=period), kind="k1")
    assert key == sha(f"&kind=k1&period={bound}")


def test_weekly_period_differs_from_unix_epoch_truncation() -> None:
    epoch_based = datetime.fromtimestamp(NOW.timestamp() // (7 * 86400) * (7 * 86400), UTC)
    assert epoch_based.isoformat() == "2026-08-06T00:00:00+00:00"  # a Thursday
    assert key_for({}, UniqueOpts(by_period=timedelta(days=7)), kind="k1") != sha(
        "&kind=k1&period=2026-08-06T00:00:00Z"
    )


def test_5h_period_counts_from_zero_time_too() -> None:
    # 5h does not divide the 62135596800 s between Go's zero time and the Unix epoch
    # (remainder 10800 s = 3h). NOW is 63921710232 s after the zero time; 63921710232 mod
    # 18000 = 2232, so Go's bucket starts 2232 s earlier, at 14:00:00. Counting from the
    # epoch (1786113432 mod 18000 = 9432) would put it at 12:00:00 instead.
    assert (NOW.date().toordinal() - 1) * 86400 + 52632 == 63921710232
    assert 63921710232 % 18000 == 2232 and int(NOW.timestamp()) % 18000 == 9432
    assert key_for({}, UniqueOpts(by_period=timedelta(hours=5)), kind="k1") == sha(
        "&kind=k1&period=2026-08-07T14:00:00Z"
    )


def test_fractional_period_bound_prints_whole_seconds() -> None:
    # 14:37:14.345678 truncated to 1.5s is 14:37:13.5 (14:37:12 is a multiple of 1.5s from
    # the zero time: 63921710232 s). Go's time.RFC3339 has no fraction: "14:37:13Z".
    now = NOW.replace(second=14)
    assert 63921710232 % 3 == 0 and (NOW.date().toordinal() - 1) * 86400 + 52632 == 63921710232
    key = key_for({}, UniqueOpts(by_period=1.5), kind="k1", now=now)
    assert key == sha("&kind=k1&period=2026-08-07T14:37:13Z")


def test_period_bound_is_printed_in_utc() -> None:
    # Same instant given with a +05:30 offset: the bound is the same absolute time, in Z.
    india = NOW.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert key_for({}, UniqueOpts(by_period=timedelta(hours=1)), kind="k1", now=india) == sha(
        "&kind=k1&period=2026-08-07T14:00:00Z"
    )


def test_period_is_the_one_the_job_is_scheduled_in() -> None:
    # River 0.48: the bound comes from InsertOpts.ScheduledAt when set (in UTC), so a job
    # scheduled three hours ahead is deduplicated against that hour, not this one.
    later = (NOW + timedelta(hours=3)).astimezone(timezone(timedelta(hours=-7)))
    params = resolve_insert(
        {"a": 1},
        InsertOpts(scheduled_at=later, unique_opts=UniqueOpts(by_period=timedelta(hours=1))),
        "k1",
        InsertDefaults(),
        now=NOW,
    )
    assert params.unique_key == sha("&kind=k1&period=2026-08-07T17:00:00Z")
    assert params.state == JobState.SCHEDULED
    unscheduled = resolve_insert(
        {"a": 1},
        InsertOpts(unique_opts=UniqueOpts(by_period=timedelta(hours=1))),
        "k1",
        InsertDefaults(),
        now=NOW,
    )
    assert unscheduled.unique_key == sha("&kind=k1&period=2026-08-07T14:00:00Z")


# --- unique_states bitmask ---------------------------------------------------------------------


def test_default_bitmask_is_245() -> None:
    assert unique_states_bitmask(None) == 245
    assert format(245, "08b") == "11110101"  # bit(8) as Postgres stores it


def test_empty_by_state_means_default_states() -> None:
    # Go checks len(ByState) == 0, so an empty list is the default set, not "no states".
    assert unique_states_bitmask([]) == 245
    validate_unique_opts(UniqueOpts(by_state=[]))  # does not raise


@pytest.mark.parametrize(
    ("state", "bit"),
    [
        ("available", 0x01),
        ("cancelled", 0x02),
        ("completed", 0x04),
        ("discarded", 0x08),
        ("pending", 0x10),
        ("retryable", 0x20),
        ("running", 0x40),
        ("scheduled", 0x80),
    ],
)
def test_single_state_bits(state: str, bit: int) -> None:
    # uniquestates: value |= 1 << (7 - position), position available=7 ... scheduled=0.
    assert unique_states_bitmask([state]) == bit
    assert STATE_BITS[JobState(state)] == bit


def test_custom_by_state_bitmasks() -> None:
    required = ["available", "pending", "running", "scheduled"]
    assert unique_states_bitmask(required) == 0b11010001 == 209
    assert unique_states_bitmask([*required, JobState.CANCELLED]) == 211
    assert unique_states_bitmask(list(JobState)) == 255
    # Duplicates and enum/str mixes change nothing.
    assert unique_states_bitmask([*required, "available", JobState.RUNNING]) == 209


def test_resolved_insert_carries_key_and_bitmask() -> None:
    params = resolve_insert(
        {"a": 1},
        InsertOpts(
            queue="q1",
            unique_opts=UniqueOpts(
                by_args=True, by_queue=True, by_state=[*DEFAULT_UNIQUE_STATES, "cancelled"]
            ),
        ),
        "k1",
        InsertDefaults(),
        now=NOW,
    )
    assert params.unique_key == sha('&kind=k1&args={"a":1}&queue=q1')
    assert params.unique_states == 247


def test_empty_opts_are_not_unique() -> None:
    for opts in (UniqueOpts(), UniqueOpts(by_period=0), UniqueOpts(by_period=timedelta(0))):
        params = resolve_insert({}, InsertOpts(unique_opts=opts), "k1", InsertDefaults(), NOW)
        assert params.unique_key is None
        assert params.unique_states is None


@pytest.mark.parametrize("zero", [0, 0.0, timedelta(0)])
def test_a_zero_period_beside_other_options_means_no_period(zero: Any) -> None:
    # River's ByPeriod 0 is "no period", whatever else is set; a zero timedelta was
    # refused as "less than 1 second" next to by_args while a zero int was not.
    params = resolve_insert(
        {"a": 1},
        InsertOpts(unique_opts=UniqueOpts(by_args=True, by_period=zero)),
        "k1",
        InsertDefaults(),
        NOW,
    )
    assert params.unique_key == sha('&kind=k1&args={"a":1}')


@pytest.mark.parametrize(
    "opts",
    [
        UniqueOpts(exclude_kind=True),
        UniqueOpts(exclude_kind=True, by_state=["available", "pending", "running", "scheduled"]),
    ],
)
def test_exclude_kind_without_args_queue_or_period_is_refused(opts: UniqueOpts) -> None:
    # River 0.48 rejects it at insert time; earlier releases ignored it silently.
    with pytest.raises(InvalidInputError) as info:
        resolve_insert({}, InsertOpts(unique_opts=opts), "k1", InsertDefaults(), NOW)
    assert info.value.field == "opts.unique_opts.exclude_kind"


class ArgsWithOwnUnique:
    kind = "own_unique"

    def to_json(self) -> str:
        return '{"id": 7}'

    def insert_opts(self) -> InsertOpts:
        return InsertOpts(unique_opts=UniqueOpts(by_args=True))


def test_empty_per_insert_unique_opts_fall_back_to_the_args_own() -> None:
    # River: insertOpts.UniqueOpts is used unless empty, then the args' InsertOpts().
    params = resolve_insert(
        ArgsWithOwnUnique(), InsertOpts(unique_opts=UniqueOpts()), None, InsertDefaults(), NOW
    )
    assert params.unique_key == sha('&kind=own_unique&args={"id":7}')
    override = resolve_insert(
        ArgsWithOwnUnique(),
        InsertOpts(unique_opts=UniqueOpts(by_queue=True)),
        None,
        InsertDefaults(),
        NOW,
    )
    assert override.unique_key == sha("&kind=own_unique&queue=default")


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "period", [0.5, timedelta(milliseconds=999), -5, timedelta(seconds=-1), float("nan")]
)
def test_period_under_one_second_is_refused(period: Any) -> None:
    with pytest.raises(InvalidInputError) as info:
        validate_unique_opts(UniqueOpts(by_period=period))
    assert info.value.field == "opts.unique_opts.by_period"


@pytest.mark.parametrize("period", ["1h", True, float("inf"), 10**30])
def test_period_of_wrong_type_or_size_is_refused(period: Any) -> None:
    with pytest.raises(InvalidInputError) as info:
        validate_unique_opts(UniqueOpts(by_period=period))
    assert info.value.field == "opts.unique_opts.by_period"


def test_exactly_one_second_is_allowed() -> None:
    validate_unique_opts(UniqueOpts(by_period=1))
    validate_unique_opts(UniqueOpts(by_period=timedelta(seconds=1)))


@pytest.mark.parametrize("bad", ["finished", "AVAILABLE", 3, None])
def test_unknown_state_is_refused(bad: Any) -> None:
    states = [*DEFAULT_UNIQUE_STATES, bad]
    with pytest.raises(InvalidInputError, match="unknown job state") as info:
        validate_unique_opts(UniqueOpts(by_state=states))
    assert info.value.field == "opts.unique_opts.by_state"


def test_by_state_as_a_string_is_refused() -> None:
    with pytest.raises(InvalidInputError) as info:
        validate_unique_opts(UniqueOpts(by_state="available"))
    assert info.value.field == "opts.unique_opts.by_state"


@pytest.mark.parametrize("missing", ["available", "pending", "running", "scheduled"])
def test_each_required_state_must_be_present(missing: str) -> None:
    states = [s for s in DEFAULT_UNIQUE_STATES if s != missing]
    with pytest.raises(InvalidInputError, match=missing) as info:
        validate_unique_opts(UniqueOpts(by_state=states))
    assert info.value.field == "opts.unique_opts.by_state"


@pytest.mark.parametrize("optional", ["completed", "retryable"])
def test_non_required_default_states_may_be_dropped(optional: str) -> None:
    validate_unique_opts(UniqueOpts(by_state=[s for s in DEFAULT_UNIQUE_STATES if s != optional]))


def test_validation_through_resolve_insert_names_the_field() -> None:
    bad = InsertOpts(unique_opts=UniqueOpts(by_period=0.1))
    with pytest.raises(InvalidInputError) as info:
        resolve_insert({}, bad, "k1", InsertDefaults(), NOW)
    assert info.value.field == "opts.unique_opts.by_period"
    with pytest.raises(InvalidInputError) as info:
        resolve_insert({}, InsertOpts(unique_opts={"by_args": True}), "k1", InsertDefaults(), NOW)  # type: ignore[arg-type]
    assert info.value.field == "opts.unique_opts"


# --- field names that are path syntax, and raw JSON args (River 0.48+, PR #1387) ----------
# Expected strings printed by River 0.51.2's own code: rivershared/structtag's
# SortedFieldsWithTag and ExtractValues, then sjson.SetRawBytesOptions, as
# internal/dbunique does, for the Go struct in the comment.


@dataclass
class PathSyntaxArgs:
    # Go: Star `json:"a*b" river:"unique"`, Q `json:"what?" ...`, Colon `json:":x" ...`,
    # UserID `json:"user.id" ...`, Nested struct{Value `json:"inner@key" river:"unique"`;
    # Other `json:"other"`} `json:"outer.key"`, Lit `json:"outer.key.inner@key" ...`,
    # X int `json:"x" river:"unique"`, Note `json:"note"`.
    kind: ClassVar[str] = "path_args"
    unique_fields: ClassVar[tuple[Any, ...]] = (
        "a*b",
        "what?",
        ":x",
        ("user.id",),  # a name with a dot: a tuple of names...
        ("outer.key", "inner@key"),
        "outer\\.key\\.inner@key",  # ...or a backslash before the dot, as in River's path
        "x",
    )
    star: str
    q: str
    colon: str
    user_id: str
    nested: dict[str, str]
    lit: str
    x: int
    note: str

    def to_json(self) -> str:
        return json.dumps(
            {
                "a*b": self.star,
                "what?": self.q,
                ":x": self.colon,
                "user.id": self.user_id,
                "outer.key": self.nested,
                "outer.key.inner@key": self.lit,
                "x": self.x,
                "note": self.note,
            }
        )


def test_unique_field_names_with_path_syntax_are_literal_names() -> None:
    args = PathSyntaxArgs("s", "q", "c", "u1", {"inner@key": "n", "other": "o"}, "l", 1, "z")
    expected = (
        '&kind=path_args&args={":x":"c","a*b":"s","outer.key":{"inner@key":"n"},'
        '"outer.key.inner@key":"l","user.id":"u1","what?":"q","x":1}'
    )
    assert key_for(args, UniqueOpts(by_args=True)) == sha(expected)


def test_a_longer_path_replaces_a_value_taken_whole_as_sjson_does() -> None:
    args = _Fields("k1", {"a": {"b": 1, "c": 2}}, ["a", "a.b"])
    assert key_for(args, UniqueOpts(by_args=True)) == sha('&kind=k1&args={"a":{"b":1}}')


RAW_TEXT = (
    '{ "b" : 1e21, "a": 1.0, "c": {"z": 1, "y": [1.50, 2E3]}, "d": "<&>\\u00e9é", "e": -0.0 }'
)


def test_raw_args_are_stored_and_keyed_as_written() -> None:
    # Go: args whose MarshalJSON returns RAW_TEXT (a json.RawMessage); json.Marshal
    # compacts it, escaping <, > and & but keeping numbers and escapes as written.
    kind, encoded = encode_args(RawArgs(RAW_TEXT, kind="raw_args"))
    assert kind == "raw_args"
    assert encoded == (
        '{"b":1e21,"a":1.0,"c":{"z":1,"y":[1.50,2E3]},"d":"\\u003c\\u0026\\u003e\\u00e9é","e":-0.0}'
    )
    expected = (
        '&kind=raw_args&args={"a":1.0,"b":1e21,"c":{"z":1,"y":[1.50,2E3]},'
        '"d":"\\u003c\\u0026\\u003e\\u00e9é","e":-0.0}'
    )
    assert key_for(RawArgs(RAW_TEXT, kind="raw_args"), UniqueOpts(by_args=True)) == sha(expected)
    # Narrowed to some fields, the values are still the raw bytes.
    narrowed = RawArgs(RAW_TEXT, kind="raw_args", unique_fields=("b", "c.y", "missing"))
    assert key_for(narrowed, UniqueOpts(by_args=True)) == sha(
        '&kind=raw_args&args={"b":1e21,"c":{"y":[1.50,2E3]}}'
    )


def test_dict_args_are_keyed_as_a_go_map_encodes_them() -> None:
    # Go: json.Marshal(map[string]any{"b": 1e21, "a": 1.0, "n": map[string]any{"z": 1,
    # "y": 2.5e-7}, "h": "<é>"}) is {"a":1,"b":1e+21,"h":"\u003cé\u003e","n":{"y":2.5e-7,"z":1}}.
    args = {"b": 1e21, "a": 1.0, "n": {"z": 1, "y": 2.5e-7}, "h": "<é>"}
    expected = '&kind=k1&args={"a":1,"b":1e+21,"h":"\\u003cé\\u003e","n":{"y":2.5e-7,"z":1}}'
    assert key_for(args, UniqueOpts(by_args=True), kind="k1") == sha(expected)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[1, 2]", "must encode to a JSON object"),
        ('{"a": NaN}', "is not valid JSON"),
        ('{"a": 1, "a": 2}', "appears twice"),
        ('{"a": 1', "is not valid JSON"),
        ('{"a": "\\u0000"}', "NUL"),
    ],
)
def test_raw_args_refuse_what_is_not_a_json_object(raw: str, message: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        encode_args(RawArgs(raw, kind="raw_args"))
    assert message in str(info.value)


def test_raw_args_need_one_kind() -> None:
    assert encode_args(RawArgs("{}"), "raw_args") == ("raw_args", "{}")
    with pytest.raises(InvalidInputError):
        encode_args(RawArgs("{}"))
    with pytest.raises(InvalidInputError):
        encode_args(RawArgs("{}", kind="raw_args"), "other_kind")
