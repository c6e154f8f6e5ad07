"""The dialect contract (riverboat.dialect.base.Dialect): every operation is declared
abstract, so a dialect that lacks one (or renamed it) can't even be built. A missing
operation fails here, at construction, naming it, rather than disabling a maintenance
service or skipping a conformance test in silence."""

from __future__ import annotations

import inspect

import pytest

from riverboat.dialect.base import Dialect, NotificationOutbox
from riverboat.dialect.postgres import PostgresDialect
from riverboat.dialect.sqlite import SqliteDialect


def _abstract(cls: type) -> set[str]:
    return set(getattr(cls, "__abstractmethods__", ()))


def test_a_dialect_missing_an_operation_cannot_be_built() -> None:
    from riverboat.dialect.postgres_admin import PostgresAdmin

    class AdminOnly(PostgresAdmin, Dialect):  # the leadership and runtime halves forgotten
        name = "admin_only"

    with pytest.raises(TypeError) as info:
        AdminOnly(None)  # type: ignore[abstract]
    for operation in ("job_insert_many", "time_param", "duration_param", "leader_resign"):
        assert operation in str(info.value)
    assert "job_list" not in str(info.value)  # the admin half is there


@pytest.mark.parametrize("dialect", [PostgresDialect, SqliteDialect])
def test_both_dialects_fulfil_the_whole_contract(dialect: type[Dialect]) -> None:
    assert not _abstract(dialect)
    built = dialect(None)
    declared = _abstract(Dialect)
    # The operations whose SQL each dialect writes, plus the hooks of the admin half
    # (dialect/_admin_common.py) and of the statements Dialect builds itself (leader
    # election, the cleaners), whose encoding both dialects share.
    assert len(declared) >= 24
    for hook in ("job_cancel", "job_delete", "filter_params", "queue_with_control"):
        assert hook in declared
    for name in declared:
        ours = inspect.signature(getattr(Dialect, name))
        theirs = inspect.signature(getattr(built, name).__func__)
        assert list(ours.parameters) == list(theirs.parameters), name


def test_only_sqlite_has_the_notification_outbox() -> None:
    assert isinstance(SqliteDialect(None), NotificationOutbox)
    assert not isinstance(PostgresDialect(None), NotificationOutbox)
