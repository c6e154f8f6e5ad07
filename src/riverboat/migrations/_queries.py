"""Every statement that reads or writes ``river_migration``, once per dialect.

Before version 005 the table has no ``line`` column (River's "assuming main" queries);
the ``*_legacy`` statements serve that shape. ``lock`` is ``None`` where the driver's
``transaction()`` is itself exclusive (SQLite's ``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

__all__ = ["LINE", "LINES", "PG_LOCK_KEY", "QUERIES"]

LINE = "main"
"""River's own migration line."""

LINES = (LINE, "riverboat")
"""Every line riverboat migrates, in the order ``up`` applies them: River's ``main``, then
riverboat's own (its tables, named ``riverboat_*``). River's migrator reads only ``main``
rows, so it keeps working on a database that has both."""

# Transaction-level advisory lock taken before each migration version on Postgres:
# the bytes of "riverbmg" read as a big-endian signed 64-bit integer. One key for the
# whole database (not per schema), so migrations of different schemas also queue up;
# they are rare and short, and a fixed key is easy to spot in pg_locks
# (classid 1919514213, objid 1919053159), i.e. 8244250770961231207.
PG_LOCK_KEY = int.from_bytes(b"riverbmg", "big", signed=True)

_PG: dict[str, str | None] = {
    # The drivers' connections carry a short lock_timeout (drivers/base.LOCK_TIMEOUT);
    # a migration waits for the lock, and for its DDL's table locks, as long as it
    # needs: the setting is lifted for the migration's transaction first (the subquery
    # in FROM runs before the lock is requested).
    "lock": (
        f"SELECT pg_advisory_xact_lock({PG_LOCK_KEY})"
        " FROM (SELECT set_config('lock_timeout', '0', true)) AS no_lock_timeout"
    ),
    # to_regclass resolves an unqualified name through search_path, as River does when
    # no schema is configured.
    "table_state": """
SELECT
    to_regclass('<schema>river_migration') IS NOT NULL,
    EXISTS (
        SELECT 1 FROM pg_catalog.pg_attribute
        WHERE attrelid = to_regclass('<schema>river_migration')
          AND attname = 'line'
          AND NOT attisdropped
    )""",
    "versions": """
SELECT version, created_at FROM <schema>river_migration
WHERE line = :line::text
ORDER BY version""",
    "versions_legacy": "SELECT version, created_at FROM <schema>river_migration ORDER BY version",
    "insert": """
INSERT INTO <schema>river_migration (line, version)
VALUES (:line::text, :version::bigint)""",
    "insert_legacy": "INSERT INTO <schema>river_migration (version) VALUES (:version::bigint)",
    "delete": """
DELETE FROM <schema>river_migration
WHERE line = :line::text AND version = :version::bigint""",
    "delete_legacy": "DELETE FROM <schema>river_migration WHERE version = :version::bigint",
}

_SQLITE: dict[str, str | None] = {
    "lock": None,
    # In SQLite a "schema" is an attached database; pragma_table_info takes its name as
    # the last argument, and "main" is where unqualified tables live by default.
    "table_state": """
SELECT
    EXISTS (
        SELECT 1 FROM <schema>sqlite_master
        WHERE type = 'table' AND name = 'river_migration'
    ),
    EXISTS (
        SELECT 1 FROM pragma_table_info('river_migration', :schema_name)
        WHERE name = 'line'
    )""",
    "versions": """
SELECT version, created_at FROM <schema>river_migration
WHERE line = :line
ORDER BY version""",
    "versions_legacy": "SELECT version, created_at FROM <schema>river_migration ORDER BY version",
    "insert": "INSERT INTO <schema>river_migration (line, version) VALUES (:line, :version)",
    "insert_legacy": "INSERT INTO <schema>river_migration (version) VALUES (:version)",
    "delete": "DELETE FROM <schema>river_migration WHERE line = :line AND version = :version",
    "delete_legacy": "DELETE FROM <schema>river_migration WHERE version = :version",
}

QUERIES: dict[str, dict[str, str | None]] = {"postgres": _PG, "sqlite": _SQLITE}
