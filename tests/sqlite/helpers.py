"""Small helpers shared by the SQLite tests: raw access to the database file."""

from __future__ import annotations

import json
from typing import Any

from riverboat.drivers._sqlite_module import sqlite_module
from riverboat.drivers.sqlite import sqlite_path_from_url


def raw(url: str) -> Any:
    """A plain connection to the test database, for setting up and inspecting rows."""
    conn = sqlite_module().connect(sqlite_path_from_url(url), isolation_level=None, timeout=30)
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


def query(url: str, sql: str, *params: Any) -> list[Any]:
    conn = raw(url)
    try:
        return list(conn.execute(sql, params).fetchall())
    finally:
        conn.close()


def outbox(url: str, topic: str | None = None) -> list[Any]:
    """Outbox payloads (decoded), oldest first, for one topic or all as (topic, payload)."""
    rows = query(url, "SELECT topic, payload FROM river_notification ORDER BY id")
    if topic is None:
        return [(t, json.loads(p)) for t, p in rows]
    return [json.loads(p) for t, p in rows if t == topic]
