"""Job statements that target ids keep ``river_job_pkey`` index scans when statistics are
stale: the table was analyzed while empty, autovacuum is off, and then 100,000 jobs
arrive (the situation that made Postgres 17 pick sequential scans for River's completer).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from riverboat import JobState
from riverboat._sql import Statement
from riverboat.dialect.base import JobStateUpdate
from riverboat.dialect.postgres import PostgresDialect

ROWS = 100_000


@pytest.fixture
def stale(pg_url: str, pg_schema: str) -> Iterator[psycopg.Connection[Any]]:
    conn = psycopg.connect(pg_url, autocommit=True)
    conn.execute(f'SET search_path TO "{pg_schema}"')
    conn.execute("ALTER TABLE river_job SET (autovacuum_enabled = false)")
    conn.execute("ANALYZE river_job")
    conn.execute(
        """
        INSERT INTO river_job (args, kind, state, attempt, attempted_at, queue)
        SELECT '{}', 'bulk', 'running', 1, now(), 'default' FROM generate_series(1, %s)
        """,
        (ROWS,),
    )
    stats = conn.execute(
        "SELECT reltuples FROM pg_class WHERE oid = 'river_job'::regclass"
    ).fetchone()
    assert stats is not None and stats[0] <= 0  # the planner still believes it is empty
    yield conn
    conn.close()


def _explain(conn: psycopg.Connection[Any], stmt: Statement, generic: bool) -> dict[str, Any]:
    sql, names = stmt.query.compile("dollar")
    params = [stmt.params[n] for n in names]
    if generic:
        # The plan a prepared statement may switch to after five runs, built without
        # looking at the parameter values.
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE admin_plan AS {sql}")
        cur = psycopg.ClientCursor(conn)
        placeholders = ", ".join(["%s"] * len(params))
        row = cur.execute(
            f"EXPLAIN (FORMAT JSON) EXECUTE admin_plan({placeholders})", params
        ).fetchone()
        conn.execute("DEALLOCATE admin_plan")
        conn.execute("RESET plan_cache_mode")
    else:
        raw_cur = psycopg.RawCursor(conn)
        row = raw_cur.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchone()
    assert row is not None
    plan = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    return plan[0]["Plan"]  # type: ignore[no-any-return]


def _scans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if "Relation Name" in node and node["Node Type"] != "ModifyTable":
        yield node
    for child in node.get("Plans", ()):
        yield from _scans(child)


def _assert_pkey(plan: dict[str, Any], what: str) -> None:
    scans = [n for n in _scans(plan) if n["Relation Name"] == "river_job"]
    assert scans, f"{what}: no scan of river_job in the plan"
    for node in scans:
        kind = node["Node Type"]
        if kind == "Bitmap Heap Scan":  # fed by a bitmap index scan, which must be the key
            # (Its other children are subplans of its filter, scanned on their own.)
            feeds = [c for c in node.get("Plans", ()) if c["Node Type"].startswith("Bitmap")]
            indexes = {c.get("Index Name") for c in feeds}
            assert indexes == {"river_job_pkey"}, f"{what}: bitmap scan of {indexes}"
            continue
        assert kind in ("Index Scan", "Index Only Scan"), (
            f"{what}: {kind} on river_job\n{json.dumps(plan, indent=1)}"
        )
        assert node["Index Name"] == "river_job_pkey", what


def _statements(dialect: PostgresDialect, job_id: int) -> dict[str, Statement]:
    updates = [
        JobStateUpdate(id=job_id, state=JobState.COMPLETED, finalized=True),
        JobStateUpdate(
            id=job_id + 1, state=JobState.RETRYABLE, error='{"error":"x"}', metadata_updates="{}"
        ),
    ]
    return {
        "job_cancel": dialect.job_cancel(job_id, "2026-01-01T00:00:00Z"),
        "job_retry": dialect.job_retry(job_id),
        "job_delete": dialect.job_delete(job_id),
        "job_get": dialect.job_get_by_id(job_id),
        "job_update": dialect.job_update(job_id, {"output": 1}),
        "job_set_state_if_running_many": dialect.job_set_state_if_running_many(updates),
        "job_set_state_if_running_many skip_locked": dialect.job_set_state_if_running_many(
            updates, returning=False, skip_locked=True
        ),
        "job_complete_many": dialect.job_complete_many(
            [job_id, job_id + 1], [1, 1], returning=True
        ),
        "job_delete_many by ids": dialect.job_delete_many(
            filters={"ids": [job_id, job_id + 1]}, limit=10
        ),
        "job_list by ids": dialect.job_list(
            filters={"ids": [job_id, job_id + 1]}, order_column="id", descending=False, limit=10
        ),
    }


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
def test_id_targeted_statements_use_the_primary_key(
    stale: psycopg.Connection[Any], pg_schema: str, generic: bool
) -> None:
    dialect = PostgresDialect(pg_schema)
    (job_id,) = stale.execute("SELECT min(id) + 500 FROM river_job").fetchone() or (0,)
    for name, stmt in _statements(dialect, job_id).items():
        _assert_pkey(_explain(stale, stmt, generic), name)


def test_the_check_catches_a_sequential_scan(
    stale: psycopg.Connection[Any], pg_schema: str
) -> None:
    # A guard against a vacuous assertion: a statement that cannot use the key must fail.
    from riverboat._sql import Query, render_schema

    text = render_schema("SELECT id FROM <schema>river_job WHERE attempt = :n::smallint", pg_schema)
    plan = _explain(stale, Statement(Query("seq", text), {"n": 1}), generic=False)
    with pytest.raises(AssertionError, match="Seq Scan"):
        _assert_pkey(plan, "seq")


def _analyzed_backlog(pg_url: str, pg_schema: str, rows: int) -> psycopg.Connection[Any]:
    """A connection to ``pg_schema`` whose river_job holds ``rows`` available jobs,
    analyzed then, with autovacuum off so the statistics stay as they were."""
    conn = psycopg.connect(pg_url, autocommit=True)
    conn.execute(f'SET search_path TO "{pg_schema}"')
    conn.execute("ALTER TABLE river_job SET (autovacuum_enabled = false)")
    conn.execute(
        "INSERT INTO river_job (args, kind, state, queue) "
        "SELECT '{}', 'bulk', 'available', 'default' FROM generate_series(1, %s)",
        (rows,),
    )
    conn.execute("ANALYZE river_job")
    return conn


@pytest.fixture
def analyzed_before_claims(pg_url: str, pg_schema: str) -> Iterator[psycopg.Connection[Any]]:
    """Statistics taken while a backlog was available (no job running), then every job
    claimed: the completer's statements must not believe the running set is small."""
    conn = _analyzed_backlog(pg_url, pg_schema, ROWS)
    conn.execute("UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now()")
    yield conn
    conn.close()


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
def test_completions_use_the_primary_key_when_statistics_predate_the_claims(
    analyzed_before_claims: psycopg.Connection[Any], pg_schema: str, generic: bool
) -> None:
    conn = analyzed_before_claims
    dialect = PostgresDialect(pg_schema)
    (job_id,) = conn.execute("SELECT min(id) + 500 FROM river_job").fetchone() or (0,)
    ids = list(range(job_id, job_id + 100))
    statements = {
        "job_complete_many": dialect.job_complete_many(ids, [1] * len(ids), returning=True),
        "job_complete_many_no_return": dialect.job_complete_many(
            ids, [1] * len(ids), returning=False
        ),
        "job_set_state_if_running_many": dialect.job_set_state_if_running_many(
            [JobStateUpdate(i, JobState.COMPLETED, finalized=True) for i in ids]
        ),
        "job_set_state_if_running_many skip_locked": dialect.job_set_state_if_running_many(
            [JobStateUpdate(i, JobState.COMPLETED, finalized=True) for i in ids],
            returning=False,
            skip_locked=True,
        ),
    }
    for name, stmt in statements.items():
        _assert_pkey(_explain(conn, stmt, generic), name)


DRAIN_ROWS = 10_000  # enough for the old EXISTS to be planned as a sequential scan


@pytest.fixture
def analyzed_before_completions(pg_url: str, pg_schema: str) -> Iterator[psycopg.Connection[Any]]:
    """Statistics taken while a backlog was available, then every job completed and one
    new job inserted: the table's first pages hold only finished rows."""
    conn = _analyzed_backlog(pg_url, pg_schema, DRAIN_ROWS)
    conn.execute(
        "UPDATE river_job SET state = 'completed', attempt = 1, attempted_at = now(), "
        "finalized_at = now()"
    )
    conn.execute("INSERT INTO river_job (args, kind, queue) VALUES ('{}', 'bulk', 'default')")
    yield conn
    conn.close()


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
def test_the_drain_probe_reads_the_fetch_index_when_statistics_predate_the_completions(
    analyzed_before_completions: psycopg.Connection[Any], pg_schema: str, generic: bool
) -> None:
    # riverboat worker --exit-when-idle asks this every poll while a flow limit holds the
    # client back; a sequential scan read every finished row first.
    conn = analyzed_before_completions
    stmt = PostgresDialect(pg_schema).job_due_exists(["default", "other"], 5.0)
    plan = _explain(conn, stmt, generic)
    scans = [n for n in _scans(plan) if n["Relation Name"] == "river_job"]
    assert scans, json.dumps(plan, indent=1)
    for node in scans:
        assert node["Node Type"] in ("Index Scan", "Index Only Scan"), json.dumps(plan, indent=1)
        assert node["Index Name"] == "river_job_prioritized_fetching_index"
    sql, names = stmt.query.compile("dollar")
    row = psycopg.RawCursor(conn).execute(sql, [stmt.params[n] for n in names]).fetchone()
    assert row == (True,)  # the one job inserted after the completions is due


@pytest.fixture
def with_workflows(pg_url: str, pg_schema: str) -> Iterator[psycopg.Connection[Any]]:
    """100,000 finished jobs with fresh statistics, 1 % of them tasks of 100 workflows."""
    conn = psycopg.connect(pg_url, autocommit=True)
    conn.execute(f'SET search_path TO "{pg_schema}"')
    conn.execute(
        """
        INSERT INTO river_job (args, kind, state, finalized_at, queue, metadata)
        SELECT '{}', 'bulk', 'completed', now(), 'default',
               CASE WHEN g %% 100 = 0
                    THEN jsonb_build_object('riverboat_workflow', jsonb_build_object(
                        'id', 'wf-' || (g %% 10000) / 100, 'task', 't' || g))
                    ELSE '{}' END
        FROM generate_series(1, %s) AS g
        """,
        (ROWS,),
    )
    conn.execute("ANALYZE river_job")
    yield conn
    conn.close()


def test_workflow_reads_go_through_the_metadata_index(
    with_workflows: psycopg.Connection[Any], pg_schema: str
) -> None:
    # One table of 100,000 jobs for the four cases: plans, custom and generic, for a
    # workflow that exists and one that doesn't.
    for generic in (False, True):
        for workflow_id in ("wf-50", "no-such-workflow"):
            _check_workflow_plans(with_workflows, pg_schema, generic, workflow_id)


def _check_workflow_plans(
    with_workflows: psycopg.Connection[Any], pg_schema: str, generic: bool, workflow_id: str
) -> None:
    """A workflow's tasks are found by River's GIN index on metadata. With ORDER BY id
    LIMIT (workflow_get) or a bare LIMIT 1 (workflow_unfinished) on the table, the
    planner, guessing that 1 % of all jobs match, walked the primary key or the table
    from its start, filtering every job on the way: all of them for an id with no
    unfinished task, or no task at all."""
    dialect = PostgresDialect(pg_schema)
    statements = {
        "workflow_get": dialect.workflow_get(workflow_id, 10_000),
        "workflow_unfinished": dialect.workflow_unfinished(workflow_id),
    }
    for name, stmt in statements.items():
        plan = _explain(with_workflows, stmt, generic)
        scans = [n for n in _scans(plan) if n["Relation Name"] == "river_job"]
        assert scans, f"{name}: no scan of river_job"
        for node in scans:
            assert node["Node Type"] == "Bitmap Heap Scan", (
                f"{name}: {node['Node Type']}\n{json.dumps(plan, indent=1)}"
            )
            feeds = {c.get("Index Name") for c in node["Plans"] if "Index Name" in c}
            assert feeds == {"river_job_metadata_index"}, f"{name}: {feeds}"
    # These two also filter by state, whose index finds the few rows they touch.
    for name, stmt in {
        "workflow_retry": dialect.workflow_retry(workflow_id),
        "workflow_cancel": dialect.workflow_cancel(workflow_id, "2026-01-01T00:00:00Z"),
    }.items():
        plan = _explain(with_workflows, stmt, generic)
        for node in _scans(plan):
            if node["Relation Name"] == "river_job":
                assert node["Node Type"] != "Seq Scan", f"{name}\n{json.dumps(plan, indent=1)}"
                # By id (the update's join to the rows it found), not a walk of all ids.
                walk = node.get("Index Name") == "river_job_pkey" and "Index Cond" not in node
                assert not walk, f"{name}\n{json.dumps(plan, indent=1)}"
