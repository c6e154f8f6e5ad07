"""JSON encoding that matches Go's encoding/json byte for byte for the common cases.

River computes unique keys over encoded args, so riverboat encodes args the way Go does:
compact separators, UTF-8 verbatim, and ``<``, ``>``, ``&``, U+2028 and U+2029 escaped.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from json.scanner import make_scanner
from typing import Any

from riverboat.errors import InvalidInputError, RiverboatError

__all__ = [
    "MAX_JSON_DEPTH",
    "check_json_value",
    "go_compact",
    "go_float",
    "go_json_canonical",
    "go_json_dumps",
    "go_json_storable",
    "go_json_string",
    "split_object",
    "storable_json",
    "storable_text",
    "to_jsonable",
]

# Go's HTML-safe escaping; these characters only ever appear inside JSON strings, so a plain
# replace on the encoded text is exact.
_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)
_NEEDS_ESCAPE = frozenset("<>&\u2028\u2029")


# What json.loads runs underneath its wrappers (the C scanner when the _json module is
# there); like json's own default decoder, one instance serves every thread.
_scan_once: Callable[[str, int], tuple[Any, int]] = make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]  # typeshed: the context is the decoder
)


# How deep args and metadata may nest (objects and arrays, the outermost one is level 1).
# Insert refuses deeper values; every reader riverboat ships (the worker's decode, pydantic
# models whose JSON parser stops at 200 levels, the dashboard's indented rendering, the
# CLI's --json output) reads this depth with room to spare under Python's recursion limit.
# Rows deeper than this written by another client are read when Python can; those it
# can't decode read as undecodable (a ValueError), never a RecursionError.
MAX_JSON_DEPTH = 128


class JSONTooDeepError(RiverboatError, ValueError):
    """JSON nested more deeply than Python's recursion limit lets it be decoded (a row
    another client wrote): a ValueError, as any JSON that can't be decoded."""

    def __init__(self) -> None:
        super().__init__("JSON nested too deeply to decode (Python's recursion limit)")


def json_loads(text: str | bytes) -> Any:
    """``json.loads`` for the JSON a database hands back, which has no white space
    around it: the C scanner alone, without ``json.loads``' wrappers (0.3 µs against
    1.05 for ``{"num":0}``). Anything else (white space around, bytes, an error) goes
    through ``json.loads``, which decides, and raises, as it always did. JSON nested
    past what the recursion limit allows raises :class:`JSONTooDeepError` (a
    ValueError), not a RecursionError."""
    try:
        if type(text) is str:
            try:
                value, end = _scan_once(text, 0)
            except (StopIteration, ValueError):
                pass
            else:
                if end == len(text):
                    return value
        return json.loads(text)
    except RecursionError:
        raise JSONTooDeepError() from None


def date_time_text(moment: datetime, sep: str = "T") -> str:
    """``moment``'s date and time of day as ``YYYY-MM-DD<sep>HH:MM:SS``, the year in four
    digits as Go and RFC3339 write it: strftime("%Y") writes year 999 as "999" (glibc),
    which no RFC3339 parser reads back and which sorts wrongly as text."""
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"{sep}{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    )


def _format_go_time(moment: datetime) -> str:
    # Go encodes time.Time as RFC3339Nano with its own offset.
    if moment.tzinfo is None:
        raise TypeError("a naive datetime: attach a timezone")
    text = date_time_text(moment)
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    offset = moment.utcoffset()
    if offset is None or not offset:
        return text + "Z"
    total = int(offset.total_seconds())
    sign = "+" if total >= 0 else "-"
    total = abs(total)
    return f"{text}{sign}{total // 3600:02d}:{total % 3600 // 60:02d}"


def to_jsonable(value: Any) -> Any:
    """``json.dumps`` default hook: dataclasses, datetimes, UUIDs, enums, decimals.

    Sets become lists here (in iteration order); job args and metadata refuse them
    instead (see :func:`_to_jsonable_ordered`)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return _format_go_time(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _to_jsonable_ordered(value: Any) -> Any:
    # A set's iteration order depends on hashing (randomised per process for str), so the
    # same args would encode, and hash into unique keys, differently from one process to
    # the next. Job args and metadata therefore refuse sets rather than pick an order.
    if isinstance(value, (set, frozenset)):
        raise TypeError(
            f"Object of type {type(value).__name__} is not JSON serializable "
            "(sets have no stable order; pass a sorted list)"
        )
    return to_jsonable(value)


def _has_lone_surrogate(text: str) -> bool:
    # Lone surrogates (from surrogateescape decoding, or "\ud800" literals) are not
    # Unicode scalar values: they cannot be sent as UTF-8. Callers test isascii() first
    # (no ASCII text holds one); encoding is the cheap test (done in C).
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def check_text_param(text: str, field: str) -> str:
    """``text``, or InvalidInputError naming ``field`` when it can't be a statement
    parameter: a NUL character (Postgres refuses it, SQLite keeps it) or a lone surrogate
    (not UTF-8; argv decoding makes them from bad bytes). Also what a name carried in
    JSON metadata must pass (:func:`check_json_value` refuses the same)."""
    if "\x00" in text:
        raise InvalidInputError(field, f"contains a NUL character (\\u0000): {text[:40]!r}")
    if not text.isascii() and _has_lone_surrogate(text):
        raise InvalidInputError(
            field, f"contains a lone surrogate, which is not valid Unicode: {text[:40]!r}"
        )
    return text


def _check_utf8(text: str) -> str:
    # Fail here with a clear ValueError instead of deep in a driver.
    if not text.isascii() and _has_lone_surrogate(text):
        raise ValueError("contains a lone surrogate, which is not valid Unicode")
    return text


INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def _json_key(key: Any) -> str:
    """The object key json.dumps writes for a dict key (it converts non-str keys)."""
    if isinstance(key, str):
        return key
    if key is True or key is False or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    if isinstance(key, int):
        return str(int(key))
    if isinstance(key, float):
        return float.__repr__(key)
    return str(key)  # json.dumps refuses other key types itself


def check_json_value(value: Any) -> None:
    """Refuse, with a ValueError that says where, what would not survive the trip to
    either database and to a Go worker unchanged: a NUL character (Postgres rejects it
    in text and jsonb, late; SQLite keeps it), an integer outside int64 (Go can't
    decode it into an integer), and dict keys that collide once JSON makes them strings
    (``{1: "a", "1": "b"}`` would silently keep one), a value that contains itself
    (it would never encode; walking it used to hang), and nesting deeper than
    :data:`MAX_JSON_DEPTH`. Lone surrogates are caught on the encoded text
    (:func:`_check_utf8`). Values json.dumps converts itself (dataclasses,
    datetimes...) are checked after conversion, by the encoder's default hook, and the
    whole encoded text's depth once more (:func:`go_json_dumps`)."""
    if type(value) is dict:
        # The usual job args: a flat object of str keys and plain scalars, checked in one
        # pass; anything else (or anything wrong) takes the general walk below, which
        # says what is wrong.
        for key, item in value.items():
            if type(key) is not str or "\x00" in key:
                break
            kind = type(item)
            if kind is str:
                if "\x00" in item:
                    break
            elif kind is int:
                if not INT64_MIN <= item <= INT64_MAX:
                    break
            elif not (kind is float or kind is bool or item is None):
                break
        else:
            return
    if _plain(value, _PLAIN_DEPTH):
        return
    _walk(value)


# How deep _plain looks before leaving a value to the general walk: job args and
# metadata nest a level or two (a workflow task's metadata, an address in args).
_PLAIN_DEPTH = 4


def _plain(value: Any, depth: int) -> bool:
    """Whether ``value`` is made only of dicts with str keys, lists and plain scalars
    (exact types) that check_json_value accepts, within ``depth`` levels: the common
    nested case, checked without the general walk's bookkeeping. False means "not
    sure" (the walk then decides, and says what is wrong); a container that holds itself
    runs out of depth here."""
    kind = type(value)
    if kind is str:
        return "\x00" not in value
    if kind is int:
        return bool(INT64_MIN <= value <= INT64_MAX)
    if kind is float or kind is bool or value is None:
        return True
    if depth == 0:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or "\x00" in key or not _plain(item, depth - 1):
                return False
        return True
    if kind is list:
        for item in value:
            if not _plain(item, depth - 1):
                return False
        return True
    return False


_LEAVE: Any = object()  # a marker on the walk's stack: the container below it is done


def _too_deep() -> ValueError:
    return ValueError(
        f"is nested deeper than {MAX_JSON_DEPTH} levels, the most riverboat reads back "
        "(docs/reliability.md)"
    )


def _walk(value: Any) -> None:
    """check_json_value's general case: every container and scalar, iteratively, with
    the containers on the current path kept so a value that contains itself is refused
    at once (JSON can't encode it; walking it would never end) and the depth bounded."""
    stack: list[Any] = [value, 1]
    on_path: set[int] = set()
    pop, push = stack.pop, stack.append
    while stack:
        depth = pop()
        item = pop()
        if item is _LEAVE:
            on_path.discard(depth)  # here the "depth" slot holds the container's id
            continue
        kind = type(item)
        if kind is str:
            if "\x00" in item:
                raise ValueError(f"contains a NUL character (\\u0000): {item[:40]!r}")
        elif kind is int:
            if not INT64_MIN <= item <= INT64_MAX:
                raise ValueError(f"integer {item} is outside int64, which Go workers can't read")
        elif (
            kind is dict
            or isinstance(item, dict)
            or kind is list
            or kind is tuple
            or (isinstance(item, (list, tuple)))
        ):
            if depth > MAX_JSON_DEPTH:
                raise _too_deep()
            ident = id(item)
            if ident in on_path:
                raise ValueError(
                    f"contains itself (a {type(item).__name__} that refers back to one of "
                    "its own containers), which JSON can't encode"
                )
            on_path.add(ident)
            push(_LEAVE)
            push(ident)
            if isinstance(item, dict):
                _check_keys(item)
                children: Any = item.values()
            else:
                children = item
            for child in children:
                push(child)
                push(depth + 1)
        elif isinstance(item, int) and not isinstance(item, bool):
            push(int(item))  # an IntEnum or other int subclass: JSON writes its value
            push(depth)
        elif isinstance(item, str):
            push(str(item))
            push(depth)


def _check_keys(item: dict[Any, Any]) -> None:
    keys = item.keys()
    if not all(type(k) is str for k in keys):
        converted = [_json_key(k) for k in keys]
        if len(set(converted)) != len(converted):
            seen: dict[str, Any] = {}
            for original, text in zip(keys, converted, strict=True):
                if text in seen:
                    raise ValueError(
                        f"keys {seen[text]!r} and {original!r} are both {text!r} in JSON"
                    )
                seen[text] = original
    for key in keys:
        if type(key) is str and "\x00" in key:
            raise ValueError(f"key contains a NUL character (\\u0000): {key[:40]!r}")


# Set by the job encoder's default hook: the value held objects converted while encoding
# (dataclasses, models...), whose nesting check_json_value could not see beforehand.
_converted = threading.local()


def _to_jsonable_checked(value: Any) -> Any:
    _converted.any = True
    converted = _to_jsonable_ordered(value)
    check_json_value(converted)
    return converted


# json.dumps with options other than its defaults builds a JSONEncoder on every call;
# these are built once (an encoder keeps no state between calls).
_encode_any = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), default=to_jsonable, allow_nan=False
).encode
_encode_job_value = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), default=_to_jsonable_checked, allow_nan=False
).encode


def go_json_dumps(value: Any, *, allow_sets: bool = True) -> str:
    """Encode ``value`` as Go's encoding/json would (compact, HTML-escaped, UTF-8).

    Floats keep Python's ``repr`` (``1.0`` stays ``1.0``) so Python readers get the type
    back; unique keys use :func:`go_json_canonical`, which formats them as Go does.
    ``allow_sets=False`` (job args and metadata) refuses sets, and everything
    :func:`check_json_value` refuses.
    """
    if allow_sets:
        text = _encode_any(value)
    else:
        check_json_value(value)
        _converted.any = False
        try:
            text = _encode_job_value(value)
        except RecursionError:
            raise _too_deep() from None
        if _converted.any and text.count("{") + text.count("[") > MAX_JSON_DEPTH:
            # Dataclasses and models converted by the encoder's hook were each checked on
            # their own; the depth of the whole is known only now.
            _check_text_depth(text)
    if not _NEEDS_ESCAPE.isdisjoint(text):
        text = text.translate(_GO_ESCAPES)
    return _check_utf8(text)


_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _check_text_depth(text: str) -> None:
    """Refuse encoded JSON nested deeper than :data:`MAX_JSON_DEPTH` (brackets inside
    strings don't count)."""
    depth = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in "{[":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise _too_deep()
        elif token in "}]":
            depth -= 1


# What Postgres can't store in jsonb or text: the NUL character (written by JSON
# encoders as the escape \u0000, refused by jsonb) and lone surrogates (not Unicode
# scalar values, so they can't be sent as UTF-8). An escape is one only when preceded by
# an even number of backslashes (an odd run ends in an escaped backslash).
_NUL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")
_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable_json(text: str) -> str:
    """JSON text made storable by both databases, for what a job writes about itself
    (its error entries, tracebacks, staged metadata, recorded output, log lines): each
    NUL character (the ``\\u0000`` escape) and each lone surrogate becomes U+FFFD, the
    Unicode replacement character. The rest of the text is unchanged, and text that
    needs nothing is returned as is (two scans in C). Args and insert metadata are
    refused instead (:func:`check_json_value`): there the caller can still fix them."""
    if "\\u0000" in text:
        text = _NUL_ESCAPE.sub(lambda m: m.group(1) + REPLACEMENT, text)
    return _without_lone_surrogates(text)


def _without_lone_surrogates(text: str) -> str:
    if not text.isascii() and _has_lone_surrogate(text):
        return _SURROGATE.sub(REPLACEMENT, text)
    return text


def storable_text(text: str) -> str:
    """Plain text with :func:`storable_json`'s rule: NUL characters and lone surrogates
    become U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    return _without_lone_surrogates(text)


def go_json_storable(value: Any, *, check_depth: bool = False) -> str:
    """:func:`go_json_dumps` for what a job writes about itself (staged metadata,
    output, log lines): sets allowed, and text Postgres can't store replaced
    (:func:`storable_json`) instead of refused, since the job has already run.
    ``check_depth`` refuses nesting deeper than :data:`MAX_JSON_DEPTH` (a ValueError)."""
    try:
        text = _encode_any(value)
    except RecursionError:
        raise _too_deep() from None
    if check_depth and text.count("{") + text.count("[") > MAX_JSON_DEPTH:
        _check_text_depth(text)
    if not _NEEDS_ESCAPE.isdisjoint(text):
        text = text.translate(_GO_ESCAPES)
    return storable_json(text)


def go_float(value: float) -> str:
    """Format a float as Go's encoding/json formats a float64.

    Go uses the shortest round-tripping digits (as Python's ``repr``), in plain notation
    for 1e-6 <= |x| < 1e21 (``1.0`` is ``1``, ``1e16`` is ``10000000000000000``) and in
    exponent notation outside it, where ``e-07`` is shortened to ``e-7``.
    """
    if not math.isfinite(value):
        raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    text = repr(value)
    magnitude = abs(value)
    if magnitude < 1e-6 or magnitude >= 1e21:
        # Python's repr is already in exponent form here, with Go's two-digit minimum.
        mantissa, _, exponent = text.partition("e")
        if len(exponent) == 3 and exponent.startswith("-0"):
            exponent = "-" + exponent[2]
        return f"{mantissa}e{exponent}"
    return format(Decimal(text).normalize(), "f")


_encode_basestring = json.encoder.encode_basestring  # ensure_ascii=False; in C when it can


def go_json_string(text: str) -> str:
    """``text`` as a JSON string, as Go's encoding/json writes it (UTF-8 verbatim,
    HTML-escaped). The caller has refused NUL characters and lone surrogates."""
    encoded: str = _encode_basestring(text)
    if not _NEEDS_ESCAPE.isdisjoint(encoded):
        encoded = encoded.translate(_GO_ESCAPES)
    return encoded


def go_json_canonical(value: Any) -> str:
    """Encode a decoded JSON value (``json.loads`` output) exactly as Go's encoding/json
    encodes the equivalent Go value: objects keep their key order, floats as
    :func:`go_float`. This is the text River hashes into unique keys."""
    if isinstance(value, str):
        return go_json_string(value)
    if value is None or isinstance(value, bool):
        return "null" if value is None else ("true" if value else "false")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(go_json_string(k) + ":" + go_json_canonical(v) for k, v in value.items())
            + "}"
        )
    if isinstance(value, list):
        return "[" + ",".join(go_json_canonical(v) for v in value) + "]"
    raise TypeError(f"not a decoded JSON value: {type(value).__name__}")


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _scan_string(text: str, pos: int) -> int:
    """Return the index just past the JSON string starting at ``pos`` (a quote)."""
    pos += 1
    while True:
        ch = text[pos]
        if ch == "\\":
            pos += 2
        elif ch == '"':
            return pos + 1
        else:
            pos += 1


def _scan_value(text: str, pos: int) -> int:
    """Return the index just past the JSON value starting at ``pos``."""
    ch = text[pos]
    if ch == '"':
        return _scan_string(text, pos)
    if ch in "{[":
        depth = 0
        while True:
            ch = text[pos]
            if ch == '"':
                pos = _scan_string(text, pos)
                continue
            if ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth == 0:
                    return pos + 1
            pos += 1
    while pos < len(text) and text[pos] not in ",}] \t\r\n":
        pos += 1
    return pos


def split_object(text: str) -> list[tuple[str, str]]:
    """Split a JSON object into ``(key, raw value text)`` pairs, keeping each value's bytes.

    This is what River's unique keys need: values copied byte for byte from the encoded
    args, as gjson's ``Raw`` gives them in Go. The text must be valid JSON.
    """
    pos = _skip_ws(text, 0)
    if pos >= len(text) or text[pos] != "{":
        raise ValueError("not a JSON object")
    pos = _skip_ws(text, pos + 1)
    pairs: list[tuple[str, str]] = []
    if text[pos] == "}":
        return pairs
    while True:
        end = _scan_string(text, pos)
        key = json.loads(text[pos:end])
        pos = _skip_ws(text, end)
        pos = _skip_ws(text, pos + 1)  # past ':'
        end = _scan_value(text, pos)
        pairs.append((key, text[pos:end]))
        pos = _skip_ws(text, end)
        if text[pos] == "}":
            return pairs
        pos = _skip_ws(text, pos + 1)  # past ','


_COMPACT_RE = re.compile(r'"(?:[^"\\]|\\.)*"|[ \t\r\n]+')


def go_compact(text: str) -> str:
    """``text`` (valid JSON) as Go's ``json.Marshal`` writes a ``json.RawMessage``: white
    space between tokens dropped, and inside strings ``<``, ``>``, ``&``, U+2028 and
    U+2029 escaped; everything else, numbers and existing escapes included, as written."""

    def token(match: re.Match[str]) -> str:
        found = match.group()
        return found.translate(_GO_ESCAPES) if found[0] == '"' else ""

    return _COMPACT_RE.sub(token, text)


def utc_now() -> datetime:
    return datetime.now(UTC)
