"""Postgres: River's statements, rewritten for riverboat, with array-typed arguments.

Every statement returning jobs lists the columns explicitly
(:func:`~riverboat.dialect._pg_common.job_columns`) and casts JSON to text, ``bit(8)`` to
integer and the enum to text, so every Postgres driver (psycopg, asyncpg, SQLAlchemy,
Django) hands back the same Python types and one decoder serves them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any

from riverboat._insert import InsertParams
from riverboat._job import InsertResult
from riverboat._sql import Statement, render_schema
from riverboat.dialect._pg_common import (
    CHANNEL,
    CLAIM_SET,
    JOB_READER,
    QUEUE_SELECT,
    UNIQUE_CONFLICT,
    clamped,
    job_columns,
    unnest_arrays,
)
from riverboat.dialect._rows import (
    COMPLETION_COLUMNS,
    JOB_COLUMNS,
    JOB_COPY_COLUMNS,
    JOB_INSERT_COLUMNS,
    insert_into_jobs,
)
from riverboat.dialect.base import BulkCopy, CopyBatch, Dialect, JobStateUpdate
from riverboat.dialect.postgres_admin import PostgresAdmin
from riverboat.dialect.postgres_fleet import PostgresFleet
from riverboat.dialect.postgres_flow import PostgresFlow
from riverboat.dialect.postgres_leadership import PostgresLeadership
from riverboat.dialect.postgres_periodic import PostgresPeriodic
from riverboat.dialect.postgres_workflow import PostgresWorkflow

__all__ = ["COPY_COLUMNS", "CopyBatch", "PostgresDialect"]

QUERIES: dict[str, str] = {}

# The pieces the three insert statements share: the columns written, and the unique
# conflict that returns the existing row flagged as a duplicate (xmax is set on a row the
# statement updated rather than inserted).
_INSERT_INTO_JOBS = insert_into_jobs()
_INSERT_INTO_JOBS_WITH_IDS = insert_into_jobs(("id", *JOB_INSERT_COLUMNS))
_ON_CONFLICT_RETURNING = f"""{UNIQUE_CONFLICT}
    DO UPDATE SET kind = river_job.kind
    RETURNING {job_columns()}, (xmax != 0) AS unique_skipped_as_duplicate"""


def _notify_insert(queue: str) -> str:
    """River's insert notification for the queue named by the SQL expression ``queue``,
    counted so the statement can join it (pg_notify returns void)."""
    channel = CHANNEL.format(topic="river_insert")
    return f"""count(pg_notify({channel}, '{{"queue": ' || to_json({queue})::text || '}}'))"""


# The end of a batch insert: River's insert notification for each queue the client's
# limiter allows that got an available job, sent at commit; then the inserted rows.
_NOTIFIED_INSERTED = f"""notified AS (
    SELECT {_notify_insert("q.queue")} AS n
    FROM (
        SELECT DISTINCT queue FROM inserted
        WHERE state = 'available' AND queue = ANY(:notify_queues::text[])
    ) AS q
)
SELECT inserted.* FROM inserted CROSS JOIN notified"""


# A batch's jobs as parallel arrays (``_INSERT_ARRAYS``), unnested into rows named
# _INSERT_ROW; _INSERT_VALUES turns a row into river_job's insert columns.
_INSERT_UNNEST = """:args::jsonb[], :kind::text[], :max_attempts::smallint[], :metadata::jsonb[],
        :priority::smallint[], :queue::text[], :scheduled_at::timestamptz[], :state::text[],
        :tags::text[], :unique_key::bytea[], :unique_states::integer[]"""
_INSERT_ROW = """args, kind, max_attempts, metadata, priority, queue, scheduled_at, state,
           tags, unique_key, unique_states"""
_INSERT_VALUES = """args, coalesce(:now::timestamptz, now()), kind, max_attempts, metadata,
           priority, queue, coalesce(scheduled_at, now()), state::<schema>river_job_state,
           string_to_array(tags, ',')::varchar(255)[], unique_key, unique_states::bit(8)"""


def _insert_many(*, with_ids: bool) -> str:
    """job_insert_many's text; ``with_ids``: the jobs' ids are given (``:ids``), as a
    workflow's tasks have them before the insert (from River's sequence), instead of
    taken from the sequence by the column's default."""
    ids_param, ids_col = (":ids::bigint[], ", "id, ") if with_ids else ("", "")
    return f"""
WITH raw AS (
    SELECT *
    FROM unnest(
        {ids_param}{_INSERT_UNNEST}
    ) AS r({ids_col}{_INSERT_ROW})
),
inserted AS (
    {_INSERT_INTO_JOBS_WITH_IDS if with_ids else _INSERT_INTO_JOBS}
    SELECT {ids_col}{_INSERT_VALUES}
    FROM raw
    {_ON_CONFLICT_RETURNING}
),
{_NOTIFIED_INSERTED}
"""


# One statement inserts the whole batch, returns full rows (existing ones for unique
# duplicates, flagged by xmax), and sends the insert notification for the queues the
# client's limiter allows. No transaction is needed: a single statement is atomic, and a
# NOTIFY inside it goes out at commit.
QUERIES["job_insert_many"] = _insert_many(with_ids=False)
QUERIES["job_insert_many_ids"] = _insert_many(with_ids=True)

# A batch with several unique jobs: their rows are written in unique-key order, so two
# batches sharing keys take the keys' index locks in one order. Written in the order
# given, [A, B] beside [B, A] (or beside a transaction holding A that then inserts B)
# deadlocked, and Postgres failed one of them (River's insert does the same). Ids are
# drawn in the order given first, so the jobs still run in that order, and the rows come
# back in it (a duplicate found by its key, a new row by its id).
QUERIES["job_insert_many_unique"] = f"""
WITH s AS MATERIALIZED (
    SELECT pg_get_serial_sequence(:table::text, 'id')::regclass AS seq
),
raw AS MATERIALIZED (
    SELECT nextval(s.seq) AS id, r.*
    FROM s CROSS JOIN unnest(
        {_INSERT_UNNEST}
    ) WITH ORDINALITY AS r({_INSERT_ROW}, ord)
),
inserted AS (
    {_INSERT_INTO_JOBS_WITH_IDS}
    SELECT id, {_INSERT_VALUES}
    FROM raw
    ORDER BY unique_key NULLS LAST, ord
    {_ON_CONFLICT_RETURNING}
),
{_NOTIFIED_INSERTED}
LEFT JOIN raw by_key ON by_key.unique_key = inserted.unique_key
LEFT JOIN raw by_id ON by_id.id = inserted.id
ORDER BY coalesce(by_key.ord, by_id.ord)
"""

# After a COPY (which can't call pg_notify): the insert notification for each queue the
# client's limiter allows, in the COPY's transaction so it goes out at commit.
QUERIES["job_insert_notify"] = f"""
SELECT {_notify_insert("q.queue")} AS n
FROM unnest(:queues::text[]) AS q(queue)
"""

# One job (Client.insert): job_insert_many's statement with scalar parameters instead of
# unnest over twelve one-element arrays, which cost more to encode (client) and to plan
# and run (server) than the insert itself.
QUERIES["job_insert_one"] = f"""
WITH inserted AS (
    {_INSERT_INTO_JOBS}
    VALUES (
        :args::jsonb, coalesce(:now::timestamptz, now()), :kind::text, :max_attempts::smallint,
        :metadata::jsonb,
        :priority::smallint, :queue::text, coalesce(:scheduled_at::timestamptz, now()),
        :state::text::<schema>river_job_state,
        string_to_array(:tags::text, ',')::varchar(255)[], :unique_key::bytea,
        :unique_states::integer::bit(8)
    )
    {_ON_CONFLICT_RETURNING}
),
notified AS (
    SELECT {_notify_insert("inserted.queue")} AS n
    FROM inserted
    WHERE inserted.state = 'available' AND inserted.queue = :notify_queue::text
)
SELECT inserted.* FROM inserted CROSS JOIN notified
"""

# River's JobGetAvailable: lock with SKIP LOCKED, mark running, return every column.
# The outer UPDATE finds the locked rows by `id = ANY(ARRAY(...))`, not by joining the
# CTE: under the generic plans the driver uses, Postgres estimates `LIMIT $n` as a tenth
# of the table, and a join then turns into a hash join over a sequential scan of
# river_job (66 ms instead of 1 ms per claim on a 420,000-row table); an array of ids is
# always looked up through the primary key.
# attempt is a smallint: a row some other client left at 32767 would make "+ 1" overflow
# and fail the whole claim, on every poll, stalling the queue. The increment saturates
# at 32767 instead (that job then runs past max_attempts and fails or completes alone).
_CLAIM_ASSIGNMENTS = ",\n    ".join(f"{column} = {value}" for column, value in CLAIM_SET.items())
QUERIES["job_get_available"] = f"""
WITH locked_jobs AS (
    SELECT id
    FROM <schema>river_job
    WHERE state = 'available'
      AND queue = :queue::text
      AND scheduled_at <= coalesce(:now::timestamptz, now())
    ORDER BY priority ASC, scheduled_at ASC, id ASC
    LIMIT :max_to_lock::integer
    FOR UPDATE SKIP LOCKED
)
UPDATE <schema>river_job
SET state = 'running',
    {_CLAIM_ASSIGNMENTS}
WHERE river_job.id = ANY(ARRAY(SELECT id FROM locked_jobs))
RETURNING {job_columns("river_job")}
"""

# River 0.48's FetchOnlyKnownKinds: the same claim, of the client's kinds only.
QUERIES["job_get_available_kinds"] = QUERIES["job_get_available"].replace(
    "      AND queue = :queue::text\n",
    "      AND queue = :queue::text\n      AND kind = ANY(:kinds::text[])\n",
)
assert QUERIES["job_get_available_kinds"] != QUERIES["job_get_available"]

# River's JobSetStateIfRunningMany: only rows still running change (a rescued or deleted
# job is not clobbered), metadata merges regardless, and a retry, a snooze or a hand-back
# (available again) of a job with cancel_attempted_at becomes a cancellation. The rows are
# locked first; for the completer with SKIP LOCKED: a row another session holds locked (a
# `SELECT ... FOR UPDATE` left open) is skipped instead of making the whole batch wait for
# as long as the lock is held; the completer finds it still running at its claimed attempt
# and retries it alone (River waits, as job_complete_tx, inside the caller's transaction,
# still does). The UPDATE joins the locked rows by id: the planner drives it with
# primary-key lookups per input row, even when statistics say the table is empty. (An
# extra `id = ANY(:ids)` predicate looks harmless but, with stale statistics, lets the
# planner scan the (state, ...) index over every running job; see tests/admin for the
# EXPLAIN check.) Postgres re-checks the guard against the latest row version when taking
# the lock.
_CANCEL = (
    "(i.state IN ('available', 'retryable', 'scheduled')"
    " AND river_job.metadata ? 'cancel_attempted_at')"
)
_SET_STATE_BODY = f"""
WITH i AS (
    SELECT u.*
    FROM unnest(
        :ids::bigint[], :attempt::integer[], :errors::jsonb[], :finalized::boolean[],
        :metadata_updates::jsonb[], :scheduled_at::timestamptz[], :state::text[],
        :claimed_attempt::integer[]
    ) AS u(id, attempt, errors, finalized, metadata_updates, scheduled_at, state,
           claimed_attempt)
    JOIN <schema>river_job ON river_job.id = u.id
    WHERE (river_job.state = 'running' OR u.metadata_updates IS NOT NULL)
      AND (u.claimed_attempt IS NULL OR river_job.attempt = u.claimed_attempt)
    FOR UPDATE OF river_job <skip_locked>
)
UPDATE <schema>river_job
SET attempt = CASE WHEN river_job.state = 'running' AND NOT {_CANCEL} AND i.attempt IS NOT NULL
                   THEN i.attempt ELSE river_job.attempt END,
    errors = CASE WHEN river_job.state = 'running' AND i.errors IS NOT NULL
                  THEN array_append(river_job.errors, i.errors) ELSE river_job.errors END,
    finalized_at = CASE WHEN river_job.state = 'running' AND ({_CANCEL} OR i.finalized)
                        THEN now() ELSE river_job.finalized_at END,
    metadata = CASE WHEN i.metadata_updates IS NOT NULL
                    THEN river_job.metadata || i.metadata_updates ELSE river_job.metadata END,
    scheduled_at = CASE WHEN river_job.state = 'running' AND NOT {_CANCEL}
                             AND i.scheduled_at IS NOT NULL
                        THEN i.scheduled_at ELSE river_job.scheduled_at END,
    state = CASE WHEN river_job.state = 'running' AND {_CANCEL}
                 THEN 'cancelled'::<schema>river_job_state
                 WHEN river_job.state = 'running'
                 THEN i.state::<schema>river_job_state
                 ELSE river_job.state END
FROM i
WHERE river_job.id = i.id
  AND (river_job.state = 'running' OR i.metadata_updates IS NOT NULL)
"""
for _skip in ("", "SKIP LOCKED"):
    _suffix = "_skip_locked" if _skip else ""
    _body = _SET_STATE_BODY.replace("<skip_locked>", _skip)
    QUERIES["job_set_state_if_running_many" + _suffix] = (
        _body + f"RETURNING {job_columns('river_job')}"
    )
    QUERIES["job_set_state_if_running_many_no_return" + _suffix] = _body

# job_set_state_if_running_many for plain completions (dialect.base.is_plain_completion),
# what nearly every outcome is: one bigint array instead of seven parallel ones, no
# CASE per column, and (when events want them) only what a completion changes is
# returned; the completer patches it onto the rows it claimed. The attempt is returned
# so a job another client claimed again after a rescue is noticed and read in full.
# Locked rows are skipped as above, and so is a row no longer at the attempt this client
# claimed (JobStateUpdate.claimed_attempt).
# The guard compares the state as text: a plain `state = 'running'` is an index
# condition the planner may prefer when statistics say few jobs run (the table was
# analyzed before a backlog was claimed), and the generic plan then hashes every running
# job (55 ms instead of 2 ms per 100 completions with 100,000 running here); as text it
# can only filter the primary-key lookups (tests/admin/test_plans.py).
_COMPLETE_BODY = """
WITH i AS (
    SELECT river_job.id
    FROM unnest(:ids::bigint[], :attempts::integer[]) AS u(id, attempt)
    JOIN <schema>river_job ON river_job.id = u.id
    WHERE river_job.state::text = 'running' AND river_job.attempt = u.attempt
    FOR UPDATE OF river_job SKIP LOCKED
)
UPDATE <schema>river_job
SET finalized_at = now(), state = 'completed'
FROM i
WHERE river_job.id = i.id AND river_job.state::text = 'running'
"""
QUERIES["job_complete_many"] = (
    _COMPLETE_BODY + f"RETURNING {job_columns('river_job', only=COMPLETION_COLUMNS)}"
)
QUERIES["job_complete_many_no_return"] = _COMPLETE_BODY

QUERIES["job_get_by_id"] = f"SELECT {job_columns()} FROM <schema>river_job WHERE id = :id::bigint"

QUERIES["job_get_by_id_many"] = (
    f"SELECT {job_columns()} FROM <schema>river_job WHERE id = ANY(:ids::bigint[]) ORDER BY id"
)

QUERIES["job_get_cancel_requested"] = """
SELECT id FROM <schema>river_job
WHERE id = ANY(:ids::bigint[]) AND state = 'running' AND metadata ? 'cancel_attempted_at'
ORDER BY id
"""

# River's QueueCreateOrSetUpdatedAt: an existing queue keeps paused_at and metadata.
QUERIES["queue_create_or_set_updated_at"] = f"""
INSERT INTO <schema>river_queue (created_at, metadata, name, paused_at, updated_at)
VALUES (now(), coalesce(:metadata::jsonb, '{{}}'::jsonb), :name::text, NULL, now())
ON CONFLICT (name) DO UPDATE SET updated_at = EXCLUDED.updated_at
RETURNING {QUEUE_SELECT}
"""

QUERIES["ping"] = "SELECT 1"
QUERIES["current_schema"] = "SELECT coalesce(current_schema(), '')"
QUERIES["pg_notify"] = "SELECT pg_notify(:channel::text, :payload::text)"
QUERIES["listen_channel"] = "SELECT " + CHANNEL.format(topic="") + " || :topic::text"

# What is left for a drain (run_until_idle, --exit-when-idle), per state: jobs due within
# the horizon (a retryable or scheduled one only until a horizon past due, so a drain
# whose jobs no scheduler promotes still ends), all of them, and the first due time.
_UPCOMING_STATES = ("available", "retryable", "scheduled")
_UPCOMING = f"""queue = ANY(:queues::text[])
  AND state IN ({", ".join(f"'{state}'" for state in _UPCOMING_STATES)})"""
_DUE_SOON = """scheduled_at <= now() + make_interval(secs => :horizon::float8)
  AND (state = 'available' OR scheduled_at >= now() - make_interval(secs => :horizon::float8))"""
QUERIES["job_count_upcoming"] = f"""
SELECT state::text,
       count(*) FILTER (WHERE {_DUE_SOON}),
       count(*),
       {clamped("min(scheduled_at)")}
FROM <schema>river_job
WHERE {_UPCOMING}
GROUP BY state
ORDER BY state
"""
# Whether any of them is due: asked first, it stops at the first due job (an idle client
# held back by a flow limit asks every poll, beside a backlog the count would read whole).
# Per queue and state, the first row in the order of River's (state, queue, priority,
# scheduled_at, id) index: that ORDER BY makes a sequential scan cost a whole sort, so
# the planner keeps the index. A plain EXISTS was planned as a sequential scan when the
# statistics predated the backlog's completion (the scan then reads every finished row
# before the first due one: 1.6 ms per call in the flow bench, 0.05 ms by the index).
QUERIES["job_due_exists"] = f"""
SELECT EXISTS (
    SELECT 1
    FROM unnest(:queues::text[]) AS q(queue_name)
    CROSS JOIN unnest('{{{",".join(_UPCOMING_STATES)}}}'::<schema>river_job_state[])
        AS s(upcoming_state)
    CROSS JOIN LATERAL (
        SELECT 1 FROM <schema>river_job
        WHERE state = s.upcoming_state AND queue = q.queue_name AND {_DUE_SOON}
        ORDER BY priority, scheduled_at, id
        LIMIT 1
    ) AS first_due
)
"""


# Where the insert statements' rows say whether a unique job was already there: after the
# job's columns.
_DUPLICATE = len(JOB_COLUMNS)


def _tags_packed(tags: list[str]) -> str:
    # River packs tag lists as comma-joined strings (tags cannot contain commas).
    return ",".join(tags)


# What the insert statements bind for each job (job_insert_many an array of each,
# job_insert_one the values themselves) besides the tags, and where each comes from.
_INSERT_ARRAYS = tuple(
    "args kind max_attempts metadata priority queue scheduled_at state unique_key "
    "unique_states".split()
)
_insert_values = attrgetter(
    *"encoded_args kind max_attempts encoded_metadata priority queue scheduled_at "
    "state.value unique_key unique_states".split()
)


# The columns insert_many_fast copies (JOB_COPY_COLUMNS). Values are what job_insert_many
# binds, but one row per job, in that order.
COPY_COLUMNS = JOB_COPY_COLUMNS


# job_set_state_if_running_many's arrays, one element per update, and where each comes
# from.
_STATE_UPDATE_ARRAYS = tuple(
    "ids attempt errors finalized metadata_updates scheduled_at state claimed_attempt".split()
)
_update_values = attrgetter(
    *"id attempt error finalized metadata_updates scheduled_at state.value claimed_attempt".split()
)


class PostgresDialect(
    PostgresAdmin,
    PostgresLeadership,
    PostgresFlow,
    PostgresWorkflow,
    PostgresFleet,
    PostgresPeriodic,
    Dialect,
    BulkCopy,
):
    """River's Postgres SQL (riverpgxv5) for riverboat."""

    name = "postgres"
    _queries = QUERIES

    def job_insert_many(
        self, jobs: Sequence[InsertParams], notify: Sequence[str], now: datetime | None = None
    ) -> Statement:
        with_ids = jobs[0].id is not None
        if len(jobs) == 1 and not with_ids:
            job = jobs[0]
            params = dict(zip(_INSERT_ARRAYS, _insert_values(job), strict=True))
            params["tags"] = _tags_packed(job.tags)
            params["notify_queue"] = notify[0] if notify else None
            params["now"] = now
            params["schema"] = self.schema
            return Statement(self.q["job_insert_one"], params)
        if with_ids and any(j.id is None for j in jobs):
            raise ValueError("job_insert_many: give every job an id, or none")
        name = "job_insert_many_ids" if with_ids else "job_insert_many"
        extra: dict[str, Any] = {"ids": [j.id for j in jobs]} if with_ids else {}
        if not with_ids and sum(j.unique_key is not None for j in jobs) > 1:
            name = "job_insert_many_unique"  # keys locked in one order (see its SQL)
            extra = {"table": render_schema("<schema>river_job", self.schema)}
        return self.stmt(
            name,
            **extra,
            **unnest_arrays(_INSERT_ARRAYS, map(_insert_values, jobs)),
            tags=[_tags_packed(j.tags) for j in jobs],
            notify_queues=list(notify),
            now=now,
            schema=self.schema,
        )

    def job_copy(self, jobs: Sequence[InsertParams]) -> list[CopyBatch]:
        """``insert_many_fast``'s rows for ``COPY river_job FROM STDIN``, in at most two
        batches: jobs without a ``scheduled_at`` leave the column out, so the server's
        ``now()`` default fills it as the insert statement's ``coalesce`` does (no client
        clock). Unique jobs are not for COPY (it can't skip a duplicate); the caller
        sends them through :meth:`job_insert_many`."""
        now_rows: list[tuple[Any, ...]] = []
        at_rows: list[tuple[Any, ...]] = []
        for j in jobs:
            row = (
                j.encoded_args,
                j.kind,
                j.max_attempts,
                j.encoded_metadata,
                j.priority,
                j.queue,
                j.state.value,
                j.tags,
            )
            if j.scheduled_at is None:
                now_rows.append(row)
            else:
                at_rows.append((*row, j.scheduled_at))
        batches = []
        if now_rows:
            batches.append(CopyBatch(self.schema, "river_job", COPY_COLUMNS, now_rows))
        if at_rows:
            batches.append(
                CopyBatch(self.schema, "river_job", (*COPY_COLUMNS, "scheduled_at"), at_rows)
            )
        return batches

    def job_insert_notify(self, queues: Sequence[str]) -> Statement:
        return self.stmt("job_insert_notify", queues=list(queues), schema=self.schema)

    def decode_insert(self, rows: Sequence[Sequence[Any]]) -> list[InsertResult]:
        decode = self.decode_job
        return [InsertResult(decode(row), bool(row[_DUPLICATE])) for row in rows]

    decode_job = JOB_READER.decode_job

    def time_param(self, value: datetime | None) -> Any:
        return value

    def duration_param(self, seconds: float) -> Any:
        return float(seconds)

    def retention_param(self, seconds: float | None) -> Any:
        return None if seconds is None else float(seconds)

    def text_list_param(self, values: Sequence[str] | None) -> Any:
        return None if values is None else list(values)

    def state_updates_params(self, updates: Sequence[JobStateUpdate]) -> dict[str, Any]:
        return unnest_arrays(_STATE_UPDATE_ARRAYS, map(_update_values, updates))

    def job_complete_many(
        self, job_ids: Sequence[int], attempts: Sequence[int], *, returning: bool
    ) -> Statement:
        name = "job_complete_many" if returning else "job_complete_many_no_return"
        return self.stmt(name, ids=list(job_ids), attempts=list(attempts))

    def job_get_by_id(self, job_id: int) -> Statement:
        return self.stmt("job_get_by_id", id=job_id)

    def job_get_by_id_many(self, job_ids: Sequence[int]) -> Statement:
        return self.stmt("job_get_by_id_many", ids=[int(i) for i in job_ids])

    def job_get_cancel_requested(self, job_ids: Sequence[int]) -> Statement:
        return self.stmt("job_get_cancel_requested", ids=[int(i) for i in job_ids])

    def job_count_upcoming(self, queues: Sequence[str], horizon: float) -> Statement:
        """Rows ``(state, due within horizon, total, first scheduled_at)``."""
        return self.stmt("job_count_upcoming", queues=list(queues), horizon=float(horizon))

    def job_due_exists(self, queues: Sequence[str], horizon: float) -> Statement:
        """One row, ``(whether a job is due within horizon,)``: job_count_upcoming's
        first question alone."""
        return self.stmt("job_due_exists", queues=list(queues), horizon=float(horizon))

    def queue_create_or_set_updated_at(self, name: str) -> Statement:
        return self.stmt("queue_create_or_set_updated_at", name=name, metadata=None)
