"""Postgres statements for leader election and the leader's maintenance services.
A mixin of :class:`~riverboat.dialect.postgres.PostgresDialect`.

Every operation is one statement, autocommitted: election, re-election and resignation
each touch the single ``river_leader`` row once, and the maintenance statements do a
whole batch at a time. They share River's table and its rules, so a riverboat client and
a Go River client on the same schema take part in one election.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any, ClassVar

from riverboat._sql import Statement
from riverboat.dialect._common import UNIQUE_ROW_NUMBER
from riverboat.dialect._part import DialectPart
from riverboat.dialect._pg_common import CHANNEL, job_columns, unnest_arrays
from riverboat.dialect.base import Leader, RescueUpdate

__all__ = ["Leader", "PostgresLeadership", "RescueUpdate"]

_LEADER_COLUMNS = "leader_id, elected_at, expires_at"

QUERIES: dict[str, str] = {}

# Delete an expired term and claim the row in one statement. The INSERT reads from the
# DELETE's output (the count forces the DELETE to run to completion first), so it never
# trips over the row it has just removed: the deleted version is dead to the statement's
# own conflict check. Against a concurrent elector (riverboat or Go, whose DELETE and
# INSERT run in one transaction) the row lock and the primary key on ``name`` decide: the
# loser's DELETE finds the row already gone or replaced, and its INSERT hits the winner's
# row and does nothing. RETURNING hands back the term the database issued.
QUERIES["leader_attempt_elect"] = f"""
WITH deleted_expired AS (
    DELETE FROM <schema>river_leader
    WHERE expires_at < now()
    RETURNING name
)
INSERT INTO <schema>river_leader (leader_id, elected_at, expires_at)
SELECT :leader_id::text, now(), now() + make_interval(secs => :ttl::double precision)
FROM (SELECT count(*) FROM deleted_expired) AS d
ON CONFLICT (name) DO NOTHING
RETURNING {_LEADER_COLUMNS}
"""

# Extend the held term only: same leader, same elected_at, and not yet expired (an
# expired row may already belong to someone else's election in flight).
QUERIES["leader_attempt_reelect"] = f"""
UPDATE <schema>river_leader
SET expires_at = now() + make_interval(secs => :ttl::double precision)
WHERE elected_at = :elected_at::timestamptz
  AND expires_at >= now()
  AND leader_id = :leader_id::text
RETURNING {_LEADER_COLUMNS}
"""

# Lock the held row, announce the resignation on river_leadership (delivered at commit,
# so followers see the row gone when they wake), and delete it.
QUERIES["leader_resign"] = f"""
WITH held AS (
    SELECT name, leader_id
    FROM <schema>river_leader
    WHERE elected_at = :elected_at::timestamptz
      AND leader_id = :leader_id::text
    FOR UPDATE
),
notified AS (
    SELECT held.name,
           pg_notify({CHANNEL.format(topic="river_leadership")},
                     json_build_object('leader_id', held.leader_id,
                                       'action', 'resigned')::text) AS sent
    FROM held
)
DELETE FROM <schema>river_leader
USING notified
WHERE river_leader.name = notified.name
RETURNING river_leader.leader_id
"""

QUERIES["leader_get_elected"] = f"SELECT {_LEADER_COLUMNS} FROM <schema>river_leader"

# Ask whoever leads to resign and run again (River's request_resign action).
QUERIES["leader_request_resign"] = f"""
SELECT pg_notify({CHANNEL.format(topic="river_leadership")},
                 json_build_object('action', 'request_resign')::text)
"""

# River's JobSchedule: promote due retryable/scheduled jobs, discarding unique jobs that
# would collide (with another live row holding the key, or with an earlier one in the same
# batch), and in the same statement send river_insert for each queue that got a job it
# can fetch right now.
QUERIES["job_schedule"] = f"""
WITH jobs_to_schedule AS (
    SELECT id, unique_key, unique_states, priority, scheduled_at
    FROM <schema>river_job
    WHERE state IN ('retryable', 'scheduled')
      AND priority >= 0
      AND queue IS NOT NULL
      AND scheduled_at <= coalesce(:now::timestamptz, now())
                          + make_interval(secs => :lookahead::double precision)
    ORDER BY priority, scheduled_at, id
    LIMIT :max::bigint
    FOR UPDATE
),
jobs_with_rownum AS (
    SELECT *, {UNIQUE_ROW_NUMBER}
    FROM jobs_to_schedule
),
unique_conflicts AS (
    SELECT DISTINCT river_job.unique_key
    FROM <schema>river_job
    JOIN jobs_with_rownum
      ON river_job.unique_key = jobs_with_rownum.unique_key
     AND river_job.id != jobs_with_rownum.id
    WHERE river_job.unique_key IS NOT NULL
      AND river_job.unique_states IS NOT NULL
      AND <schema>river_job_state_in_bitmask(river_job.unique_states, river_job.state)
),
job_updates AS (
    SELECT job.id,
           (job.row_num IS NOT NULL AND (uc.unique_key IS NOT NULL OR job.row_num > 1))
               AS discard
    FROM jobs_with_rownum AS job
    LEFT JOIN unique_conflicts AS uc ON job.unique_key = uc.unique_key
),
updated_jobs AS (
    UPDATE <schema>river_job
    SET state = CASE WHEN u.discard THEN 'discarded'::<schema>river_job_state
                     ELSE 'available'::<schema>river_job_state END,
        finalized_at = CASE WHEN u.discard THEN coalesce(:now::timestamptz, now())
                            ELSE river_job.finalized_at END,
        metadata = CASE WHEN u.discard
                        THEN river_job.metadata
                             || '{{"unique_key_conflict": "scheduler_discarded"}}'::jsonb
                        ELSE river_job.metadata END
    FROM job_updates AS u
    WHERE river_job.id = u.id
      -- An index condition on river_job whatever the batch's estimated size (a generic
      -- plan guesses LIMIT $n as a tenth of the table and would hash-join a seq scan).
      AND river_job.id = ANY(ARRAY(SELECT id FROM job_updates))
    RETURNING river_job.id, river_job.queue, river_job.scheduled_at, u.discard
),
notified AS (
    SELECT count(pg_notify({CHANNEL.format(topic="river_insert")},
                           '{{"queue": ' || to_json(q.queue)::text || '}}')) AS n
    FROM (
        SELECT DISTINCT queue FROM updated_jobs
        WHERE NOT discard
          AND scheduled_at <= coalesce(:now::timestamptz, now()) + interval '5 milliseconds'
    ) AS q
)
SELECT updated_jobs.id, updated_jobs.queue, updated_jobs.discard
FROM updated_jobs CROSS JOIN notified
ORDER BY updated_jobs.id
"""

# River's JobGetStuck: running jobs attempted before the horizon, keyset-paginated by id.
QUERIES["job_get_stuck"] = f"""
SELECT {job_columns()}
FROM <schema>river_job
WHERE state = 'running'
  AND id > :after_id::bigint
  AND attempted_at < :stuck_horizon::timestamptz
ORDER BY id
LIMIT :max::bigint
"""

# River's JobRescueMany, plus a re-check that each job is still the stuck run the rescuer
# looked at (still running, attempted before the horizon): a job that finished, or was
# fetched again, between the two statements is left alone.
QUERIES["job_rescue_many"] = """
UPDATE <schema>river_job
SET errors = array_append(river_job.errors, r.error),
    finalized_at = r.finalized_at,
    scheduled_at = r.scheduled_at,
    metadata = river_job.metadata || jsonb_build_object(
        'river:rescue_count',
        coalesce(
            CASE WHEN jsonb_typeof(river_job.metadata -> 'river:rescue_count') = 'number'
                 THEN (river_job.metadata ->> 'river:rescue_count')::numeric::int
            END,
            0
        ) + 1
    ),
    state = r.state::<schema>river_job_state
FROM unnest(
    :ids::bigint[], :errors::jsonb[], :finalized_at::timestamptz[],
    :scheduled_at::timestamptz[], :states::text[]
) AS r(id, error, finalized_at, scheduled_at, state)
WHERE river_job.id = r.id
  AND river_job.state = 'running'
  AND river_job.attempted_at < :stuck_horizon::timestamptz
RETURNING river_job.id, river_job.state::text
"""


# The job cleaner: one bounded statement per batch. The inner SELECT picks finalized jobs
# past their retention and locks them, skipping rows another transaction holds (a JobRetry
# in flight). The state is checked again on the DELETE itself because of how Postgres
# re-checks a concurrently updated row under READ COMMITTED: if a JobRetry commits after
# this statement's snapshot was taken, the DELETE re-evaluates only its own WHERE clause
# against the row's new version, and ``id IN (...)`` alone would still match, deleting a
# job that is now available again. With the state condition in the DELETE's WHERE the new
# version (state available, finalized_at NULL) no longer qualifies and is kept.
#
# One sub-select per state, each in the order of river_job_state_and_finalized_at_index
# (state, finalized_at, partial on finalized_at IS NOT NULL): under the generic plans the
# drivers use, a single sub-select ORing the three states and ordered by id was planned as
# a walk of the primary key filtering every row, 175-260 ms per run with 1,000,000 recent
# finalized rows and nothing to delete (bench: riverboat bench --only scale). Each state
# gives at most :max ids and the concatenation is cut to :max, so a batch stays bounded.
def _finalized_past_retention(state: str) -> str:
    return f"""ARRAY(
        SELECT id FROM <schema>river_job
        WHERE state = '{state}' AND finalized_at IS NOT NULL
          AND :{state}_retention::double precision IS NOT NULL
          AND finalized_at < now() - make_interval(secs => :{state}_retention)
          AND (:queues_excluded::text[] IS NULL OR NOT (queue = ANY(:queues_excluded)))
        ORDER BY finalized_at
        LIMIT :max::bigint
        FOR UPDATE SKIP LOCKED)"""


_PAST_RETENTION = "\n    || ".join(
    _finalized_past_retention(state) for state in ("cancelled", "completed", "discarded")
)
QUERIES["job_delete_before"] = f"""
DELETE FROM <schema>river_job
WHERE id = ANY((
    {_PAST_RETENTION}
)[1:(:max::bigint)])
  AND state IN ('cancelled', 'completed', 'discarded')
  AND finalized_at IS NOT NULL
"""

# River's QueueDeleteExpired: queues no producer has refreshed within the retention.
QUERIES["queue_delete_expired"] = """
DELETE FROM <schema>river_queue
WHERE name IN (
    SELECT name
    FROM <schema>river_queue
    WHERE updated_at < now() - make_interval(secs => :retention::double precision)
    ORDER BY name
    LIMIT :max::bigint
    FOR UPDATE SKIP LOCKED
)
  AND updated_at < now() - make_interval(secs => :retention::double precision)
RETURNING name
"""


# job_rescue_many's arrays, one element per rescued job, and where each comes from.
_RESCUE_ARRAYS = ("ids", "errors", "finalized_at", "scheduled_at", "states")
_rescue_values = attrgetter("id", "error", "finalized_at", "scheduled_at", "state")


class PostgresLeadership(DialectPart):
    _queries: ClassVar[dict[str, str]] = QUERIES

    # -- leader election ---------------------------------------------------------------
    def leader_resign(self, *, leader_id: str, elected_at: datetime) -> Statement:
        return self.stmt(
            "leader_resign", leader_id=leader_id, elected_at=elected_at, schema=self.schema
        )

    def decode_leader(self, row: Sequence[Any]) -> Leader:
        return Leader(row[0], row[1], row[2])

    # -- maintenance -------------------------------------------------------------------
    def job_schedule(
        self, *, max: int, lookahead: float = 5.0, now: datetime | None = None
    ) -> Statement:
        return self.stmt(
            "job_schedule", max=max, lookahead=float(lookahead), now=now, schema=self.schema
        )

    def job_get_stuck(self, *, after_id: int, stuck_horizon: datetime, max: int) -> Statement:
        return self.stmt("job_get_stuck", after_id=after_id, stuck_horizon=stuck_horizon, max=max)

    def job_rescue_many(
        self, updates: Sequence[RescueUpdate], *, stuck_horizon: datetime
    ) -> Statement:
        arrays = unnest_arrays(_RESCUE_ARRAYS, map(_rescue_values, updates))
        return self.stmt("job_rescue_many", **arrays, stuck_horizon=stuck_horizon)
