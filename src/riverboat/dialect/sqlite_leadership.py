"""SQLite statements for leader election, the leader's maintenance services and the
``river_notification`` outbox, the twins of :mod:`~riverboat.dialect.postgres_leadership`
(same method names, arguments and rows). A mixin of
:class:`~riverboat.dialect.sqlite.SqliteDialect`.

Time arithmetic is SQLite's: ``datetime('now', 'subsec', '+15.000 seconds')`` as River's
SQLite driver writes it, and a term's ``elected_at`` is matched by value
(``unixepoch(..., 'subsec')``), not by text, so a term stays recognisable whichever
millisecond spelling wrote it. SQLite serialises writers, so nothing here needs row locks,
and the election is a single upsert.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from riverboat._sql import Statement
from riverboat.dialect._common import UNIQUE_ROW_NUMBER
from riverboat.dialect._part import DialectPart
from riverboat.dialect._sqlite_common import (
    NOW,
    errors_append,
    format_timestamp,
    job_columns,
    parse_timestamp,
    seconds_modifier,
    state_in_bitmask,
    ts_key,
    ts_or_none,
    valid_json_or,
)
from riverboat.dialect.base import Leader, RescueUpdate

__all__ = ["NOTIFICATION_BATCH", "SqliteLeadership"]

# Outbox rows a listener reads per poll (River reads one per query).
NOTIFICATION_BATCH = 100

_LEADER_COLUMNS = "leader_id, elected_at, expires_at"
# Notifications for jobs promoted with a scheduled_at this close are sent (River's 5 ms).
_NOTIFY_SLACK = timedelta(milliseconds=5)

QUERIES: dict[str, str] = {}

# Take the row when it is free or its term has expired, in one statement: the upsert
# replaces an expired row in place (River's Go elector deletes it and inserts, in one
# transaction; SQLite's single writer makes the two equivalent) and leaves a live one,
# even our own, alone. RETURNING yields the new term, or nothing.
QUERIES["leader_attempt_elect"] = f"""
INSERT INTO <schema>river_leader (leader_id, elected_at, expires_at)
VALUES (:leader_id, {NOW}, datetime('now', 'subsec', :ttl))
ON CONFLICT (name) DO UPDATE
SET leader_id = excluded.leader_id,
    elected_at = excluded.elected_at,
    expires_at = excluded.expires_at
WHERE river_leader.expires_at < excluded.elected_at
RETURNING {_LEADER_COLUMNS}
"""

# Extend the held term only: same leader, same elected_at, and not yet expired.
QUERIES["leader_attempt_reelect"] = f"""
UPDATE <schema>river_leader
SET expires_at = datetime('now', 'subsec', :ttl)
WHERE unixepoch(elected_at, 'subsec') = unixepoch(:elected_at, 'subsec')
  AND expires_at >= {NOW}
  AND leader_id = :leader_id
RETURNING {_LEADER_COLUMNS}
"""

# Resignation: announce it on river_leadership (an outbox row, only if the term is still
# ours) and delete the row, in one transaction. River's SQLite driver only deletes, so
# there followers notice on their next elect poll (~5 s); with the outbox row they try at
# once. The outbox INSERT goes first so its RETURNING is the operation's result (the
# resigned leader_id, as on Postgres).
_TERM = (
    "unixepoch(elected_at, 'subsec') = unixepoch(:elected_at, 'subsec') AND leader_id = :leader_id"
)
QUERIES["leader_resign"] = f"""
INSERT INTO <schema>river_notification (payload, topic)
SELECT json_object('leader_id', leader_id, 'action', 'resigned'), 'river_leadership'
FROM <schema>river_leader
WHERE {_TERM}
RETURNING payload ->> '$.leader_id' AS leader_id
"""
QUERIES["leader_resign_apply"] = f"DELETE FROM <schema>river_leader WHERE {_TERM}"

QUERIES["leader_get_elected"] = f"SELECT {_LEADER_COLUMNS} FROM <schema>river_leader"

# Ask whoever leads to resign and run again (River's request_resign action).
QUERIES["leader_request_resign"] = """
INSERT INTO <schema>river_notification (payload, topic)
VALUES (json_object('action', 'request_resign'), 'river_leadership')
"""

# Timestamps are compared through ts_key (River compares text, right only for its own
# spelling); metadata that is not a JSON object starts over, and errors that are not an
# array become the first element of one (River 0.48), rather than failing the whole
# rescue batch. A finalized_at SQLite can't read is never due for
# deletion (NULL compares as neither).
_METADATA = valid_json_or("river_job.metadata", "jsonb('{}')", "object")
_FINALIZED_AT = ts_key("finalized_at", unreadable_first=False)

# River's JobSchedule. The decision (which due jobs become available, which unique ones
# are discarded because another row holds their key in a state their bitmask covers, or
# an earlier job of the batch has it) is made once per statement from the same rows; the
# three statements below run in one IMMEDIATE transaction, so nothing changes between
# them: the result rows, the river_insert outbox rows, then the update itself. Horizons
# come from the caller's clock, as River's do (a SQL 'now' would differ per statement).
_SCHEDULE_DECISION = f"""
WITH eligible AS (
    SELECT id, queue, priority, scheduled_at, unique_key, unique_states
    FROM <schema>river_job
    WHERE state IN ('retryable', 'scheduled')
      AND priority >= 0
      AND {ts_key("scheduled_at")} <= :horizon
    ORDER BY priority, scheduled_at, id
    LIMIT :max
),
numbered AS (
    SELECT *, {UNIQUE_ROW_NUMBER}
    FROM eligible
),
decided AS MATERIALIZED (
    SELECT n.id, n.queue, n.scheduled_at,
           (n.row_num IS NOT NULL AND (n.row_num > 1 OR EXISTS (
               SELECT 1
               FROM <schema>river_job AS other
               WHERE other.unique_key = n.unique_key
                 AND other.id <> n.id
                 AND other.unique_states IS NOT NULL
                 AND {state_in_bitmask("other.unique_states", "other.state")}
           ))) AS discard
    FROM numbered AS n
)
"""
QUERIES["job_schedule"] = _SCHEDULE_DECISION + "SELECT id, queue, discard FROM decided ORDER BY id"
QUERIES["job_schedule_notify"] = (
    _SCHEDULE_DECISION
    + f"""INSERT INTO <schema>river_notification (payload, topic)
SELECT DISTINCT '{{"queue": ' || json_quote(queue) || '}}', 'river_insert'
FROM decided
WHERE NOT discard AND {ts_key("scheduled_at")} <= :notify_horizon
"""
)
QUERIES["job_schedule_apply"] = (
    _SCHEDULE_DECISION
    + f"""UPDATE <schema>river_job
SET state = CASE WHEN d.discard THEN 'discarded' ELSE 'available' END,
    finalized_at = CASE WHEN d.discard THEN coalesce(:now, {NOW}) ELSE river_job.finalized_at END,
    metadata = CASE WHEN d.discard
                    THEN jsonb_patch({_METADATA},
                                     '{{"unique_key_conflict": "scheduler_discarded"}}')
                    ELSE river_job.metadata END
FROM decided AS d
WHERE river_job.id = d.id
"""
)

QUERIES["job_get_stuck"] = f"""
SELECT {job_columns()}
FROM <schema>river_job
WHERE state = 'running'
  AND id > :after_id
  AND {ts_key("attempted_at")} < :stuck_horizon
ORDER BY id
LIMIT :max
"""

# River's JobRescueMany as one UPDATE over the batch (River's SQLite driver loops, one
# UPDATE per job), re-checking that each job is still the stuck run the rescuer looked
# at. river:rescue_count counts on from a JSON number (rounded, as Postgres's ::int does).
QUERIES["job_rescue_many"] = f"""
UPDATE <schema>river_job
SET errors = {errors_append("river_job.errors", "r.error")},
    finalized_at = r.finalized_at,
    scheduled_at = r.scheduled_at,
    metadata = jsonb_set(
        {_METADATA},
        '$."river:rescue_count"',
        coalesce(
            CASE WHEN json_type({_METADATA}, '$."river:rescue_count"')
                      IN ('integer', 'real')
                 THEN CAST(round({_METADATA} ->> '$."river:rescue_count"') AS integer)
            END,
            0
        ) + 1
    ),
    state = r.state
FROM (
    SELECT u.value ->> '$.id' AS id,
           u.value ->> '$.error' AS error,
           u.value ->> '$.finalized_at' AS finalized_at,
           u.value ->> '$.scheduled_at' AS scheduled_at,
           u.value ->> '$.state' AS state
    FROM json_each(:updates) AS u
) AS r
WHERE river_job.id = r.id
  AND river_job.state = 'running'
  AND {ts_key("river_job.attempted_at")} < :stuck_horizon
RETURNING river_job.id, river_job.state
"""

# The job cleaner: one bounded DELETE per batch. No SKIP LOCKED is needed or possible:
# the statement holds SQLite's write lock, so a JobRetry either committed before it (the
# job is no longer finalized and not selected) or runs after it.
QUERIES["job_delete_before"] = f"""
DELETE FROM <schema>river_job
WHERE id IN (
    SELECT id
    FROM <schema>river_job
    WHERE (
            (state = 'cancelled'
             AND {_FINALIZED_AT} < datetime('now', 'subsec', :cancelled_retention))
         OR (state = 'completed'
             AND {_FINALIZED_AT} < datetime('now', 'subsec', :completed_retention))
         OR (state = 'discarded'
             AND {_FINALIZED_AT} < datetime('now', 'subsec', :discarded_retention))
        )
      AND (:queues_excluded IS NULL
           OR queue NOT IN (SELECT value FROM json_each(:queues_excluded)))
    ORDER BY id
    LIMIT :max
)
"""

QUERIES["queue_delete_expired"] = f"""
DELETE FROM <schema>river_queue
WHERE name IN (
    SELECT name
    FROM <schema>river_queue
    WHERE {ts_key("updated_at", unreadable_first=False)} < datetime('now', 'subsec', :retention)
    ORDER BY name
    LIMIT :max
)
RETURNING name
"""

# -- the outbox -----------------------------------------------------------------------

QUERIES["notification_get_last_id"] = "SELECT coalesce(max(id), 0) FROM <schema>river_notification"

# River's listener reads one row per query; riverboat reads a batch per poll.
QUERIES["notification_get_after"] = """
SELECT id, topic, payload
FROM <schema>river_notification
WHERE id > :after
ORDER BY id
LIMIT :max
"""

# River's NotificationDeleteBefore, bounded per batch like the other cleaners.
QUERIES["notification_delete_before"] = """
DELETE FROM <schema>river_notification
WHERE id IN (
    SELECT id
    FROM <schema>river_notification
    WHERE created_at < datetime('now', 'subsec', :retention)
    ORDER BY id
    LIMIT :max
)
"""


def _ago(seconds: float | None) -> str | None:
    return None if seconds is None else seconds_modifier(-float(seconds))


class SqliteLeadership(DialectPart):
    _queries: ClassVar[dict[str, str]] = QUERIES

    # -- leader election ---------------------------------------------------------------
    def leader_resign(self, *, leader_id: str, elected_at: datetime) -> Statement:
        """Rows: the resigned ``(leader_id,)``, or none when the term was not ours."""
        params = {"leader_id": leader_id, "elected_at": self.time_param(elected_at)}
        delete = self.stmt("leader_resign_apply", **params)
        return Statement(self.q["leader_resign"], params, (delete,))

    def decode_leader(self, row: Sequence[Any]) -> Leader:
        elected_at = parse_timestamp(row[1])
        expires_at = parse_timestamp(row[2])
        assert elected_at is not None and expires_at is not None  # NOT NULL columns
        return Leader(row[0], elected_at, expires_at)

    # -- maintenance -------------------------------------------------------------------
    def job_schedule(
        self, *, max: int, lookahead: float = 5.0, now: datetime | None = None
    ) -> Statement:
        """Rows ``(id, queue, discarded)`` of the jobs promoted or discarded."""
        stubbed = format_timestamp(now) if now is not None else None  # a test clock's
        now = now if now is not None else datetime.now(UTC)
        params = {
            "max": max,
            "horizon": format_timestamp(now + timedelta(seconds=float(lookahead))),
        }
        notify = self.stmt(
            "job_schedule_notify", **params, notify_horizon=format_timestamp(now + _NOTIFY_SLACK)
        )
        apply = self.stmt("job_schedule_apply", **params, now=stubbed)
        return Statement(self.q["job_schedule"], params, (notify, apply))

    def job_get_stuck(self, *, after_id: int, stuck_horizon: datetime, max: int) -> Statement:
        return self.stmt(
            "job_get_stuck",
            after_id=after_id,
            stuck_horizon=format_timestamp(stuck_horizon),
            max=max,
        )

    def job_rescue_many(
        self, updates: Sequence[RescueUpdate], *, stuck_horizon: datetime
    ) -> Statement:
        payload = json.dumps(
            [
                {
                    "id": u.id,
                    "error": u.error,
                    "finalized_at": ts_or_none(u.finalized_at),
                    "scheduled_at": format_timestamp(u.scheduled_at),
                    "state": u.state,
                }
                for u in updates
            ],
            ensure_ascii=False,
        )
        return self.stmt(
            "job_rescue_many", updates=payload, stuck_horizon=format_timestamp(stuck_horizon)
        )

    # -- the outbox (SQLite's LISTEN/NOTIFY) -------------------------------------------
    def notification_get_last_id(self) -> Statement:
        return self.stmt("notification_get_last_id")

    def notification_get_after(self, after: int, max: int = NOTIFICATION_BATCH) -> Statement:
        """Rows ``(id, topic, payload)`` after ``after``, oldest first."""
        return self.stmt("notification_get_after", after=after, max=max)

    def notification_delete_before(self, *, retention: float, max: int) -> Statement:
        """Delete up to ``max`` outbox rows older than ``retention`` seconds."""
        return self.stmt("notification_delete_before", retention=_ago(retention), max=max)
