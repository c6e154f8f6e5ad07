"""Text from the database, made safe for an operator's terminal.

A job's args, errors and traces hold whatever its code, its callers or another client
wrote: an escape sequence printed raw clears the screen, retitles the window or fakes
output ("all jobs completed OK"), and a carriage return overwrites the line it is on.
The CLI's text output writes every control character as an escape instead (``\\x1b``),
and so do ``riverboat worker``'s log lines, which quote jobs' errors.
``--json`` output needs nothing: JSON escapes them itself.
"""

from __future__ import annotations

import logging
import re

__all__ = ["PrintableFormatter", "printable"]

# C0 controls, DEL and C1 controls; tab and newline are kept where lines are allowed.
# Also the line and paragraph separators (str.splitlines breaks there, so a value could
# fake a line of output) and the bidirectional controls (an override shows text backwards).
# And lone surrogates: JSON's "\ud800" escape decodes to one (Python's json.dumps and
# JavaScript write it; SQLite's json() keeps it), which no terminal encoding can write:
# print raised UnicodeEncodeError, a traceback in place of the job.
_OTHERS = "\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_CONTROLS = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_OTHERS}]")
_CONTROLS_BUT_LINES = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_OTHERS}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with its control characters written as ``\\xNN`` escapes; with
    ``lines``, newlines and tabs are kept (a trace, indented JSON)."""
    return (_CONTROLS_BUT_LINES if lines else _CONTROLS).sub(_escape, text)


class PrintableFormatter(logging.Formatter):
    """Log lines with their control characters escaped, newlines and tabs kept (a
    traceback): a failed job's message or trace is the job's own text."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record), lines=True)
