"""The row contracts: the ``river_job`` and ``river_queue`` columns riverboat reads, once.

:data:`JOB_COLUMNS` is the job row: each column's name, its :class:`~riverboat._job.JobRow`
field, its type and nullability in River's migrated schema on each database (a test
compares them with the catalog), and the placeholder a value that can't be decoded
leaves in its field. Its order is the order of every job-returning statement's
SELECT/RETURNING list and of ``JobRow``'s fields. A dialect says only how it reads each
column (:class:`Read`, keyed by name); from that, :class:`JobReader` derives the column
list, the Postgres row type of a function returning jobs, and ``decode_job`` with its
column-by-column slow path. :data:`QUEUE_COLUMNS` does the same for ``river_queue``
(in :class:`~riverboat._queue.QueueRow` order).

``decode_job`` runs for every job claimed, completed or listed, so it is generated from
the spec as source once at import (as :mod:`dataclasses` writes ``__init__``): one
``JobRow(...)`` call over the row's values, as fast as one written by hand, instead of a
loop or a dict per row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from riverboat._job import JobRow, JobState
from riverboat._queue import QueueRow

__all__ = [
    "COMPLETION_COLUMNS",
    "JOB_COLUMNS",
    "JOB_COPY_COLUMNS",
    "JOB_INDEX",
    "JOB_INSERT_COLUMNS",
    "PREVIEW_ARGS_MAX",
    "QUEUE_COLUMNS",
    "QUEUE_INDEX",
    "Column",
    "JobReader",
    "Read",
    "insert_into_jobs",
    "job_patcher",
    "select_list",
]


@dataclass(frozen=True, slots=True)
class Column:
    """A column as River's migrations create it: ``postgres`` as ``format_type`` shows it
    (``S.`` for the schema), ``sqlite`` as ``PRAGMA table_info`` does."""

    name: str
    postgres: str
    sqlite: str
    nullable: bool
    #: The :class:`~riverboat._job.JobRow` field it fills (job columns only).
    field: str = ""
    #: What decoding leaves in that field when the stored value can't be read.
    placeholder: Any = None


_TSTZ = "timestamp with time zone"
# The earliest time: a NOT NULL timestamp that can't be read is "long past", so the job
# is due and gets failed by id instead of silently never running.
MIN_TIME = datetime.min.replace(tzinfo=UTC)

JOB_COLUMNS: tuple[Column, ...] = (
    Column("id", "bigint", "integer", False, "id", 0),
    Column("args", "jsonb", "blob", False, "encoded_args", "null"),
    Column("attempt", "smallint", "integer", False, "attempt", 0),
    Column("attempted_at", _TSTZ, "timestamp", True, "attempted_at", None),
    Column("attempted_by", "text[]", "blob", True, "attempted_by", []),
    Column("created_at", _TSTZ, "timestamp", False, "created_at", MIN_TIME),
    Column("errors", "jsonb[]", "blob", True, "errors", []),
    Column("finalized_at", _TSTZ, "timestamp", True, "finalized_at", None),
    Column("kind", "text", "text", False, "kind", ""),
    Column("max_attempts", "smallint", "integer", False, "max_attempts", 1),
    Column("metadata", "jsonb", "blob", False, "metadata", {}),
    Column("priority", "smallint", "integer", False, "priority", 1),
    Column("queue", "text", "text", False, "queue", ""),
    Column("state", "S.river_job_state", "text", False, "state", JobState.RUNNING),
    Column("scheduled_at", _TSTZ, "timestamp", False, "scheduled_at", MIN_TIME),
    Column("tags", "character varying(255)[]", "blob", False, "tags", []),
    Column("unique_key", "bytea", "blob", True, "unique_key", None),
    Column("unique_states", "bit(8)", "integer", True, "unique_states", None),
)
#: A job column's position in every job row.
JOB_INDEX: dict[str, int] = {c.name: i for i, c in enumerate(JOB_COLUMNS)}

# What a plain completion's statement returns (job_complete_many): enough to patch the
# claimed row (dialect.base.Dialect.completed_job).
COMPLETION_COLUMNS = ("id", "attempt", "finalized_at", "metadata")

# The columns an insert writes, in the order of every insert statement's column list;
# the others (id, attempt, attempted_at, attempted_by, errors, finalized_at) take the
# table's defaults.
JOB_INSERT_COLUMNS: tuple[str, ...] = (
    "args",
    "created_at",
    "kind",
    "max_attempts",
    "metadata",
    "priority",
    "queue",
    "scheduled_at",
    "state",
    "tags",
    "unique_key",
    "unique_states",
)
# The columns the fast insert copies (Postgres COPY): created_at and, for a job without
# one, scheduled_at take the server's now() default; unique jobs never go through COPY
# (it can't skip a duplicate), so their columns are left out.
JOB_COPY_COLUMNS: tuple[str, ...] = tuple(
    c
    for c in JOB_INSERT_COLUMNS
    if c not in ("created_at", "scheduled_at", "unique_key", "unique_states")
)


def insert_into_jobs(columns: Sequence[str] = JOB_INSERT_COLUMNS) -> str:
    """The head of a statement inserting into ``river_job``:
    ``INSERT INTO <schema>river_job (<columns>)``, ``columns`` named in :data:`JOB_COLUMNS`
    (an insert that also writes the id passes ``("id", *JOB_INSERT_COLUMNS)``)."""
    unknown = [c for c in columns if c not in JOB_INDEX]
    if unknown:
        raise ValueError(f"not river_job columns: {unknown}")
    return f"INSERT INTO <schema>river_job ({', '.join(columns)})"


#: In the rows of ``job_list(preview=True)`` (a listing: the dashboard's, the CLI's
#: table), args longer than this many characters are cut to one more, so a row's
#: ``encoded_args`` longer than this is a cut (and no longer JSON); metadata reads as
#: ``{}`` and errors as the last attempt's only.
PREVIEW_ARGS_MAX = 16 * 1024

QUEUE_COLUMNS: tuple[Column, ...] = (
    Column("name", "text", "text", False),
    Column("created_at", _TSTZ, "timestamp", False),
    Column("metadata", "jsonb", "blob", False),
    Column("paused_at", _TSTZ, "timestamp", True),
    Column("updated_at", _TSTZ, "timestamp", False),
)
#: A queue column's position in every queue row.
QUEUE_INDEX: dict[str, int] = {c.name: i for i, c in enumerate(QUEUE_COLUMNS)}

# JobRow and QueueRow are built positionally from these rows: their fields must be the
# columns, in the same order.
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(JobRow))[: len(JOB_COLUMNS)]
assert _JOB_FIELDS == tuple(c.field for c in JOB_COLUMNS), _JOB_FIELDS
assert tuple(f.name for f in dataclasses.fields(QueueRow)) == tuple(c.name for c in QUEUE_COLUMNS)


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class Read:
    """How a dialect reads one column, when not as it is stored and decoded as it comes."""

    #: SQL reading it, ``{c}`` standing for the (table-qualified) column.
    sql: str = "{c}"
    #: The SQL type ``sql`` yields when it isn't the stored one (Postgres).
    returns: str = ""
    #: ``decode_job``'s fast path: a Python expression of ``{v}`` (the value), using
    #: names from the namespace given to :class:`JobReader`.
    fast: str = "{v}"
    #: The slow path: the field from the value, raising for one it can't read.
    strict: Callable[[Any], Any] = _same
    #: The fast expression lets a NULL through for this NOT NULL column: decode_job
    #: checks it and takes the slow path on None.
    check_null: bool = False


def select_list(
    columns: Sequence[Column],
    reads: Mapping[str, Read],
    table: str = "",
    *,
    when: str = "",
    alias_prefix: str = "",
) -> str:
    """``expression AS column`` for each of ``columns``, in order; ``reads`` says how a
    dialect reads the ones it doesn't read as stored. With ``when``, each is NULL
    unless that condition holds; ``alias_prefix`` goes before each column's name."""
    prefix = f"{table}." if table else ""
    out = []
    for column in columns:
        qualified = prefix + column.name
        read = reads.get(column.name)
        sql = read.sql.format(c=qualified) if read is not None else qualified
        if when:
            sql = f"CASE WHEN {when} THEN {sql} END"
        out.append(f"{sql} AS {alias_prefix}{column.name}")
    return ", ".join(out)


class JobReader:
    """One dialect's reading of the job row, derived from :data:`JOB_COLUMNS` and its
    :class:`Read` per column (a column it doesn't name is read and kept as stored)."""

    def __init__(
        self,
        reads: Mapping[str, Read],
        namespace: Mapping[str, Any],
        preview: Mapping[str, str] | None = None,
    ) -> None:
        unknown = (set(reads) | set(preview or {})) - set(JOB_INDEX)
        if unknown:
            raise ValueError(f"not river_job columns: {sorted(unknown)}")
        self.reads = {c.name: reads.get(c.name, Read()) for c in JOB_COLUMNS}
        #: A listing's reading of the heavy columns (``job_list(preview=True)``): SQL
        #: with ``{c}`` for the column, yielding what the column's read yields.
        self.preview = dict(preview or {})
        #: The slow path's decoder per column, in row order.
        self.strict = tuple(r.strict for r in self.reads.values())
        self.decode_job = self._generate_decoder(namespace)

    def columns(
        self,
        table: str = "",
        only: Sequence[str] = (),
        *,
        preview: bool = False,
        when: str = "",
        alias_prefix: str = "",
    ) -> str:
        """The SELECT/RETURNING list of every job-returning statement; with ``only``,
        of just those columns (in that order); with ``preview``, the heavy columns read
        as a listing reads them (see :data:`PREVIEW_ARGS_MAX`); ``when`` and
        ``alias_prefix`` as :func:`select_list` takes them."""
        columns = [JOB_COLUMNS[JOB_INDEX[name]] for name in only] if only else JOB_COLUMNS
        reads = self.reads
        if preview:
            reads = {**reads}
            for name, sql in self.preview.items():
                reads[name] = dataclasses.replace(reads[name], sql=sql)
        return select_list(columns, reads, table, when=when, alias_prefix=alias_prefix)

    def row_type(self) -> str:
        """The columns with the types read (``id bigint, args text, ...``): the column
        definition list of a function returning job rows (Postgres)."""
        return ", ".join(
            f"{c.name} {self.reads[c.name].returns or c.postgres}" for c in JOB_COLUMNS
        )

    def salvage(self, row: Sequence[Any]) -> JobRow:
        """Decode ``row`` column by column with the strict decoders, putting a placeholder
        where a value fails and naming it in :attr:`JobRow.decode_errors`. The slow path
        of ``decode_job``, taken only when its fast path raised: one bad value never
        makes a whole row (or the batch it came in) unreadable."""
        values: list[Any] = []
        problems: list[str] = []
        for index, (column, decode) in enumerate(zip(JOB_COLUMNS, self.strict, strict=True)):
            try:
                value = decode(row[index])
            except Exception as exc:  # any value another client wrote
                value = column.placeholder
                if isinstance(value, (list, dict)):
                    value = type(value)()  # a fresh one: callers may mutate it
                problems.append(f"{column.name}: {type(exc).__name__}: {exc}")
            values.append(value)
        job = JobRow(*values)
        job.decode_errors = tuple(problems)
        return job

    def _generate_decoder(
        self, namespace: Mapping[str, Any]
    ) -> Callable[[Any, Sequence[Any]], JobRow]:
        lines = ["def decode_job(self, row, /):", "    try:"]
        values = []
        checked = []
        for index, read in enumerate(self.reads.values()):
            value = f"row[{index}]"
            if read.fast.count("{v}") > 1:  # read the row once
                lines.append(f"        v{index} = {value}")
                value = f"v{index}"
            expression = read.fast.format(v=value)
            if read.check_null:
                lines.append(f"        c{index} = {expression}")
                checked.append(f"c{index} is None")
                expression = f"c{index}"
            values.append(expression)
        if checked:
            lines.append(f"        if {' or '.join(checked)}:")
            lines.append("            raise ValueError('a NOT NULL column is NULL')")
        lines.append(f"        return JobRow({', '.join(values)})")
        lines.append("    except Exception:")
        lines.append("        return salvage(row)")
        scope = {**namespace, "JobRow": JobRow, "salvage": self.salvage}
        # Only names from the spec and the dialect's Read table go into this source.
        exec("\n".join(lines), scope)
        decode: Callable[[Any, Sequence[Any]], JobRow] = scope["decode_job"]
        decode.__doc__ = (
            "A job row; never raises for a value in it: what can't be read is named in "
            ":attr:`JobRow.decode_errors`, with a placeholder in its field."
        )
        return decode


def job_patcher(*fields: str) -> Callable[..., JobRow]:
    """A function ``(job, *values)`` returning a copy of ``job`` with ``fields`` set to
    ``values`` (the others shared), built as one ``JobRow(...)`` call; e.g. the row a
    plain completion leaves, from the claimed one."""
    unknown = set(fields) - {c.field for c in JOB_COLUMNS}
    if unknown:
        raise ValueError(f"not JobRow fields: {sorted(unknown)}")
    values = [c.field if c.field in fields else f"job.{c.field}" for c in JOB_COLUMNS]
    source = f"def patch(job, {', '.join(fields)}):\n    return JobRow({', '.join(values)})"
    scope: dict[str, Any] = {"JobRow": JobRow}
    exec(source, scope)  # source built from the spec, as _generate_decoder's
    patch: Callable[..., JobRow] = scope["patch"]
    return patch
