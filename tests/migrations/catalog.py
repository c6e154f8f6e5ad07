"""Reading a schema's shape out of the Postgres catalog, and River's expected shapes.

:func:`snapshot` describes everything a migration can change: tables (persistence,
columns in physical order with type, nullability and default, constraints and indexes
with their definitions), enum labels in order, functions and triggers. The schema name
is replaced by ``S`` so snapshots of different schemas compare equal.

:func:`expected` is the same description written down by hand from River's published
migration SQL, for every version of the main line.
"""

from __future__ import annotations

import re
from typing import Any

Snapshot = dict[str, Any]


def _norm(schema: str, text: str | None) -> str | None:
    if text is None:
        return None
    return re.sub(rf"\b{re.escape(schema)}\.", "S.", text)


def snapshot(conn: Any, schema: str) -> Snapshot:
    """The catalog description of ``schema`` (see the module docstring)."""

    def n(text: str | None) -> str | None:
        return _norm(schema, text)

    tables: dict[str, Any] = {}
    for oid, name, persistence in conn.execute(
        """SELECT c.oid, c.relname, c.relpersistence FROM pg_class c
           JOIN pg_namespace ns ON ns.oid = c.relnamespace
           WHERE ns.nspname = %s AND c.relkind = 'r' ORDER BY c.relname""",
        [schema],
    ).fetchall():
        columns = [
            (col, n(typ), notnull, n(default))
            for col, typ, notnull, default in conn.execute(
                """SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                          pg_get_expr(d.adbin, d.adrelid)
                   FROM pg_attribute a
                   LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                   WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
                   ORDER BY a.attnum""",
                [oid],
            ).fetchall()
        ]
        constraints = {
            con: n(definition)
            for con, definition in conn.execute(
                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s",
                [oid],
            ).fetchall()
        }
        indexes = {
            idx: n(definition)
            for idx, definition in conn.execute(
                """SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i
                   JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s""",
                [oid],
            ).fetchall()
        }
        triggers = {
            trigger: n(definition)
            for trigger, definition in conn.execute(
                """SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger
                   WHERE tgrelid = %s AND NOT tgisinternal""",
                [oid],
            ).fetchall()
        }
        tables[name] = {
            "unlogged": persistence == "u",
            "columns": columns,
            "constraints": constraints,
            "indexes": indexes,
            "triggers": triggers,
        }
    enums = {
        name: list(labels)
        for name, labels in conn.execute(
            """SELECT t.typname, array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
               FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid
               JOIN pg_namespace ns ON ns.oid = t.typnamespace
               WHERE ns.nspname = %s GROUP BY t.typname""",
            [schema],
        ).fetchall()
    }
    functions = {
        f"{name}({n(args)})": {
            "returns": n(returns),
            "language": language,
            "volatility": volatility,
            # riverboat's own functions name the schema's tables, quoted.
            "body": " ".join(re.sub(rf'"{re.escape(schema)}"\.', "S.", n(body) or "").split()),
        }
        for name, args, returns, language, volatility, body in conn.execute(
            """SELECT p.proname, pg_get_function_identity_arguments(p.oid),
                      pg_get_function_result(p.oid), l.lanname, p.provolatile, p.prosrc
               FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
               JOIN pg_namespace ns ON ns.oid = p.pronamespace WHERE ns.nspname = %s""",
            [schema],
        ).fetchall()
    }
    sequences = [
        name
        for (name,) in conn.execute(
            """SELECT c.relname FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
               WHERE ns.nspname = %s AND c.relkind = 'S' ORDER BY c.relname""",
            [schema],
        ).fetchall()
    ]
    return {"tables": tables, "enums": enums, "functions": functions, "sequences": sequences}


# -- River's schema, version by version --------------------------------------------

NOTIFY_BODY = "<sends pg_notify('river_insert', {\"queue\": NEW.queue}) for available rows>"


def rivers_part(snap: Snapshot) -> tuple[Snapshot, list[str]]:
    """``snap`` without riverboat's own line (tables named ``riverboat_*``), and the names
    of the tables left out: River's ``main`` line must stay River's byte for byte."""
    own = sorted(name for name in snap["tables"] if name.startswith("riverboat_"))
    rest = {
        key: {k: v for k, v in part.items() if not str(k).startswith("riverboat_")}
        if isinstance(part, dict)
        else part
        for key, part in snap.items()
    }
    return rest, own


def normalise_notify_body(snap: Snapshot) -> Snapshot:
    """Replace river_job_notify's body by :data:`NOTIFY_BODY` if it does River's job.

    riverboat writes this trigger function (versions 002-003 only) in its own words,
    so only what it does is compared, not its text.
    """
    fn = snap["functions"].get("river_job_notify()")
    if fn is not None:
        body = fn["body"]
        if (
            "pg_notify('river_insert'" in body
            and "json_build_object('queue', NEW.queue)" in body
            and "NEW.state = 'available'" in body
            and "RETURN NULL" in body
        ):
            fn["body"] = NOTIFY_BODY
    return snap


def _check(expr: str) -> str:
    return f"CHECK {expr}"


def _length(col: str, fn: str = "char_length") -> str:
    return _check(f"((({fn}({col}) > 0) AND ({fn}({col}) < 128)))")


_FINALIZED = (
    "ARRAY['cancelled'::S.river_job_state, 'completed'::S.river_job_state, "
    "'discarded'::S.river_job_state]"
)
_FINALIZED_V2 = _check(
    f"((((state = ANY ({_FINALIZED})) AND (finalized_at IS NOT NULL)) OR (finalized_at IS NULL)))"
)
_FINALIZED_V4 = _check(
    f"((((finalized_at IS NULL) AND (state <> ALL ({_FINALIZED}))) OR "
    f"((finalized_at IS NOT NULL) AND (state = ANY ({_FINALIZED})))))"
)
_TSTZ = "timestamp with time zone"
_BITMASK_BODY = (
    "SELECT CASE state WHEN 'available' THEN get_bit(bitmask, 7) "
    "WHEN 'cancelled' THEN get_bit(bitmask, 6) WHEN 'completed' THEN get_bit(bitmask, 5) "
    "WHEN 'discarded' THEN get_bit(bitmask, 4) WHEN 'pending' THEN get_bit(bitmask, 3) "
    "WHEN 'retryable' THEN get_bit(bitmask, 2) WHEN 'running' THEN get_bit(bitmask, 1) "
    "WHEN 'scheduled' THEN get_bit(bitmask, 0) ELSE 0 END = 1;"
)


def _index(name: str, table: str, using: str, unique: bool = False, where: str = "") -> str:
    kind = "UNIQUE INDEX" if unique else "INDEX"
    tail = f" WHERE {where}" if where else ""
    return f"CREATE {kind} {name} ON S.{table} USING {using}{tail}"


def _table(columns: list[tuple[str, str, bool, str | None]], unlogged: bool = False) -> Any:
    return {
        "unlogged": unlogged,
        "columns": columns,
        "constraints": {},
        "indexes": {},
        "triggers": {},
    }


def _pkey(table: Any, table_name: str, name: str, cols: str) -> None:
    table["constraints"][name] = f"PRIMARY KEY ({cols})"
    table["indexes"][name] = _index(name, table_name, f"btree ({cols})", unique=True)


def _set_column(table: Any, name: str, notnull: bool, default: str | None) -> None:
    cols = table["columns"]
    index = next(i for i, col in enumerate(cols) if col[0] == name)
    cols[index] = (name, cols[index][1], notnull, default)


def _legacy_migration_table() -> Any:
    table = _table(
        [
            ("id", "bigint", True, "nextval('S.river_migration_id_seq'::regclass)"),
            ("created_at", _TSTZ, True, "now()"),
            ("version", "bigint", True, None),
        ]
    )
    _pkey(table, "river_migration", "river_migration_pkey", "id")
    table["constraints"]["version"] = _check("((version >= 1))")
    table["indexes"]["river_migration_version_idx"] = _index(
        "river_migration_version_idx", "river_migration", "btree (version)", unique=True
    )
    return table


def _client_tables(tables: dict[str, Any]) -> None:
    client = _table(
        [
            ("id", "text", True, None),
            ("created_at", _TSTZ, True, "now()"),
            ("metadata", "jsonb", True, "'{}'::jsonb"),
            ("paused_at", _TSTZ, False, None),
            ("updated_at", _TSTZ, True, None),
        ],
        unlogged=True,
    )
    _pkey(client, "river_client", "river_client_pkey", "id")
    client["constraints"]["name_length"] = _length("id")
    queue = _table(
        [
            ("river_client_id", "text", True, None),
            ("name", "text", True, None),
            ("created_at", _TSTZ, True, "now()"),
            ("max_workers", "bigint", True, "0"),
            ("metadata", "jsonb", True, "'{}'::jsonb"),
            ("num_jobs_completed", "bigint", True, "0"),
            ("num_jobs_running", "bigint", True, "0"),
            ("updated_at", _TSTZ, True, None),
        ],
        unlogged=True,
    )
    _pkey(queue, "river_client_queue", "river_client_queue_pkey", "river_client_id, name")
    queue["constraints"].update(
        {
            "name_length": _length("name"),
            "num_jobs_completed_zero_or_positive": _check("((num_jobs_completed >= 0))"),
            "num_jobs_running_zero_or_positive": _check("((num_jobs_running >= 0))"),
            "river_client_queue_river_client_id_fkey": (
                "FOREIGN KEY (river_client_id) REFERENCES S.river_client(id) ON DELETE CASCADE"
            ),
        }
    )
    tables["river_client"] = client
    tables["river_client_queue"] = queue


def expected(version: int, *, via_down: bool = False) -> Snapshot:
    """River's schema at ``version``, reached by migrating up (or, with ``via_down``,
    by migrating down from the latest, which differs below 004: 004's down leaves
    river_job.metadata nullable and without a default, although 002 created it NOT
    NULL DEFAULT '{}', and cannot take 'pending' out of the enum again)."""
    tables: dict[str, Any] = {}
    enums: dict[str, list[str]] = {}
    functions: dict[str, Any] = {}
    sequences: list[str] = []
    snap: Snapshot = {
        "tables": tables,
        "enums": enums,
        "functions": functions,
        "sequences": sequences,
    }
    if version < 1:
        return snap

    # 001
    tables["river_migration"] = _legacy_migration_table()
    sequences.append("river_migration_id_seq")
    if version < 2:
        return snap

    # 002
    enums["river_job_state"] = [
        "available", "cancelled", "completed", "discarded", "retryable", "running", "scheduled"
    ]  # fmt: skip
    job = _table(
        [
            ("id", "bigint", True, "nextval('S.river_job_id_seq'::regclass)"),
            ("state", "S.river_job_state", True, "'available'::S.river_job_state"),
            ("attempt", "smallint", True, "0"),
            ("max_attempts", "smallint", True, None),
            ("attempted_at", _TSTZ, False, None),
            ("created_at", _TSTZ, True, "now()"),
            ("finalized_at", _TSTZ, False, None),
            ("scheduled_at", _TSTZ, True, "now()"),
            ("priority", "smallint", True, "1"),
            ("args", "jsonb", False, None),
            ("attempted_by", "text[]", False, None),
            ("errors", "jsonb[]", False, None),
            ("kind", "text", True, None),
            ("metadata", "jsonb", True, "'{}'::jsonb"),
            ("queue", "text", True, "'default'::text"),
            ("tags", "character varying(255)[]", False, None),
        ]
    )
    _pkey(job, "river_job", "river_job_pkey", "id")
    job["constraints"].update(
        {
            "finalized_or_finalized_at_null": _FINALIZED_V2,
            "max_attempts_is_positive": _check("((max_attempts > 0))"),
            "priority_in_range": _check("(((priority >= 1) AND (priority <= 4)))"),
            "queue_length": _length("queue"),
            "kind_length": _length("kind"),
        }
    )
    job["indexes"].update(
        {
            "river_job_kind": _index("river_job_kind", "river_job", "btree (kind)"),
            "river_job_state_and_finalized_at_index": _index(
                "river_job_state_and_finalized_at_index",
                "river_job",
                "btree (state, finalized_at)",
                where="(finalized_at IS NOT NULL)",
            ),
            "river_job_prioritized_fetching_index": _index(
                "river_job_prioritized_fetching_index",
                "river_job",
                "btree (state, queue, priority, scheduled_at, id)",
            ),
            "river_job_args_index": _index("river_job_args_index", "river_job", "gin (args)"),
            "river_job_metadata_index": _index(
                "river_job_metadata_index", "river_job", "gin (metadata)"
            ),
        }
    )
    job["triggers"]["river_notify"] = (
        "CREATE TRIGGER river_notify AFTER INSERT ON S.river_job FOR EACH ROW "
        "EXECUTE FUNCTION S.river_job_notify()"
    )
    tables["river_job"] = job
    sequences.insert(0, "river_job_id_seq")
    functions["river_job_notify()"] = {
        "returns": "trigger",
        "language": "plpgsql",
        "volatility": "v",
        "body": NOTIFY_BODY,
    }
    leader = _table(
        [
            ("elected_at", _TSTZ, True, None),
            ("expires_at", _TSTZ, True, None),
            ("leader_id", "text", True, None),
            ("name", "text", True, None),
        ],
        unlogged=True,
    )
    _pkey(leader, "river_leader", "river_leader_pkey", "name")
    leader["constraints"]["name_length"] = _length("name")
    leader["constraints"]["leader_id_length"] = _length("leader_id")
    tables["river_leader"] = leader
    if via_down and version < 4:
        _set_column(job, "metadata", False, None)
        enums["river_job_state"].insert(4, "pending")
    if version < 3:
        return snap

    # 003
    _set_column(job, "tags", True, "'{}'::character varying[]")
    if version < 4:
        return snap

    # 004
    _set_column(job, "args", True, None)
    enums["river_job_state"].insert(4, "pending")
    job["constraints"]["finalized_or_finalized_at_null"] = _FINALIZED_V4
    del job["triggers"]["river_notify"]
    del functions["river_job_notify()"]
    queue = _table(
        [
            ("name", "text", True, None),
            ("created_at", _TSTZ, True, "now()"),
            ("metadata", "jsonb", True, "'{}'::jsonb"),
            ("paused_at", _TSTZ, False, None),
            ("updated_at", _TSTZ, True, None),
        ]
    )
    _pkey(queue, "river_queue", "river_queue_pkey", "name")
    tables["river_queue"] = queue
    _set_column(leader, "name", True, "'default'::text")
    leader["constraints"]["name_length"] = _check("((name = 'default'::text))")
    if version < 5:
        return snap

    # 005: the rebuilt table's primary key is created while the old one still holds
    # the name river_migration_pkey, hence the suffix.
    migration = _table(
        [
            ("line", "text", True, None),
            ("version", "bigint", True, None),
            ("created_at", _TSTZ, True, "now()"),
        ]
    )
    _pkey(migration, "river_migration", "river_migration_pkey1", "line, version")
    migration["constraints"]["line_length"] = _length("line")
    migration["constraints"]["version_gte_1"] = _check("((version >= 1))")
    tables["river_migration"] = migration
    sequences.remove("river_migration_id_seq")
    job["columns"].append(("unique_key", "bytea", False, None))
    job["indexes"]["river_job_kind_unique_key_idx"] = _index(
        "river_job_kind_unique_key_idx",
        "river_job",
        "btree (kind, unique_key)",
        unique=True,
        where="(unique_key IS NOT NULL)",
    )
    _client_tables(tables)
    if version < 6:
        return snap

    # 006
    functions["river_job_state_in_bitmask(bitmask bit, state S.river_job_state)"] = {
        "returns": "boolean",
        "language": "sql",
        "volatility": "i",
        "body": _BITMASK_BODY,
    }
    job["columns"].append(("unique_states", "bit(8)", False, None))
    job["indexes"]["river_job_unique_idx"] = _index(
        "river_job_unique_idx",
        "river_job",
        "btree (unique_key)",
        unique=True,
        where=(
            "((unique_key IS NOT NULL) AND (unique_states IS NOT NULL) AND "
            "S.river_job_state_in_bitmask(unique_states, state))"
        ),
    )
    del job["indexes"]["river_job_kind_unique_key_idx"]
    if version < 7:
        return snap

    # 007
    notification = _table(
        [
            ("id", "bigint", True, "nextval('S.river_notification_id_seq'::regclass)"),
            ("created_at", _TSTZ, True, "now()"),
            ("payload", "text", True, None),
            ("topic", "text", True, None),
        ]
    )
    _pkey(notification, "river_notification", "river_notification_pkey", "id")
    notification["constraints"]["topic_length"] = _length("topic", "length")
    notification["indexes"]["river_notification_created_at_idx"] = _index(
        "river_notification_created_at_idx", "river_notification", "btree (created_at)"
    )
    notification["indexes"]["river_notification_topic_id_idx"] = _index(
        "river_notification_topic_id_idx", "river_notification", "btree (topic, id)"
    )
    tables["river_notification"] = notification
    sequences.append("river_notification_id_seq")
    del tables["river_client"]
    del tables["river_client_queue"]
    _set_column(job, "max_attempts", True, "25")
    _set_column(queue, "updated_at", True, "CURRENT_TIMESTAMP")
    if version < 8:
        return snap

    # 008 (job_id_autoincrement) changes nothing on Postgres: its ids come from a
    # sequence, which never reuses one. Only river_migration records it.
    return snap
