"""Reading the test schema on a connection of its own (never Django's)."""

from __future__ import annotations

from typing import Any

import psycopg


def rows(url: str, schema: str, sql: str, *params: Any) -> list[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        return conn.execute(sql, params).fetchall()


def job_count(url: str, schema: str, kind: str | None = None) -> int:
    if kind is None:
        return int(rows(url, schema, "SELECT count(*) FROM river_job")[0][0])
    return int(rows(url, schema, "SELECT count(*) FROM river_job WHERE kind = %s", kind)[0][0])


def backends(url: str, application_name: str) -> int:
    """Server backends opened under ``application_name`` (Django's, in these tests)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchone()
    assert row is not None
    return int(row[0])
