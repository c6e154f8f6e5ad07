"""Postgres statements for leader election and the leader's maintenance services.
A mixin of :class:`~riverboat.dialect.postgres.PostgresDialect`."""

from __future__ import annotations

from typing import ClassVar

__all__ = ["PostgresLeadership"]


class PostgresLeadership:
    _queries: ClassVar[dict[str, str]] = {}
