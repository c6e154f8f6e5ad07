"""SQLite: River's riversqlite statements, rewritten for riverboat.

Values follow River's SQLite encodings: JSON columns are JSONB blobs (written with
``jsonb()``, read back as text with ``json()``), timestamps are UTC text
``YYYY-MM-DD HH:MM:SS.sss``, ``unique_key`` a raw blob and ``unique_states`` an integer.
SQLite binds no arrays, so a batch travels as one JSON array parameter expanded with
``json_each``. Rows come back in :data:`~riverboat.dialect._rows.JOB_COLUMNS` order.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from riverboat._insert import InsertParams
from riverboat._job import InsertResult
from riverboat._sql import Statement
from riverboat.dialect._rows import JOB_COLUMNS, JOB_INDEX, insert_into_jobs
from riverboat.dialect._sqlite_common import (
    JOB_READER,
    QUEUE_SELECT,
    errors_append,
    format_timestamp,
    metadata_merge,
    parse_timestamp,
    seconds_modifier,
    ts_key,
    valid_json_or,
)
from riverboat.dialect._sqlite_common import NOW as _NOW
from riverboat.dialect._sqlite_common import job_columns as _cols
from riverboat.dialect._sqlite_common import ts_or_none as _ts_or_none
from riverboat.dialect.base import Dialect, JobStateUpdate, NotificationOutbox
from riverboat.dialect.sqlite_admin import SqliteAdmin
from riverboat.dialect.sqlite_fleet import SqliteFleet
from riverboat.dialect.sqlite_flow import SqliteFlow
from riverboat.dialect.sqlite_leadership import SqliteLeadership
from riverboat.dialect.sqlite_periodic import SqlitePeriodic
from riverboat.dialect.sqlite_workflow import SqliteWorkflow

__all__ = [
    "SqliteDialect",
    "format_timestamp",
    "parse_timestamp",
]

MAX_ATTEMPTED_BY = 100
NONCE_KEY = "river:unique_nonce"


# Must be the same expression as river_job_unique_idx's WHERE clause: SQLite only accepts
# an upsert target on a partial index when it can prove the two predicates match.
_UNIQUE_CONFLICT = """ON CONFLICT (unique_key)
    WHERE unique_key IS NOT NULL
      AND unique_states IS NOT NULL
      AND CASE state
            WHEN 'available' THEN unique_states & (1 << 0)
            WHEN 'cancelled' THEN unique_states & (1 << 1)
            WHEN 'completed' THEN unique_states & (1 << 2)
            WHEN 'discarded' THEN unique_states & (1 << 3)
            WHEN 'pending' THEN unique_states & (1 << 4)
            WHEN 'retryable' THEN unique_states & (1 << 5)
            WHEN 'running' THEN unique_states & (1 << 6)
            WHEN 'scheduled' THEN unique_states & (1 << 7)
            ELSE 0
          END >= 1"""

QUERIES: dict[str, str] = {}

# One statement for the whole batch. A conflicting unique job makes the no-op DO UPDATE
# return the existing row. SQLite has no xmax, so each unique job carries a nonce of
# "<batch nonce>-<position>" in its metadata: a returned row whose nonce is not the one
# its position was sent with is an existing row (River's trick, made per position so
# that two equal jobs in one batch are told apart too). The WHERE true keeps SQLite's
# parser from reading ON CONFLICT as a join constraint.
QUERIES["job_insert_many"] = f"""
{insert_into_jobs()}
SELECT
    jsonb(j.value -> '$.args'),
    coalesce(:now, {_NOW}),
    j.value ->> '$.kind',
    j.value ->> '$.max_attempts',
    CASE WHEN (j.value ->> '$.unique_key') IS NULL
         THEN jsonb(j.value -> '$.metadata')
         ELSE jsonb_set(j.value -> '$.metadata', '$."{NONCE_KEY}"', :nonce || '-' || j.key)
    END,
    j.value ->> '$.priority',
    j.value ->> '$.queue',
    coalesce(j.value ->> '$.scheduled_at', {_NOW}),
    j.value ->> '$.state',
    jsonb(j.value -> '$.tags'),
    unhex(j.value ->> '$.unique_key'),
    nullif(j.value ->> '$.unique_states', 0)
FROM json_each(:jobs) AS j
WHERE true
{_UNIQUE_CONFLICT}
DO UPDATE SET kind = river_job.kind
RETURNING {_cols()}, metadata ->> '$."{NONCE_KEY}"' AS unique_nonce, :nonce AS batch_nonce
"""

# SQLite allows one table per DML statement, so the insert notification is a second
# statement run in the insert's transaction (``Statement.then``).
QUERIES["notify_insert"] = """
INSERT INTO <schema>river_notification (payload, topic)
SELECT '{"queue": ' || json_quote(q.value) || '}', 'river_insert'
FROM json_each(:queues) AS q
"""

QUERIES["notification_insert_many"] = """
INSERT INTO <schema>river_notification (payload, topic)
SELECT n.value ->> '$.payload', n.value ->> '$.topic'
FROM json_each(:notifications) AS n
"""

# attempted_by that is missing, or not a JSON array (another client's garbage), starts
# over with this client: json_array_length() would fail the whole claim on it.
_ATTEMPTED_BY_OK = (
    "json_valid(river_job.attempted_by, 10) AND json_type(river_job.attempted_by) = 'array'"
)

# River's JobGetAvailable for SQLite. No SKIP LOCKED is needed: a write statement holds
# SQLite's single write lock from start to end, so two claimers serialise. attempted_by
# keeps its last MAX_ATTEMPTED_BY - 1 entries and appends the client ID. scheduled_at is
# compared through ts_key: River's text comparison is wrong for the other forms Go's
# drivers write (an offset, a T), and a value SQLite can't read at all counts as due, so
# the job is claimed and failed by id (the producer) rather than never seen again.
QUERIES["job_get_available"] = f"""
UPDATE <schema>river_job
SET attempt = river_job.attempt + 1,
    attempted_at = coalesce(:now, {_NOW}),
    attempted_by = CASE WHEN {_ATTEMPTED_BY_OK} THEN jsonb_insert(
        CASE WHEN json_array_length(river_job.attempted_by) >= :max_attempted_by
             THEN (SELECT jsonb_group_array(e.value ORDER BY e.key)
                   FROM json_each(river_job.attempted_by) AS e
                   WHERE e.key > json_array_length(river_job.attempted_by) - :max_attempted_by)
             ELSE river_job.attempted_by
        END,
        '$[#]', :attempted_by) ELSE jsonb_array(:attempted_by) END,
    state = 'running'
WHERE id IN (
    SELECT id
    FROM <schema>river_job
    WHERE state = 'available'
      AND queue = :queue
      AND priority >= 0
      AND {ts_key("scheduled_at")} <= coalesce(:now, {_NOW})
    ORDER BY priority ASC, scheduled_at ASC, id ASC
    LIMIT :max_to_lock
)
RETURNING {_cols()}
"""

# River 0.48's FetchOnlyKnownKinds: the same claim, of the client's kinds only.
QUERIES["job_get_available_kinds"] = QUERIES["job_get_available"].replace(
    "      AND queue = :queue\n",
    "      AND queue = :queue\n      AND kind IN (SELECT value FROM json_each(:kinds))\n",
)
assert QUERIES["job_get_available_kinds"] != QUERIES["job_get_available"]

# River's JobSetStateIfRunning, for a whole batch in one UPDATE ... FROM. Every SET
# expression sees the row as it was before the statement, so `river_job.state = 'running'`
# is the guard throughout: a job that is no longer running (rescued, or deleted and
# re-inserted) only gets its metadata patched, and one no longer at the attempt that
# produced the outcome (claimed_attempt) gets nothing. A retry, a snooze or a hand-back
# (available again) of a job carrying cancel_attempted_at becomes a cancellation. Metadata
# merges top-level keys, keeping nulls, as River's SQLite driver does since 0.50. metadata
# that is not a JSON object (written by another client) starts over empty and errors that
# are not an array become the first element of one, rather than failing every outcome in
# the batch.
_METADATA = valid_json_or("river_job.metadata", "jsonb('{}')", "object")
_CANCEL = (
    "(u.state IN ('available', 'retryable', 'scheduled')"
    f" AND json_type({_METADATA}, '$.cancel_attempted_at') IS NOT NULL)"
)
_SET_STATE_BODY = f"""
UPDATE <schema>river_job
SET attempt = CASE WHEN river_job.state = 'running' AND NOT {_CANCEL}
                        AND u.attempt IS NOT NULL
                   THEN u.attempt ELSE river_job.attempt END,
    errors = CASE WHEN river_job.state = 'running' AND u.error IS NOT NULL
                  THEN {errors_append("river_job.errors", "u.error")}
                  ELSE river_job.errors END,
    finalized_at = CASE WHEN river_job.state = 'running' AND ({_CANCEL} OR u.finalized)
                        THEN {_NOW} ELSE river_job.finalized_at END,
    metadata = CASE WHEN u.metadata_updates IS NOT NULL
                    THEN {metadata_merge(_METADATA, "u.metadata_updates")}
                    ELSE river_job.metadata END,
    scheduled_at = CASE WHEN river_job.state = 'running' AND NOT {_CANCEL}
                             AND u.scheduled_at IS NOT NULL
                        THEN u.scheduled_at ELSE river_job.scheduled_at END,
    state = CASE WHEN river_job.state = 'running' AND {_CANCEL} THEN 'cancelled'
                 WHEN river_job.state = 'running' THEN u.state
                 ELSE river_job.state END
FROM (
    SELECT j.value ->> '$.id' AS id,
           j.value ->> '$.state' AS state,
           j.value ->> '$.attempt' AS attempt,
           j.value -> '$.error' AS error,
           coalesce(j.value ->> '$.finalized', 0) AS finalized,
           j.value -> '$.metadata_updates' AS metadata_updates,
           j.value ->> '$.scheduled_at' AS scheduled_at,
           j.value ->> '$.claimed_attempt' AS claimed_attempt
    FROM json_each(:updates) AS j
) AS u
WHERE river_job.id = u.id
  AND (river_job.state = 'running' OR u.metadata_updates IS NOT NULL)
  AND (u.claimed_attempt IS NULL OR river_job.attempt = u.claimed_attempt)
"""
QUERIES["job_set_state_if_running_many"] = _SET_STATE_BODY + f"RETURNING {_cols()}"
QUERIES["job_set_state_if_running_many_no_return"] = _SET_STATE_BODY

QUERIES["job_get_by_id"] = f"SELECT {_cols()} FROM <schema>river_job WHERE id = :id"

# Metadata another client left malformed must not fail the lookup for the others.
QUERIES["job_get_cancel_requested"] = """
SELECT id FROM <schema>river_job
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'running'
  AND json_valid(metadata, 10) AND json_type(metadata, '$.cancel_attempted_at') IS NOT NULL
ORDER BY id
"""

QUERIES["job_get_by_id_many"] = f"""
SELECT {_cols()} FROM <schema>river_job
WHERE id IN (SELECT value FROM json_each(:ids))
ORDER BY id
"""

# River's QueueCreateOrSetUpdatedAt: an existing queue keeps paused_at and metadata.
QUERIES["queue_create_or_set_updated_at"] = f"""
INSERT INTO <schema>river_queue (created_at, metadata, name, paused_at, updated_at)
VALUES ({_NOW}, jsonb(coalesce(:metadata, '{{}}')), :name, NULL, {_NOW})
ON CONFLICT (name) DO UPDATE SET updated_at = excluded.updated_at
RETURNING {QUEUE_SELECT}
"""

QUERIES["ping"] = "SELECT 1"

# What is left for a drain, as the Postgres dialect's job_count_upcoming. Times compare
# normalised (rows written by Go may drop trailing zeros of the milliseconds).
_SCHEDULED = "strftime('%Y-%m-%d %H:%M:%f', scheduled_at)"
_UPCOMING = """queue IN (SELECT value FROM json_each(:queues))
  AND state IN ('available', 'retryable', 'scheduled')"""
_DUE_SOON = f"""{_SCHEDULED} <= datetime('now', 'subsec', :ahead)
  AND (state = 'available' OR {_SCHEDULED} >= datetime('now', 'subsec', :behind))"""
QUERIES["job_count_upcoming"] = f"""
SELECT state,
       sum(CASE WHEN {_DUE_SOON} THEN 1 ELSE 0 END),
       count(*),
       min({_SCHEDULED})
FROM <schema>river_job
WHERE {_UPCOMING}
GROUP BY state
ORDER BY state
"""
QUERIES["job_due_exists"] = f"""
SELECT EXISTS (SELECT 1 FROM <schema>river_job WHERE {_UPCOMING} AND {_DUE_SOON})
"""


# Where job_insert_many's rows tell a duplicate: the unique key, then after the job's
# columns the nonce the returned row carries and the one the batch was sent with.
_UNIQUE_KEY = JOB_INDEX["unique_key"]
_UNIQUE_NONCE = len(JOB_COLUMNS)
_BATCH_NONCE = _UNIQUE_NONCE + 1


def _encode_insert_job(job: InsertParams) -> str:
    # Built by hand so the already-encoded args and metadata are embedded as they are,
    # without a decode and re-encode per job.
    key = job.unique_key.hex() if job.unique_key is not None else None
    scheduled = _ts_or_none(job.scheduled_at)
    return (
        f'{{"args":{job.encoded_args},"kind":{json.dumps(job.kind)},'
        f'"max_attempts":{job.max_attempts},"metadata":{job.encoded_metadata},'
        f'"priority":{job.priority},"queue":{json.dumps(job.queue)},'
        f'"scheduled_at":{json.dumps(scheduled)},"state":"{job.state.value}",'
        f'"tags":{json.dumps(job.tags)},"unique_key":{json.dumps(key)},'
        f'"unique_states":{json.dumps(job.unique_states)}}}'
    )


def _encode_update(update: JobStateUpdate) -> str:
    parts = [f'"id":{int(update.id)}', f'"state":"{update.state.value}"']
    if update.attempt is not None:
        parts.append(f'"attempt":{int(update.attempt)}')
    if update.error is not None:
        parts.append(f'"error":{update.error}')
    if update.finalized:
        parts.append('"finalized":1')
    if update.metadata_updates is not None:
        parts.append(f'"metadata_updates":{update.metadata_updates}')
    if update.scheduled_at is not None:
        parts.append(f'"scheduled_at":"{format_timestamp(update.scheduled_at)}"')
    if update.claimed_attempt is not None:
        parts.append(f'"claimed_attempt":{int(update.claimed_attempt)}')
    return "{" + ",".join(parts) + "}"


class SqliteDialect(
    SqliteAdmin,
    SqliteLeadership,
    SqliteFlow,
    SqliteWorkflow,
    SqliteFleet,
    SqlitePeriodic,
    Dialect,
    NotificationOutbox,
):
    """River's SQLite SQL (riversqlite) for riverboat.

    ``schema`` names an attached database; ``None`` means the connection's main one.
    """

    name = "sqlite"
    row_locks = False
    _queries = QUERIES

    def job_insert_many(
        self, jobs: Sequence[InsertParams], notify: Sequence[str], now: datetime | None = None
    ) -> Statement:
        """Insert a batch; with queues to ``notify`` the outbox rows ride in the same
        transaction, as a :class:`~riverboat._sql.Statement` with ``then``."""
        params = {
            "jobs": "[" + ",".join(_encode_insert_job(j) for j in jobs) + "]",
            "nonce": secrets.token_hex(8),
            "now": _ts_or_none(now),
        }
        if not notify:
            return self.stmt("job_insert_many", **params)
        outbox = self.stmt("notify_insert", queues=json.dumps(list(notify)))
        return Statement(self.q["job_insert_many"], params, (outbox,))

    def decode_insert(self, rows: Sequence[Sequence[Any]]) -> list[InsertResult]:
        """Rows of :meth:`job_insert_many`, in input order, with duplicates flagged."""
        decode = self.decode_job
        out = []
        for position, row in enumerate(rows):
            nonce = row[_UNIQUE_NONCE]
            duplicate = row[_UNIQUE_KEY] is not None and nonce != f"{row[_BATCH_NONCE]}-{position}"
            out.append(InsertResult(decode(row), duplicate))
        return out

    decode_job = JOB_READER.decode_job

    def time_param(self, value: datetime | None) -> Any:
        return _ts_or_none(value)

    def duration_param(self, seconds: float) -> Any:
        # A datetime() modifier ("+15.0 seconds") added to a timestamp in SQL.
        return seconds_modifier(seconds)

    def retention_param(self, seconds: float | None) -> Any:
        # A datetime() modifier ("-86400.0 seconds"): the horizon is computed in SQL.
        return None if seconds is None else seconds_modifier(-float(seconds))

    def text_list_param(self, values: Sequence[str] | None) -> Any:
        # One JSON array parameter: SQLite binds no arrays.
        return None if values is None else json.dumps(list(values))

    def state_updates_params(self, updates: Sequence[JobStateUpdate]) -> dict[str, Any]:
        # UPDATE ... FROM uses one arbitrary source row per target row, so a repeated
        # id keeps only its last update (the completer's own rule).
        last: dict[int, JobStateUpdate] = {}
        for update in updates:
            last[update.id] = update
        return {"updates": "[" + ",".join(_encode_update(u) for u in last.values()) + "]"}

    def job_get_by_id(self, job_id: int) -> Statement:
        return self.stmt("job_get_by_id", id=job_id)

    def job_get_by_id_many(self, job_ids: Sequence[int]) -> Statement:
        return self.stmt("job_get_by_id_many", ids=json.dumps([int(i) for i in job_ids]))

    def job_get_cancel_requested(self, job_ids: Sequence[int]) -> Statement:
        return self.stmt("job_get_cancel_requested", ids=json.dumps([int(i) for i in job_ids]))

    def job_count_upcoming(self, queues: Sequence[str], horizon: float) -> Statement:
        """Rows ``(state, due within horizon, total, first scheduled_at)``."""
        return self._upcoming("job_count_upcoming", queues, horizon)

    def job_due_exists(self, queues: Sequence[str], horizon: float) -> Statement:
        """One row, ``(whether a job is due within horizon,)``."""
        return self._upcoming("job_due_exists", queues, horizon)

    def _upcoming(self, name: str, queues: Sequence[str], horizon: float) -> Statement:
        return self.stmt(
            name,
            queues=json.dumps(list(queues)),
            ahead=seconds_modifier(horizon),
            behind=seconds_modifier(-horizon),
        )

    def queue_create_or_set_updated_at(self, name: str) -> Statement:
        return self.stmt("queue_create_or_set_updated_at", name=name, metadata=None)

    def notification_insert_many(self, notifications: Sequence[tuple[str, str]]) -> Statement:
        """Outbox rows ``(topic, payload)``: SQLite's stand-in for NOTIFY."""
        payload = json.dumps([{"topic": t, "payload": p} for t, p in notifications])
        return self.stmt("notification_insert_many", notifications=payload)

    def ping(self) -> Statement:
        return self.stmt("ping")
