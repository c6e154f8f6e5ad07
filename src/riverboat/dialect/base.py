"""What every dialect provides, and the pure pieces dialects share."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from riverboat._job import InsertResult, JobRow, JobState
from riverboat._sql import Query, Statement, render_schema
from riverboat.errors import InvalidInputError

__all__ = ["Dialect", "JobStateUpdate", "validate_schema_name"]

# River: a schema must be a plain identifier, short enough that "<schema>.river_leadership"
# still fits Postgres's 63-byte channel names.
_SCHEMA_RE = re.compile(r"\A[a-zA-Z_][a-zA-Z0-9_]*\Z")
SCHEMA_MAX = 46


def validate_schema_name(schema: str | None) -> str | None:
    if schema is None or schema == "":
        return None
    if not isinstance(schema, str):
        raise InvalidInputError("schema", f"must be a str, not {type(schema).__name__}")
    if len(schema) > SCHEMA_MAX or not _SCHEMA_RE.match(schema):
        raise InvalidInputError(
            "schema",
            f"{schema!r} must be an identifier ([a-zA-Z_][a-zA-Z0-9_]*) of at most "
            f"{SCHEMA_MAX} characters",
        )
    return schema


@dataclass(slots=True)
class JobStateUpdate:
    """One outcome for the completer: River's JobSetStateIfRunning parameters.

    ``None`` means "leave as is". ``finalized`` stamps finalized_at with the database's
    now(). ``error`` is an encoded :class:`AttemptError`; ``metadata_updates`` an encoded
    JSON object merged into metadata, even when the row is no longer running.
    """

    id: int
    state: JobState
    attempt: int | None = None
    error: str | None = None
    finalized: bool = False
    metadata_updates: str | None = None
    scheduled_at: datetime | None = None


class Dialect:
    """Base class: holds the rendered queries and the schema."""

    name: ClassVar[str]
    # Each class in the hierarchy (the dialect and its per-entity mixins, such as
    # PostgresAdmin) contributes its own statements; they are merged here.
    _queries: ClassVar[dict[str, str]] = {}

    def __init__(self, schema: str | None = None) -> None:
        self.schema = validate_schema_name(schema)
        texts: dict[str, str] = {}
        for klass in reversed(type(self).__mro__):
            texts.update(klass.__dict__.get("_queries", {}))
        self.q = {
            name: Query(name, render_schema(text, self.schema)) for name, text in texts.items()
        }

    def stmt(self, query_name: str, /, **params: Any) -> Statement:
        return Statement(self.q[query_name], params)

    # The operations each dialect implements; the signatures are the contract.
    def job_insert_many(
        self, jobs: Sequence[Any], notify_queues: Sequence[str]
    ) -> Statement:  # pragma: no cover - abstract
        raise NotImplementedError

    def decode_insert(self, rows: Sequence[Sequence[Any]]) -> list[InsertResult]:
        raise NotImplementedError  # pragma: no cover

    def decode_job(self, row: Sequence[Any]) -> JobRow:
        raise NotImplementedError  # pragma: no cover

    def decode_jobs(self, rows: Sequence[Sequence[Any]]) -> list[JobRow]:
        decode = self.decode_job
        return [decode(row) for row in rows]
