"""Postgres's claim under flow control (:mod:`riverboat.flow`). A mixin of
:class:`~riverboat.dialect.postgres.PostgresDialect`.

The claim runs inside ``riverboat_flow_claim_jobs_v3`` (riverboat's migration line,
version 5), static SQL that takes the queue's limits as parameters: Postgres plans it once
per connection. The function takes a transaction-level advisory lock per schema and queue,
then counts and claims in one statement with a snapshot taken after the lock, so every
claim of a limited queue sees the claims committed before it. It commits asynchronously
(the lock is not held over the WAL flush): what a server crash can then lose is a claim of
its last moments, whose jobs are available again after recovery and run again, as a job
running at a crash does; the completion that follows a claim is a synchronous commit and
flushes the claim first. One round trip from the client, so the lock is held only while
the server works. A queue without flow control never takes the lock nor calls the
function: its claim is River's.

A queue limited as a whole (no partitions, rate limit or sequences) counts each client by
its record in ``riverboat_flow_client`` (unlogged): the jobs in flight it named in its last
claim, plus what that claim took, trusted while the client is alive in riverboat's
registry. Rows are counted for the others (Go River, older releases, a client without
a registry row, one the registry holds dead: it died or froze). The
other queues take version 4's claim (``riverboat_flow_claim_jobs_v2``), which counts
running rows: the jobs this client finished whose outcomes the completer still holds are
recorded in ``riverboat_flow_ended`` (unlogged) and left out of every claim's count.
Either way the completer writes a finished job no longer counted with
``flow_complete_many``, durably, finalized_at no later than the job's end.

Candidates are scanned in River's order, partitions already at their limit are skipped in
the scan itself (one busy customer does not hide the others), and each remaining
candidate is taken only while its partition has room: ``rank in partition + running (or
started in the window) <= limit``. Sequence jobs are taken only at the head of their
sequence.
"""

from __future__ import annotations

from typing import Any, ClassVar

from riverboat._sql import Statement
from riverboat.dialect._flow_common import FlowClaim
from riverboat.dialect._part import DialectPart
from riverboat.dialect._pg_common import job_columns
from riverboat.dialect._rows import COMPLETION_COLUMNS
from riverboat.flow import SEQUENCE_METADATA_KEY, SEQUENCE_USE_ROWS

__all__ = ["SCAN_MAX", "PostgresFlow"]

SCAN_MAX = 1000  # candidates looked at per claim of a partitioned or sequenced queue
RECORD_FORGOTTEN_AFTER = 3600  # seconds after which a client's record is deleted

QUERIES: dict[str, str] = {}
# riverboat_flow_claim_jobs_v3's arguments after the lock key, in order, each as the
# statement binds it.
_CLAIM_ARGUMENTS: dict[str, str] = {
    "queue": ":queue::text",
    "max_to_lock": ":max_to_lock::integer",
    "scan_max": ":scan_max::integer",
    "attempted_by": ":attempted_by::text",
    "max_attempted_by": ":max_attempted_by::integer",
    "now": ":now::timestamptz",
    "global_limit": ":global_limit::integer",
    "local_limit": ":local_limit::integer",
    "con_by_kind": ":con_by_kind::boolean",
    "con_by_args": ":con_by_args::text[]",
    "rate_limit": ":rate_limit::integer",
    "rate_period": ":rate_period::double precision",
    "rate_by_kind": ":rate_by_kind::boolean",
    "rate_by_args": ":rate_by_args::text[]",
    "sequences": ":sequences::boolean",
    "sequence_continue": ":sequence_continue::boolean",
    "finished_ids": ":finished_ids::bigint[]",
    "finished_attempts": ":finished_attempts::integer[]",
    "in_flight": ":in_flight::integer",
}
# A queue limited as a whole, counted by what is in flight (the claim of every process
# of a limited queue that doesn't bind, each time it claims): what it never sets is
# written into the statement, so each claim sends 9 values instead of 20.
_WHOLE_QUEUE_CONSTANTS: dict[str, str] = {
    "scan_max": ":max_to_lock::integer",
    "con_by_kind": "false",
    "con_by_args": "'{}'::text[]",
    "rate_limit": "NULL::integer",
    "rate_period": "NULL::double precision",
    "rate_by_kind": "false",
    "rate_by_args": "'{}'::text[]",
    "sequences": "false",
    "sequence_continue": "false",
    "finished_ids": "'{}'::bigint[]",
    "finished_attempts": "'{}'::integer[]",
}


def _flow_claim_query(constants: dict[str, str]) -> str:
    arguments = ",\n    ".join(
        constants.get(name, bound) for name, bound in _CLAIM_ARGUMENTS.items()
    )
    return f"""
SELECT {job_columns("t")}
FROM <schema>riverboat_flow_claim_jobs_v3(
    hashtext(concat(coalesce(:schema::text, current_schema()), '.riverboat_flow.',
                    :queue::text))::bigint,
    {arguments}
) AS t(id bigint, args jsonb, attempt smallint, attempted_at timestamptz,
       attempted_by text[], created_at timestamptz, errors jsonb[], finalized_at timestamptz,
       kind text, max_attempts smallint, metadata jsonb, priority smallint, queue text,
       state text, scheduled_at timestamptz, tags text[], unique_key bytea,
       unique_states integer)
"""


QUERIES["job_get_available_flow"] = _flow_claim_query({})
QUERIES["job_get_available_flow_whole_queue"] = _flow_claim_query(_WHOLE_QUEUE_CONSTANTS)

# job_complete_many for jobs a claim left out of its count (their outcomes were still
# in this client's completer, and the claim recorded them in riverboat_flow_ended):
# finalized_at no later than the job's end, which came before that claim's attempted_at,
# so the table's record never shows more running than a limit allows; their records in
# riverboat_flow_ended go. Locked rows are skipped, as job_complete_many does.
_FLOW_COMPLETE_BODY = """
WITH unrecorded AS (
    DELETE FROM <schema>riverboat_flow_ended WHERE job_id = ANY(:ids::bigint[])
),
i AS (
    SELECT river_job.id, to_timestamp(u.ended) AS ended
    FROM unnest(:ids::bigint[], :attempts::integer[], :ended::double precision[])
        AS u(id, attempt, ended)
    JOIN <schema>river_job ON river_job.id = u.id
    WHERE river_job.state::text = 'running' AND river_job.attempt = u.attempt
    FOR UPDATE OF river_job SKIP LOCKED
)
UPDATE <schema>river_job
SET finalized_at = greatest(river_job.attempted_at, least(now(), i.ended)), state = 'completed'
FROM i
WHERE river_job.id = i.id AND river_job.state::text = 'running'
"""
QUERIES["flow_complete_many"] = (
    _FLOW_COMPLETE_BODY + f"RETURNING {job_columns('river_job', only=COMPLETION_COLUMNS)}"
)
QUERIES["flow_complete_many_no_return"] = _FLOW_COMPLETE_BODY

QUERIES["flow_forget_record"] = """
DELETE FROM <schema>riverboat_flow_client
WHERE queue = :queue::text AND client_id = :client_id::text
"""

# FlowStatements.flow_ended_prune: a bounded batch, rows another session holds skipped
# (a claim recording them, a completer deleting them), so it never waits on either.
FLOW_ENDED_PRUNE_MAX = 1000
QUERIES["flow_ended_prune"] = f"""
WITH old_records AS (
    -- Records of clients gone for an hour (no claim trusts a record once its client
    -- has left the registry; these only take room in the table).
    DELETE FROM <schema>riverboat_flow_client
    WHERE updated_at < now() - make_interval(secs => {RECORD_FORGOTTEN_AFTER})
)
DELETE FROM <schema>riverboat_flow_ended e
WHERE (e.job_id, e.attempt) IN (
    SELECT s.job_id, s.attempt FROM <schema>riverboat_flow_ended s
    WHERE NOT EXISTS (
        SELECT 1 FROM <schema>river_job r
        WHERE r.id = s.job_id AND r.state::text = 'running' AND r.attempt = s.attempt)
    LIMIT {FLOW_ENDED_PRUNE_MAX}
    FOR UPDATE OF s SKIP LOCKED)
"""

# What a queue's limits are using, per partition (riverboat.flow.limit_uses): running
# jobs, starts in the rate window (when one is given) and available jobs already due.
_WINDOW = "now() - make_interval(secs => :rate_period::double precision)"
# The use statements' partition (the kind or NULL, the by_args values as JSON text) and
# what an available job already due is.
_PARTITION = """CASE WHEN :by_kind::boolean THEN kind END AS part_kind,
       (CASE WHEN cardinality(:by_args::text[]) = 0 THEN '[]'::jsonb
             ELSE <schema>riverboat_flow_partition(kind, args, false, :by_args::text[])
        END)::text AS part_args"""
_DUE = "state = 'available' AND scheduled_at <= now()"
QUERIES["flow_use"] = f"""
SELECT {_PARTITION},
       count(*) FILTER (WHERE state = 'running') AS running,
       count(*) FILTER (WHERE attempted_at > {_WINDOW}
                          AND (state IN ('running', 'retryable') OR finalized_at > {_WINDOW}))
           AS started,
       count(*) FILTER (WHERE {_DUE}) AS due
FROM <schema>river_job
WHERE queue = :queue::text
  AND (state IN ('running', 'available')
       OR (:rate_period::double precision IS NOT NULL AND attempted_at > {_WINDOW}
           AND (state = 'retryable'
                OR (state IN ('completed', 'cancelled', 'discarded')
                    AND finalized_at > {_WINDOW}))))
GROUP BY 1, 2
"""

QUERIES["flow_local_use"] = f"""
SELECT attempted_by[array_length(attempted_by, 1)] AS worker,
       {_PARTITION},
       count(*) AS running
FROM <schema>river_job
WHERE queue = :queue::text AND state = 'running'
GROUP BY 1, 2, 3
"""
# Through River's GIN index on metadata, as the claim finds a sequence's jobs.
QUERIES["flow_sequence_use"] = f"""
SELECT metadata -> '{SEQUENCE_METADATA_KEY}' ->> 'key' AS seq,
       count(*) FILTER (WHERE state = 'running') AS running,
       count(*) FILTER (WHERE {_DUE}) AS due,
       min(id) FILTER (WHERE state NOT IN ('completed', 'cancelled')
                         AND NOT (state = 'discarded' AND :sequence_continue::boolean)) AS head,
       min(id) FILTER (WHERE {_DUE}) AS first_due
FROM <schema>river_job
WHERE queue = :queue::text
  AND metadata @> '{{"{SEQUENCE_METADATA_KEY}": {{}}}}'::jsonb
  AND state IN ('available', 'discarded', 'pending', 'retryable', 'running', 'scheduled')
GROUP BY 1
HAVING count(*) FILTER (WHERE state = 'running' OR ({_DUE})) > 0
ORDER BY due DESC, running DESC, seq
LIMIT {SEQUENCE_USE_ROWS}
"""


# The claim's limits when the queue's FlowControl.params() doesn't set them.
_UNSET_LIMITS: dict[str, Any] = dict.fromkeys(
    ("global_limit", "local_limit", "rate_limit", "rate_period"), None
) | {"sequence_continue": False}


class PostgresFlow(DialectPart):
    """Postgres's flow-controlled claim; see the module docstring."""

    _queries: ClassVar[dict[str, str]] = QUERIES
    flow_claim_excludes_finished: ClassVar[bool] = True
    flow_claim_counts_in_flight: ClassVar[bool] = True
    flow_numbers_by_value: ClassVar[bool] = True

    def flow_forget_record(self, queue: str, client_id: str) -> Statement | None:
        return self.stmt("flow_forget_record", queue=queue, client_id=client_id)

    def _flow_claim(self, claim: FlowClaim) -> Statement:
        flow, params, finished = claim.flow, claim.params, claim.finished
        if claim.in_flight is not None and flow.whole_queue_concurrency and not finished:
            return self.stmt(
                "job_get_available_flow_whole_queue",
                schema=self.schema,
                queue=params["queue"],
                max_to_lock=params["max_to_lock"],
                attempted_by=params["attempted_by"],
                max_attempted_by=params["max_attempted_by"],
                now=params["now"],
                global_limit=params.get("global_limit"),
                local_limit=params.get("local_limit"),
                in_flight=claim.in_flight,
            )
        con, rate = flow.concurrency, flow.rate
        return self.stmt(
            "job_get_available_flow",
            schema=self.schema,
            # Without partitions or sequences every candidate has the same room: the
            # first max_to_lock are the ones to take.
            scan_max=SCAN_MAX if flow.scans_ahead else params["max_to_lock"],
            con_by_kind=con is not None and con.by_kind,
            con_by_args=self.text_list_param(list(con.by_args) if con else []),
            rate_by_kind=rate is not None and rate.by_kind,
            rate_by_args=self.text_list_param(list(rate.by_args) if rate else []),
            sequences=flow.sequences,
            finished_ids=[job_id for job_id, _ in finished],
            finished_attempts=[attempt for _, attempt in finished],
            in_flight=claim.in_flight,
            **{**_UNSET_LIMITS, **params},
        )

    def flow_ended_prune(self) -> Statement:
        return self.stmt("flow_ended_prune")
