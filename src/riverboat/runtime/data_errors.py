"""Errors a database (or a driver encoding a parameter) raises for the values a statement
carries, not for the connection or the server: retrying the same values can only fail
again, so the runtime sets such a statement's rows apart (the completer's outcomes, the
promoter's workflow tasks) instead of retrying it whole."""

from __future__ import annotations

from riverboat.errors import DriverError

__all__ = ["PYTHON_DATA_ERRORS", "first_line", "is_data_error"]

# SQLSTATE classes of errors about the data a statement carries, not about the connection
# or the server: 22 data exception (jsonb refusing \u0000 is 22P05), 23 integrity
# constraint violation, 54 program limit exceeded (a value too large).
_DATA_SQLSTATE_CLASSES = frozenset({"22", "23", "54"})
# What encoding a parameter raises in drivers that don't translate it.
PYTHON_DATA_ERRORS = (UnicodeError, ValueError, TypeError, OverflowError)


def is_data_error(exc: BaseException, *, python_errors: bool = True) -> bool:
    """Whether the database (or the driver, encoding a parameter) refused a statement for
    the values it carries, so retrying the same values can only fail again. Looks through
    the causes a driver keeps (``__cause__``, SQLAlchemy's ``.orig``) for a SQLSTATE of
    class 22/23/54, a DB-API ``DataError``/``IntegrityError``, SQLite's constraint and
    too-big codes or its JSON functions' "malformed JSON", or (unless not
    ``python_errors``) a Python encoding error: the promoter, which discards a task
    refused this way, asks the database's word only, so that a driver's bug never
    discards one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        sqlstate = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(sqlstate, str) and sqlstate[:2] in _DATA_SQLSTATE_CLASSES:
            return True
        name = getattr(current, "sqlite_errorname", None)
        if isinstance(name, str) and name.startswith(
            ("SQLITE_CONSTRAINT", "SQLITE_TOOBIG", "SQLITE_MISMATCH")
        ):
            return True
        if type(current).__name__ in ("DataError", "IntegrityError"):
            return True
        if (
            python_errors
            and isinstance(current, PYTHON_DATA_ERRORS)
            and not isinstance(current, DriverError)
        ):
            return True
        if "malformed JSON" in str(current):
            return True
        orig = getattr(current, "orig", None)
        current = current.__cause__ or (orig if isinstance(orig, BaseException) else None)
    return False


def first_line(exc: BaseException) -> str:
    """``exc``'s message, its first line (its type's name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
