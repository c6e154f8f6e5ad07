"""Postgres statements for job and queue administration (get, list, cancel, retry,
delete, pause, resume...). A mixin of :class:`~riverboat.dialect.postgres.PostgresDialect`."""

from __future__ import annotations

from typing import ClassVar

__all__ = ["PostgresAdmin"]


class PostgresAdmin:
    _queries: ClassVar[dict[str, str]] = {}
