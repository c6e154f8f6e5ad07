"""Argument types the commands share: a bad value is a usage error (exit 2, with the
usage line), refused by the parser before anything connects."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from riverboat._json import INT64_MAX, INT64_MIN
from riverboat._seconds import is_seconds


def page_size(most: int) -> Callable[[str], int]:
    """An argparse ``type``: an int from 1 to ``most`` (the API's limit for that list)."""
    return whole_number(1, most)


# Python's int() and float() also read other scripts' digits (Arabic-Indic, fullwidth)
# and underscores: `jobs get` of an Arabic-Indic three acted on job 3, `jobs delete 1_0`
# on job 10 (the dashboard refuses them). Numbers on the command line are ASCII digits.
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")


def _ascii_float(text: str) -> float:
    """``float(text)`` for ASCII text without underscores; ValueError otherwise."""
    if not text.isascii() or "_" in text:
        raise ValueError(text)
    return float(text)


def integer(text: str) -> int:
    """An argparse ``type``: a whole number in ASCII digits (``int`` reads ``٣`` too)."""
    if not _INTEGER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


def job_id(text: str) -> int:
    """An argparse ``type``: a job id, a whole number in int64's range (the id column's):
    one outside it is a usage error like any malformed argument, before connecting."""
    value = integer(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise argparse.ArgumentTypeError(f"{text} is outside the range of job ids (int64)")
    return value


def plain_number(text: str) -> float:
    """An argparse ``type``: a number in ASCII (``float`` reads other scripts' digits
    and underscores too); the option checks its own range."""
    try:
        return _ascii_float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def whole_number(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an int of at least ``low`` (and at most ``high``)."""

    def parse(text: str) -> int:
        value = integer(text)
        if high is not None and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value

    return parse


def seconds(*, positive: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite number of seconds, at least 0 (above 0 with
    ``positive``). NaN passed a plain ``<= 0`` test: as an interval it polled without
    pause, as a timeout it never ended."""

    def parse(text: str) -> float:
        try:
            value = _ascii_float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not is_seconds(value, positive=positive):
            more = "above 0" if positive else "at least 0"
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds {more}")
        return value

    return parse


def add_limit(parser: argparse.ArgumentParser, most: int, default: int, what: str) -> None:
    """A list command's ``--limit``: ``what`` it bounds, from 1 to ``most``."""
    parser.add_argument(
        "--limit",
        type=page_size(most),
        default=default,
        help=f"{what} (1-{most:,}, default {default})",
    )
