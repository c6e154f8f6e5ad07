"""SQLite's claim under flow control, the twin of :mod:`~riverboat.dialect.postgres_flow`.

SQLite runs one writer at a time and a statement reads and writes under the same lock,
so the claim needs no advisory lock: counting and claiming cannot interleave. Sequences
are decided from one grouped pass over the queue's unfinished sequence jobs (River's
SQLite schema has no index on metadata), so a queue with ``sequences=True`` pays for its
backlog on every claim.
"""

from __future__ import annotations

from typing import ClassVar

from riverboat._sql import Query, Statement, render_schema
from riverboat.dialect._flow_common import FlowClaim
from riverboat.dialect._part import DialectPart, raw_query
from riverboat.dialect._sqlite_common import NOW, ts_key
from riverboat.flow import SEQUENCE_METADATA_KEY, SEQUENCE_USE_ROWS, FlowControl

__all__ = ["SqliteFlow"]

SCAN_MAX = 1000


def _path(key: str) -> str:
    # A JSON path naming one top-level key, as an SQL literal. Inside the path's quoted
    # label a quote or backslash is escaped: unescaped, a key holding one named no key,
    # every job's value read as null and all of them shared one partition.
    label = key.replace("\\", "\\\\").replace('"', '\\"')
    return "'$.\"" + label.replace("'", "''") + "\"'"


def _partition(table: str, by_kind: bool, by_args: tuple[str, ...]) -> str:
    parts = ([f"{table}.kind"] if by_kind else []) + [
        f"{table}.args -> {_path(key)}" for key in by_args
    ]
    return f"json_array({', '.join(parts)})" if parts else "'[]'"


def flow_claim_text(flow: FlowControl, claim: str) -> str:
    con, rate = flow.concurrency, flow.rate
    pc_j = _partition("j", con.by_kind, tuple(con.by_args)) if con else "'[]'"
    pr_j = _partition("j", rate.by_kind, tuple(rate.by_args)) if rate else "'[]'"
    seq_key = f"j.metadata ->> '$.{SEQUENCE_METADATA_KEY}.key'"
    now = f"coalesce(:now, {NOW})"
    ctes = []
    full: list[str] = []
    if con is not None:
        ctes.append(f"""running AS (
    SELECT {pc_j} AS part, count(*) AS n,
           count(*) FILTER (WHERE j.attempted_by ->> '$[#-1]' = :attempted_by) AS local_n
    FROM <schema>river_job j
    WHERE j.state = 'running' AND j.queue = :queue
    GROUP BY 1
)""")
        if con.global_limit is not None:
            full.append(f"{pc_j} IN (SELECT part FROM running WHERE n >= :global_limit)")
        if con.local_limit is not None:
            full.append(f"{pc_j} IN (SELECT part FROM running WHERE local_n >= :local_limit)")
    if rate is not None:
        window = f"datetime({now}, '-' || :rate_period || ' seconds', 'subsec')"
        ctes.append(f"""started AS (
    SELECT {pr_j} AS part, count(*) AS n
    FROM <schema>river_job j
    WHERE j.queue = :queue AND {ts_key("j.attempted_at", unreadable_first=False)} > {window}
      AND (j.state IN ('running', 'retryable')
           OR (j.state IN ('completed', 'cancelled', 'discarded')
               AND {ts_key("j.finalized_at", unreadable_first=False)} > {window}))
    GROUP BY 1
)""")
        full.append(f"{pr_j} IN (SELECT part FROM started WHERE n >= :rate_limit)")
    sequence = "1"
    if flow.sequences:
        # Per sequence key: the lowest id that still blocks the ones after it, and
        # whether one of its jobs is running.
        ctes.append(f"""sequences AS (
    SELECT {seq_key} AS seq,
           min(CASE WHEN j.state NOT IN ('completed', 'cancelled')
                     AND NOT (j.state = 'discarded' AND :sequence_continue)
                    THEN j.id END) AS head,
           max(j.state = 'running') AS busy
    FROM <schema>river_job j
    WHERE j.queue = :queue
      AND j.state IN ('available', 'discarded', 'pending', 'retryable', 'running', 'scheduled')
      AND {seq_key} IS NOT NULL
    GROUP BY 1
)""")
        sequence = f"""({seq_key} IS NULL OR EXISTS (
            SELECT 1 FROM sequences q
            WHERE q.seq = {seq_key} AND q.head = j.id AND NOT q.busy))"""
    skip = " AND ".join(f"NOT ({cond})" for cond in full) or "1"
    ctes.append(f"""candidates AS (
    SELECT j.id, j.priority, j.scheduled_at, {pc_j} AS pc, {pr_j} AS pr
    FROM <schema>river_job j
    WHERE j.state = 'available'
      AND j.queue = :queue
      AND j.priority >= 0
      AND {ts_key("j.scheduled_at")} <= {now}
      AND {skip}
      AND {sequence}
    ORDER BY j.priority ASC, j.scheduled_at ASC, j.id ASC
    LIMIT {SCAN_MAX}
)""")
    room = []
    if con is not None and con.global_limit is not None:
        room.append("rank_c + coalesce(r.n, 0) <= :global_limit")
    if con is not None and con.local_limit is not None:
        room.append("rank_c + coalesce(r.local_n, 0) <= :local_limit")
    if rate is not None:
        room.append("rank_r + coalesce(st.n, 0) <= :rate_limit")
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
               AS rank_r
    FROM candidates c
)""")
    chosen = f"""SELECT c.id
    FROM ranked c{joins}
    WHERE {" AND ".join(room) or "1"}
    ORDER BY c.priority ASC, c.scheduled_at ASC, c.id ASC
    LIMIT :max_to_lock"""
    start = claim.index("WHERE id IN (")
    end = claim.index("RETURNING")
    update = claim[:start] + f"WHERE id IN (\n    {chosen}\n)\n" + claim[end:]
    return "WITH " + ",\n".join(ctes) + "\n" + update.lstrip()


# What a queue's limits are using, per partition (riverboat.flow.limit_uses); see
# postgres_flow.py. The args part is the JSON array of the by_args keys' values.
_WINDOW = f"datetime({NOW}, '-' || :rate_period || ' seconds', 'subsec')"
_STARTED = f"""{ts_key("attempted_at", unreadable_first=False)} > {_WINDOW}
      AND (state IN ('running', 'retryable')
           OR {ts_key("finalized_at", unreadable_first=False)} > {_WINDOW})"""
# The keys are escaped in the path as _path escapes them for the claim: unescaped, a
# key holding a quote or backslash named no key, and the limits view put every job in
# one partition of nulls while the claim counted them apart.
_PARTITION = """CASE WHEN :by_kind THEN kind END AS part_kind,
       (SELECT json_group_array(json(j.args -> (
                   '$."' || replace(replace(k.value, '\\', '\\\\'), '"', '\\"') || '"')))
        FROM json_each(:by_args) k) AS part_args"""
_DUE = f"state = 'available' AND {ts_key('scheduled_at')} <= {NOW}"
QUERIES: dict[str, str] = {}
QUERIES["flow_use"] = f"""
SELECT {_PARTITION},
       count(*) FILTER (WHERE state = 'running') AS running,
       count(*) FILTER (WHERE :rate_period IS NOT NULL AND {_STARTED}) AS started,
       count(*) FILTER (WHERE {_DUE}) AS due
FROM <schema>river_job j
WHERE queue = :queue
  AND (state IN ('running', 'available') OR (:rate_period IS NOT NULL AND {_STARTED}))
GROUP BY 1, 2
"""

QUERIES["flow_local_use"] = f"""
SELECT attempted_by ->> '$[#-1]' AS worker,
       {_PARTITION},
       count(*) AS running
FROM <schema>river_job j
WHERE queue = :queue AND state = 'running'
GROUP BY 1, 2, 3
"""
_SEQ_KEY = f"metadata ->> '$.{SEQUENCE_METADATA_KEY}.key'"
QUERIES["flow_sequence_use"] = f"""
SELECT {_SEQ_KEY} AS seq,
       count(*) FILTER (WHERE state = 'running') AS running,
       count(*) FILTER (WHERE {_DUE}) AS due,
       min(CASE WHEN state NOT IN ('completed', 'cancelled')
                 AND NOT (state = 'discarded' AND :sequence_continue) THEN id END) AS head,
       min(CASE WHEN {_DUE} THEN id END) AS first_due
FROM <schema>river_job
WHERE queue = :queue
  AND state IN ('available', 'discarded', 'pending', 'retryable', 'running', 'scheduled')
  AND {_SEQ_KEY} IS NOT NULL
GROUP BY 1
HAVING count(*) FILTER (WHERE state = 'running' OR ({_DUE})) > 0
ORDER BY due DESC, running DESC, seq
LIMIT {SEQUENCE_USE_ROWS}
"""


class SqliteFlow(DialectPart):
    """SQLite's flow-controlled claim; see the module docstring."""

    _queries: ClassVar[dict[str, str]] = QUERIES

    def _flow_claim(self, claim: FlowClaim) -> Statement:
        # Each outcome of the queue is written before the claim (runtime/producer.py):
        # SQLite has no finished jobs to leave out, and its claims are serialized by its
        # write lock, so counting rows costs no lock of riverboat's own.
        cache: dict[FlowControl, Query] = self.__dict__.setdefault("_flow_queries", {})
        query = cache.get(claim.flow)
        if query is None:
            text = flow_claim_text(claim.flow, raw_query(self, "job_get_available"))
            query = Query("job_get_available_flow", render_schema(text, self.schema))
            cache[claim.flow] = query
        return Statement(query, claim.params)
