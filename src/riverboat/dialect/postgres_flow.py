"""Postgres's claim under flow control (:mod:`riverboat.flow`). A mixin of
:class:`~riverboat.dialect.postgres.PostgresDialect`.

The statement is River's claim (``job_get_available``) with a different choice of rows:
candidates are scanned in River's order, partitions that are already at their limit
are skipped in the scan itself (so one busy customer does not hide the others), and each
remaining candidate is taken only while its partition has room: ``rank in partition +
running (or started in the window) <= limit``. Sequence jobs are taken only at the head
of their sequence.

Counting and claiming must not interleave between processes, so the claim runs inside
``riverboat_flow_claim`` (a function of riverboat's migration line), which takes a
transaction-level advisory lock per schema and queue first: every claim of a limited
queue sees the claims committed before it. A queue without flow control never takes the
lock nor runs this statement.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, ClassVar

from riverboat._sql import Query, Statement, render_schema
from riverboat.dialect._part import DialectPart, raw_query
from riverboat.dialect._pg_common import JOB_READER
from riverboat.flow import SEQUENCE_METADATA_KEY, FlowControl

__all__ = ["PostgresFlow"]

QUERIES: dict[str, str] = {}
# riverboat_flow_claim (the riverboat migration line, version 1) takes the queue's
# advisory lock and then runs the claim as a statement of its own, which (being in a
# volatile function) gets a snapshot taken after the lock: it sees every claim committed
# before it. One round trip, so the lock is held only while the server works, never
# while a busy client schedules its next statement (a transaction of BEGIN, lock, claim
# and COMMIT from the client ran 4 worker processes at 0.17x of the same work without
# a limit). The function also commits asynchronously, so the lock is not held over the
# WAL flush either (that serialized the queue's claims on fsync, with no group commit):
# what a server crash can then lose is a claim of its last moments, whose jobs are
# available again after recovery and run again, as a job running at a crash does; the
# completion that follows a claim is a synchronous commit and flushes the claim first.
QUERIES["job_get_available_flow"] = f"""
SELECT * FROM <schema>riverboat_flow_claim(
    hashtext(concat(coalesce(:schema::text, current_schema()), '.riverboat_flow.',
                    :queue::text))::bigint,
    :claim::text,
    :params::text[]
) AS t({JOB_READER.row_type()})
"""
_PLACEHOLDER = re.compile(r"\$(\d+)")

SCAN_MAX = 1000  # candidates looked at per claim, in River's order
_NOW = "coalesce(:now::timestamptz, now())"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _partition(table: str, by_kind: bool, by_args: tuple[str, ...]) -> str:
    parts = ([f"{table}.kind::text"] if by_kind else []) + [
        f"{table}.args->{_literal(key)}" for key in by_args
    ]
    return f"jsonb_build_array({', '.join(parts)})" if parts else "'[]'::jsonb"


def flow_claim_text(flow: FlowControl, claim: str) -> str:
    """The flow-controlled claim, around River's claim statement ``claim`` (whose
    ``locked_jobs`` CTE is replaced)."""
    con, rate = flow.concurrency, flow.rate
    pc_j = _partition("j", con.by_kind, tuple(con.by_args)) if con else "'[]'::jsonb"
    pr_j = _partition("j", rate.by_kind, tuple(rate.by_args)) if rate else "'[]'::jsonb"
    seq_key = f"j.metadata->'{SEQUENCE_METADATA_KEY}'->>'key'"
    ctes = []
    full: list[str] = []  # conditions that skip a whole partition in the scan
    if con is not None:
        ctes.append(f"""running AS (
    SELECT {pc_j} AS part, count(*) AS n,
           count(*) FILTER (WHERE j.attempted_by[array_length(j.attempted_by, 1)]
                            = :attempted_by::text) AS local_n
    FROM <schema>river_job j
    WHERE j.state = 'running' AND j.queue = :queue::text
    GROUP BY 1
)""")
        if con.global_limit is not None:
            full.append(f"{pc_j} IN (SELECT part FROM running WHERE n >= :global_limit::integer)")
        if con.local_limit is not None:
            full.append(
                f"{pc_j} IN (SELECT part FROM running WHERE local_n >= :local_limit::integer)"
            )
    if rate is not None:
        # Starts in the window: running jobs, and finalized ones found through River's
        # (state, finalized_at) index (a job that started in the window and finished
        # has finalized_at in it too), and retryable ones. Bounded by the window.
        window = (
            "coalesce(:now::timestamptz, now())"
            " - make_interval(secs => :rate_period::double precision)"
        )
        ctes.append(f"""started AS (
    SELECT {pr_j} AS part, count(*) AS n
    FROM <schema>river_job j
    WHERE j.queue = :queue::text AND j.attempted_at > {window}
      AND (j.state IN ('running', 'retryable')
           OR (j.state IN ('completed', 'cancelled', 'discarded')
               AND j.finalized_at > {window}))
    GROUP BY 1
)""")
        full.append(f"{pr_j} IN (SELECT part FROM started WHERE n >= :rate_limit::integer)")
    sequence = "true"
    if flow.sequences:
        sequence = f"""({seq_key} IS NULL OR NOT EXISTS (
            SELECT 1 FROM <schema>river_job s
            WHERE s.metadata @> jsonb_build_object('{SEQUENCE_METADATA_KEY}',
                                                   jsonb_build_object('key', {seq_key}))
              AND s.queue = :queue::text AND s.id <> j.id
              AND (s.state = 'running'
                   OR (s.id < j.id AND s.state NOT IN ('completed', 'cancelled')
                       AND NOT (s.state = 'discarded' AND :sequence_continue::boolean)))))"""
    skip = " AND ".join(f"NOT ({cond})" for cond in full) or "true"
    ctes.append(f"""candidates AS (
    SELECT j.id, j.priority, j.scheduled_at, {pc_j} AS pc, {pr_j} AS pr,
           {seq_key if flow.sequences else "NULL::text"} AS seq
    FROM <schema>river_job j
    WHERE j.state = 'available'
      AND j.queue = :queue::text
      AND j.scheduled_at <= coalesce(:now::timestamptz, now())
      AND {skip}
      AND {sequence}
    ORDER BY j.priority ASC, j.scheduled_at ASC, j.id ASC
    LIMIT {SCAN_MAX}
    FOR UPDATE SKIP LOCKED
)""")
    room = []
    if con is not None and con.global_limit is not None:
        room.append("rank_c + coalesce(r.n, 0) <= :global_limit::integer")
    if con is not None and con.local_limit is not None:
        room.append("rank_c + coalesce(r.local_n, 0) <= :local_limit::integer")
    if rate is not None:
        room.append("rank_r + coalesce(st.n, 0) <= :rate_limit::integer")
    joins = ""
    if con is not None:
        joins += " LEFT JOIN running r ON r.part = c.pc"
    if rate is not None:
        joins += " LEFT JOIN started st ON st.part = c.pr"
    ctes.append("""ranked AS (
    SELECT c.*,
           row_number() OVER (PARTITION BY c.pc ORDER BY c.priority, c.scheduled_at, c.id)
               AS rank_c,
           row_number() OVER (PARTITION BY c.pr ORDER BY c.priority, c.scheduled_at, c.id)
               AS rank_r,
           row_number() OVER (PARTITION BY c.seq ORDER BY c.id) AS rank_s
    FROM candidates c
)""")
    ctes.append(f"""locked_jobs AS (
    SELECT c.id
    FROM ranked c{joins}
    WHERE (c.seq IS NULL OR c.rank_s = 1)
      AND {" AND ".join(room) or "true"}
    ORDER BY c.priority ASC, c.scheduled_at ASC, c.id ASC
    LIMIT :max_to_lock::integer
)""")
    update = claim[claim.index("UPDATE <schema>river_job") :]
    # The claim runs inside riverboat_flow_claim after the lock: now() and even
    # statement_timestamp() would be the time the caller's statement began, possibly
    # before the claims and completions it waited for, so attempted_at is the clock.
    text = "WITH " + ",\n".join(ctes) + "\n" + update
    return text.replace(_NOW, "coalesce(:now::timestamptz, clock_timestamp())")


class PostgresFlow(DialectPart):
    """Postgres's flow-controlled claim; see the module docstring."""

    _queries: ClassVar[dict[str, str]] = QUERIES

    def job_get_available_flow(
        self,
        *,
        queue: str,
        max_to_lock: int,
        client_id: str,
        flow: FlowControl,
        max_attempted_by: int,
        now: datetime | None = None,
    ) -> Statement:
        cache: dict[FlowControl, tuple[str, tuple[str, ...]]] = self.__dict__.setdefault(
            "_flow_claims", {}
        )
        compiled = cache.get(flow)
        if compiled is None:
            text = flow_claim_text(flow, raw_query(self, "job_get_available"))
            sql, names = Query("flow_claim", render_schema(text, self.schema)).compile("dollar")
            # Run by EXECUTE ... USING one text[]: $n becomes the array's nth element
            # (every parameter is cast in the SQL, from text).
            sql = _PLACEHOLDER.sub(lambda m: f"($1[{m.group(1)}])", sql)
            compiled = cache[flow] = (sql, names)
        sql, names = compiled
        values: dict[str, Any] = {
            "queue": queue,
            "max_to_lock": max_to_lock,
            "max_attempted_by": max_attempted_by,
            "attempted_by": client_id,
            "now": now,
        }
        values.update(flow.params())
        params = [_as_text(values[name]) for name in names]
        return self.stmt(
            "job_get_available_flow", schema=self.schema, queue=queue, claim=sql, params=params
        )


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)
