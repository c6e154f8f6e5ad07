"""Bad input to insert: a riverboat ValueError/TypeError naming the field, and no row.

Each case goes through a real client against a real (migrated) Postgres schema, and the
test counts river_job afterwards, so "refused before anything reached the database" is
checked, not assumed. The fuzzing at the end feeds arbitrary strings (huge, SQL-looking,
lone surrogates) into kinds, queues, tags and metadata.

Decisions recorded here:
- Sets in args or metadata are refused (InvalidArgsError / InvalidInputError). JSON has no
  set, and a set's iteration order depends on per-process hash randomisation, so turning it
  into a list would store, and hash into unique keys, different bytes from run to run.
  (``_json.to_jsonable`` still turns sets into lists for other callers, such as recorded
  output.)
- Lone surrogates are refused: they are not Unicode scalar values and cannot be sent as
  UTF-8. (Go would replace invalid UTF-8 with U+FFFD; silently changing data is worse.)
- A NUL character inside JSON strings (args/metadata) is not valid in Postgres jsonb; the
  database refuses it and riverboat raises DriverError, as River's Go client gets a
  database error. Kinds, queues and tags never contain NUL (their formats exclude it).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row

from riverboat import (
    AsyncClient,
    Client,
    DriverError,
    InsertManyParams,
    InsertOpts,
    InvalidArgsError,
    InvalidInputError,
    RiverboatError,
    UniqueOpts,
)
from riverboat._insert import InsertDefaults, resolve_insert, resolve_many


@dataclass
class GoodArgs:
    kind: ClassVar[str] = "good"
    n: int = 0


class BadKind:
    def __init__(self, kind: object) -> None:
        self.kind = kind

    def to_json(self) -> str:
        return "{}"


class RawJson:
    kind = "raw_json"

    def __init__(self, text: object) -> None:
        self.text = text

    def to_json(self) -> object:
        return self.text


@pytest.fixture
def client(pg_driver: Any) -> Client:
    return Client(pg_driver)


@pytest.fixture
def solo_client(pg_url: str, pg_schema: str) -> Iterator[Client]:
    """A client on one plain connection: no pool threads that draw from the global
    ``random`` while hypothesis generates examples (it warns about that)."""
    from riverboat.drivers.psycopg import PsycopgDriver

    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield Client(PsycopgDriver(conn, schema=pg_schema))


@pytest.fixture
def db(pg_url: str, pg_schema: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    with psycopg.connect(
        pg_url, autocommit=True, row_factory=dict_row, options=f"-csearch_path={pg_schema}"
    ) as conn:
        yield conn


def count(db: psycopg.Connection[dict[str, Any]]) -> int:
    got = db.execute("SELECT count(*) AS n FROM river_job").fetchone()
    assert got is not None
    return int(got["n"])


def assert_refused(
    exc: BaseException, field: str, kind: type[BaseException] = InvalidInputError
) -> None:
    assert isinstance(exc, RiverboatError)
    assert isinstance(exc, (ValueError, TypeError))
    assert isinstance(exc, kind)
    assert isinstance(exc, InvalidInputError)
    assert exc.field == field
    assert str(exc).startswith(field + ":")


NAIVE = datetime(2030, 1, 1, 12, 0, 0)
G = GoodArgs()
IIE, IAE = InvalidInputError, InvalidArgsError
U = "opts.unique_opts"
REQUIRED = ["available", "pending", "running", "scheduled"]


def Op(**kwargs: Any) -> InsertOpts:  # short on purpose: the table below is wide
    return InsertOpts(**kwargs)


def Uq(**kwargs: Any) -> InsertOpts:
    return InsertOpts(unique_opts=UniqueOpts(**kwargs))


# (case id, args, opts, kind=, expected field, expected class)
BAD_CASES: list[tuple[str, Any, Any, Any, str, type[Exception]]] = [
    # kind
    ("kind empty", {}, None, "", "kind", IIE),
    ("kind too long", {}, None, "k" * 128, "kind", IIE),
    ("kind not str (dict)", {}, None, 123, "kind", IIE),
    ("kind not str (attr)", BadKind(5), None, None, "kind", IIE),
    ("kind with space", {}, None, "my job", "kind", IIE),
    ("dict args without kind", {"a": 1}, None, None, "kind", IAE),
    # queue
    ("queue empty", G, Op(queue=""), None, "opts.queue", IIE),
    ("queue >64", G, Op(queue="q" * 65), None, "opts.queue", IIE),
    ("queue uppercase", G, Op(queue="Mail"), None, "opts.queue", IIE),
    ("queue space", G, Op(queue="my q"), None, "opts.queue", IIE),
    ("queue lead dash", G, Op(queue="-q"), None, "opts.queue", IIE),
    ("queue trail dash", G, Op(queue="q-"), None, "opts.queue", IIE),
    ("queue double _", G, Op(queue="a__b"), None, "opts.queue", IIE),
    ("queue newline", G, Op(queue="default\n"), None, "opts.queue", IIE),
    ("queue not str", G, Op(queue=7), None, "opts.queue", IIE),
    # priority
    ("priority 0", G, Op(priority=0), None, "opts.priority", IIE),
    ("priority 5", G, Op(priority=5), None, "opts.priority", IIE),
    ("priority str", G, Op(priority="1"), None, "opts.priority", IIE),
    ("priority bool", G, Op(priority=True), None, "opts.priority", IIE),
    ("priority float", G, Op(priority=1.0), None, "opts.priority", IIE),
    # max_attempts
    ("max_attempts 0", G, Op(max_attempts=0), None, "opts.max_attempts", IIE),
    ("max_attempts -1", G, Op(max_attempts=-1), None, "opts.max_attempts", IIE),
    ("max_attempts 40000", G, Op(max_attempts=40000), None, "opts.max_attempts", IIE),
    ("max_attempts bool", G, Op(max_attempts=True), None, "opts.max_attempts", IIE),
    # tags
    ("tag too short", G, Op(tags=["ab"]), None, "opts.tags", IIE),
    ("tag comma", G, Op(tags=["abc,def"]), None, "opts.tags", IIE),
    ("tag space", G, Op(tags=["abc def"]), None, "opts.tags", IIE),
    ("tag >255", G, Op(tags=["t" * 256]), None, "opts.tags", IIE),
    ("tag not str", G, Op(tags=[123]), None, "opts.tags", IIE),
    ("tags a str", G, Op(tags="abc"), None, "opts.tags", IIE),
    ("tag leading dash", G, Op(tags=["-abc"]), None, "opts.tags", IIE),
    ("tag non-ascii", G, Op(tags=["café"]), None, "opts.tags", IIE),
    # args
    ("to_json list", RawJson("[1]"), None, None, "args", IAE),
    ("to_json not json", RawJson("{nope}"), None, None, "args", IAE),
    ("to_json trailing junk", RawJson('{"a": 1} }'), None, None, "args", IAE),
    ("to_json NaN", RawJson('{"a": NaN}'), None, None, "args", IAE),
    ("to_json Infinity", RawJson('{"a": -Infinity}'), None, None, "args", IAE),
    ("to_json int", RawJson(5), None, None, "args", IAE),
    ("to_json bad bytes", RawJson(b"\xff{}"), None, None, "args", IAE),
    ("args set", {"s": {1, 2}}, None, "with_set", "args", IAE),
    ("args NaN", {"x": math.nan}, None, "nan_kind", "args", IAE),
    ("args inf", {"x": math.inf}, None, "inf_kind", "args", IAE),
    ("args object", {"x": object()}, None, "obj_kind", "args", IAE),
    ("args naive datetime", {"at": NAIVE}, None, "dt_kind", "args", IAE),
    ("args surrogate", {"s": "\ud800"}, None, "sur_kind", "args", IAE),
    ("args unsupported type", 42, None, "int_kind", "args", IAE),
    # scheduled_at
    ("scheduled naive", G, Op(scheduled_at=NAIVE), None, "opts.scheduled_at", IIE),
    ("scheduled str", G, Op(scheduled_at="2030-01-01"), None, "opts.scheduled_at", IIE),
    # metadata
    ("metadata list", G, Op(metadata=[("a", 1)]), None, "opts.metadata", IIE),
    ("metadata str", G, Op(metadata="{}"), None, "opts.metadata", IIE),
    ("metadata set", G, Op(metadata={"a": {1}}), None, "opts.metadata", IIE),
    ("metadata NaN", G, Op(metadata={"a": math.nan}), None, "opts.metadata", IIE),
    ("metadata surrogate", G, Op(metadata={"\udfff": 1}), None, "opts.metadata", IIE),
    # sequence (riverboat's, stored in the metadata the caller didn't give)
    ("sequence not str", G, Op(sequence=42), None, "opts.sequence", IIE),
    ("sequence empty", G, Op(sequence=""), None, "opts.sequence", IIE),
    ("sequence NUL", G, Op(sequence="a\x00b"), None, "opts.sequence", IIE),
    ("sequence surrogate", G, Op(sequence="a\ud800"), None, "opts.sequence", IIE),
    # unique opts
    ("unique period <1s", G, Uq(by_period=0.5), None, U + ".by_period", IIE),
    ("unique unknown state", G, Uq(by_state=[*REQUIRED, "done"]), None, U + ".by_state", IIE),
    ("unique missing state", G, Uq(by_state=REQUIRED[:3]), None, U + ".by_state", IIE),
    ("unique not UniqueOpts", G, Op(unique_opts={"by_args": True}), None, U, IIE),
    # opts itself
    ("opts a dict", G, {"queue": "x"}, None, "opts", IIE),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "opts", "kind", "field", "cls"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_CASES],
)
def test_bad_insert_is_refused_and_writes_nothing(
    client: Client,
    db: Any,
    args: Any,
    opts: Any,
    kind: str | None,
    field: str,
    cls: type[Exception],
) -> None:
    with pytest.raises(cls) as info:
        client.insert(args, opts, kind=kind)
    assert_refused(info.value, field, cls)
    with pytest.raises(cls) as info:
        client.insert_many([InsertManyParams(args, opts, kind=kind)])
    assert_refused(info.value, "params[0]." + field, cls)
    assert count(db) == 0


@pytest.mark.parametrize(
    ("args", "opts", "kind", "field", "cls"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_CASES[::6]],
)
async def test_bad_insert_is_refused_by_async_client(
    apg_driver: Any,
    db: Any,
    args: Any,
    opts: Any,
    kind: str | None,
    field: str,
    cls: type[Exception],
) -> None:
    client = AsyncClient(apg_driver)
    with pytest.raises(cls) as info:
        await client.insert(args, opts, kind=kind)
    assert_refused(info.value, field, cls)
    assert count(db) == 0


@pytest.mark.parametrize(
    ("opts", "kind"),
    [
        (InsertOpts(queue="q" * 64), None),
        (InsertOpts(queue="a|b"), None),  # River's regex has a literal | in its class
        (InsertOpts(queue="a-b_c9"), None),
        (InsertOpts(priority=4, max_attempts=32767), None),
        (InsertOpts(tags=["t" * 255, "a-b", "abc"]), None),
        (None, "k" * 127),
    ],
)
def test_boundary_values_are_accepted(
    client: Client, db: Any, opts: InsertOpts | None, kind: str | None
) -> None:
    args: Any = {} if kind else GoodArgs()
    res = client.insert(args, opts, kind=kind)
    assert count(db) == 1
    stored = db.execute("SELECT kind, queue, tags FROM river_job").fetchone()
    assert stored["kind"] == res.job.kind
    assert stored["queue"] == res.job.queue
    assert stored["tags"] == res.job.tags


def test_set_refusal_message_says_why(client: Client) -> None:
    with pytest.raises(InvalidArgsError, match="sets have no stable order"):
        client.insert({"s": frozenset({"a"})}, kind="with_set")


def test_nul_in_json_is_refused_before_the_database(client: Client, db: Any) -> None:
    # Postgres refuses NUL in jsonb only when the statement runs; refused up front now.
    with pytest.raises(InvalidArgsError, match="NUL"):
        client.insert({"s": "a\x00b"}, kind="nul_kind")
    assert count(db) == 0


def test_insert_many_with_one_bad_item_writes_nothing(client: Client, db: Any) -> None:
    params: list[Any] = [GoodArgs(n) for n in range(3)]
    params.insert(2, InsertManyParams(GoodArgs(99), InsertOpts(priority=9)))
    with pytest.raises(InvalidInputError) as info:
        client.insert_many(params)
    assert_refused(info.value, "params[2].opts.priority")
    assert count(db) == 0


def test_insert_many_bad_item_in_a_later_batch_writes_nothing(client: Client, db: Any) -> None:
    params: list[Any] = [GoodArgs(n) for n in range(5_001)]
    params.append(RawJson("[1]"))
    with pytest.raises(InvalidArgsError) as info:
        client.insert_many(params)
    assert_refused(info.value, "params[5001].args", InvalidArgsError)
    assert count(db) == 0


@pytest.mark.parametrize("params", [[], "abc", {"a": 1}, GoodArgs()])
def test_insert_many_params_must_be_a_non_empty_list(client: Client, db: Any, params: Any) -> None:
    with pytest.raises(InvalidInputError) as info:
        client.insert_many(params)
    assert_refused(info.value, "params")
    assert count(db) == 0


# --- fuzzing ----------------------------------------------------------------------------

SQLISH = [
    "'; DROP TABLE river_job; --",
    "default'); DELETE FROM river_job; --",
    '"; SELECT pg_sleep(10); --',
    "$1",
    ":queue",
    "%s",
    "<schema>",
    "\\x00",
    "a,b",
    "{}",
    "{a,b}",
    "NULL",
    "\u2028\u2029",
    "\ud83d",  # a lone high surrogate
    "x\udc80y",  # surrogateescape residue of a bad byte
]

any_char = st.characters(exclude_categories=[])  # includes lone surrogates (Cs)
fuzz_strings = st.one_of(
    st.text(any_char, max_size=80),
    st.text(st.characters(codec="ascii"), max_size=300),
    st.sampled_from(SQLISH),
    st.from_regex(r"\A[a-z0-9]{1,20}(?:[_-][a-z0-9]{1,10}){0,3}\Z"),  # valid queue names
    st.from_regex(r"\A[A-Za-z0-9_][A-Za-z0-9_-]{1,30}[A-Za-z0-9_]\Z"),  # valid tags/kinds
    st.integers(min_value=60, max_value=70_000).map(lambda n: "a" * n),  # huge strings
)

FUZZ = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _stored(db: Any, job_id: int) -> dict[str, Any]:
    found = db.execute(
        "SELECT kind, queue, tags, metadata, args FROM river_job WHERE id = %s", [job_id]
    ).fetchone()
    assert found is not None
    return dict(found)


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


@FUZZ
@given(kind=fuzz_strings)
def test_fuzz_kind(solo_client: Client, db: Any, kind: str) -> None:
    try:
        res = solo_client.insert({"k": kind[:50]}, kind=kind)
    except RiverboatError as exc:
        assert isinstance(exc, (InvalidInputError, DriverError)), exc
        return
    assert _stored(db, res.job.id)["kind"] == kind


@FUZZ
@given(queue=fuzz_strings)
def test_fuzz_queue(solo_client: Client, db: Any, queue: str) -> None:
    try:
        res = solo_client.insert(GoodArgs(), InsertOpts(queue=queue))
    except RiverboatError as exc:
        assert isinstance(exc, InvalidInputError), exc
        assert exc.field == "opts.queue"
        return
    assert _stored(db, res.job.id)["queue"] == queue


@FUZZ
@given(tags=st.lists(fuzz_strings, max_size=4))
def test_fuzz_tags(solo_client: Client, db: Any, tags: list[str]) -> None:
    try:
        res = solo_client.insert(GoodArgs(), InsertOpts(tags=tags))
    except RiverboatError as exc:
        assert isinstance(exc, InvalidInputError), exc
        assert exc.field == "opts.tags"
        return
    assert _stored(db, res.job.id)["tags"] == tags


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**62), 2**62) | fuzz_strings,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(fuzz_strings, inner, max_size=3),
    max_leaves=8,
)


@FUZZ
@given(metadata=st.dictionaries(fuzz_strings, json_values, max_size=4))
def test_fuzz_metadata(solo_client: Client, db: Any, metadata: dict[str, Any]) -> None:
    try:
        res = solo_client.insert(GoodArgs(), InsertOpts(metadata=metadata))
    except DriverError:
        # Postgres jsonb cannot hold U+0000; nothing else may reach the database and fail.
        assert _has_nul(metadata)
        return
    except RiverboatError as exc:
        assert isinstance(exc, InvalidInputError), exc
        assert exc.field == "opts.metadata"
        return
    assert _stored(db, res.job.id)["metadata"] == metadata
    assert res.job.metadata == metadata


@FUZZ
@given(args=st.dictionaries(fuzz_strings, json_values, max_size=4))
def test_fuzz_args_with_unique_key(solo_client: Client, db: Any, args: dict[str, Any]) -> None:
    # Args go through encoding and the unique-key builder (sorting, sjson-style keys).
    opts = InsertOpts(unique_opts=UniqueOpts(by_args=True, by_queue=True))
    try:
        res = solo_client.insert(args, opts, kind="fuzz_args")
    except DriverError:
        assert _has_nul(args)
        return
    except RiverboatError as exc:
        assert isinstance(exc, InvalidInputError), exc
        assert exc.field == "args"
        return
    stored = _stored(db, res.job.id)
    assert stored["args"] == args
    again = solo_client.insert(dict(reversed(list(args.items()))), opts, kind="fuzz_args")
    assert again.unique_skipped_as_duplicate
    assert again.job.id == res.job.id


def test_datetimes_in_args_are_encoded_like_go(client: Client, db: Any) -> None:
    at = datetime(2030, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)
    res = client.insert({"at": at}, kind="dt_kind")
    assert _stored(db, res.job.id)["args"] == {"at": "2030-01-02T03:04:05.6Z"}


# --- insert_many's fast path for dict args -----------------------------------------------
# resolve_many resolves dict args with a kind and no options without resolve_insert (the
# placement comes from the client's defaults once per call); it must accept, encode and
# refuse exactly as resolve_insert does.
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=8),
)
_dict_args = st.dictionaries(
    st.one_of(st.text(max_size=6), st.integers(min_value=-3, max_value=3), st.booleans()),
    st.one_of(_scalars, st.lists(_scalars, max_size=3), st.dictionaries(st.text(), _scalars)),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(args=_dict_args, kind=st.sampled_from(["bench_job", "", "has space", "x" * 300]))
def test_insert_many_dict_fast_path_matches_resolve_insert(args: dict[Any, Any], kind: str) -> None:
    defaults = InsertDefaults(queue="bulk", priority=2, max_attempts=7)
    now = datetime.now(UTC)
    expected: Any
    try:
        expected = resolve_insert(args, None, kind, defaults, now)
    except InvalidInputError as exc:
        expected = exc
    try:
        got: Any = resolve_many([InsertManyParams(args, kind=kind)], defaults, now)[0]
    except InvalidInputError as exc:
        got = exc
    if isinstance(expected, InvalidInputError):
        assert type(got) is type(expected)
        assert got.field == f"params[0].{expected.field}"
        assert str(got).split(": ", 1)[1] == str(expected).split(": ", 1)[1]
    else:
        assert got == expected


@pytest.mark.parametrize(
    "bad_args, message",
    [
        ({"n": 2**63}, "outside int64"),
        ({"text": "a\x00b"}, "NUL character"),
        ({"n\x00": 1}, "NUL character"),
        ({1: "a", "1": "b"}, "both '1' in JSON"),
        ({"f": math.nan}, "not JSON serialisable"),
        ({"s": {1, 2}}, "sets have no stable order"),
    ],
)
def test_insert_many_fast_refuses_bad_dict_args_before_writing(
    client: Client, db: Any, bad_args: dict[Any, Any], message: str
) -> None:
    params = [InsertManyParams({"n": n}, kind="good") for n in range(3)]
    params.append(InsertManyParams(bad_args, kind="good"))
    for insert in (client.insert_many, client.insert_many_fast):
        with pytest.raises(InvalidArgsError, match=message) as info:
            insert(params)
        assert_refused(info.value, "params[3].args", InvalidArgsError)
    assert count(db) == 0


# River's queue pattern as River writes it; Python's engine backtracks exponentially on
# it, so riverboat checks the same language with an unambiguous pattern.
RIVER_QUEUE_RE = r"\A(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*\Z"


@given(name=st.text(alphabet="ab09_|-A !", max_size=12))
def test_queue_names_are_rivers_language(name: str) -> None:
    import re

    from riverboat._insert import validate_queue

    river_says = re.match(RIVER_QUEUE_RE, name) is not None
    try:
        validate_queue(name)
        ours = True
    except InvalidInputError:
        ours = False
    assert ours == river_says, name


def test_a_long_invalid_queue_name_is_refused_at_once() -> None:
    """Refused without backtracking: with River's pattern as written, 28 characters took
    about 5 s and 64 would take years (the dashboard checks ?queue= on its loop)."""
    from riverboat._insert import validate_queue

    with pytest.raises(InvalidInputError, match="queue"):
        validate_queue("a" * 63 + "!")


@pytest.mark.parametrize("pending", ["no", [0], 1])
def test_pending_must_be_a_bool(pending: Any) -> None:
    """A truthy non-bool made a pending job nothing would ever claim."""
    with pytest.raises(InvalidInputError, match=r"opts\.pending"):
        resolve_insert(
            GoodArgs(), InsertOpts(pending=pending), None, InsertDefaults(), datetime.now(UTC)
        )


def test_the_latest_storable_time_reads_back_as_written() -> None:
    """Past 9999-12-29 a Postgres read is clamped to it: a job scheduled for 9999-12-30
    read back a day early. Refused instead, naming the range."""
    from datetime import timedelta

    from riverboat._insert import TIME_MAX, validate_time

    assert validate_time(TIME_MAX, "opts.scheduled_at") == TIME_MAX
    with pytest.raises(InvalidInputError, match="1000-01-01 to 9999-12-29"):
        validate_time(TIME_MAX + timedelta(microseconds=1), "opts.scheduled_at")
