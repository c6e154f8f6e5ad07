"""Argument types the commands share: a bad value is a usage error (exit 2, with the
usage line), refused by the parser before anything connects."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def page_size(most: int) -> Callable[[str], int]:
    """An argparse ``type``: an int from 1 to ``most`` (the API's limit for that list)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not 1 <= value <= most:
            raise argparse.ArgumentTypeError(f"{value} is not between 1 and {most}")
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
