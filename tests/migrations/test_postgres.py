"""The Postgres migrations and the Migrator against a real server."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

from riverboat import InvalidInputError, MigrationError
from riverboat.drivers.psycopg import AsyncPsycopgDriver, PsycopgDriver
from riverboat.migrations import (
    LATEST_VERSION,
    MigrationInfo,
    Migrator,
    render_sql,
    require_current,
    require_current_async,
)
from riverboat.migrations._files import load_bundles, split_statements
from tests.migrations import RIVERBOAT_LINE
from tests.migrations.catalog import expected, normalise_notify_body, rivers_part, snapshot

ALL = list(range(1, LATEST_VERSION + 1))


def catalog(conn: Any, schema: str) -> dict[str, Any]:
    snap = normalise_notify_body(snapshot(conn, schema))
    snap["sequences"] = sorted(snap["sequences"])
    return snap


def want(version: int, *, via_down: bool = False) -> dict[str, Any]:
    snap = expected(version, via_down=via_down)
    snap["sequences"] = sorted(snap["sequences"])
    return snap


def rows(conn: Any, schema: str) -> list[tuple[Any, ...]]:
    """river_migration as (line, version), or (version,) for the pre-005 table."""
    if (
        conn.execute("SELECT to_regclass(%s)", [f'"{schema}".river_migration']).fetchone()[0]
        is None
    ):
        return []
    has_line = conn.execute(
        """SELECT count(*) FROM information_schema.columns
           WHERE table_schema = %s AND table_name = 'river_migration' AND column_name = 'line'""",
        [schema],
    ).fetchone()[0]
    cols = "line, version" if has_line else "version"
    result: list[tuple[Any, ...]] = conn.execute(
        f'SELECT {cols} FROM "{schema}".river_migration ORDER BY {cols}'
    ).fetchall()
    return result


# -- schema shape ------------------------------------------------------------------


def test_latest_is_rivers_schema(pg_schema: str, conn: Any) -> None:
    # The fixture applied both lines: River's part is River's, riverboat's is apart.
    rivers, own = rivers_part(catalog(conn, pg_schema))
    assert rivers == want(LATEST_VERSION)
    assert own == [
        "riverboat_client",
        "riverboat_flow_client",
        "riverboat_flow_ended",
        "riverboat_periodic_job",
    ]
    assert rows(conn, pg_schema) == [("main", v) for v in ALL] + [
        ("riverboat", v) for v in RIVERBOAT_LINE
    ]


def test_latest_details_that_matter_to_the_runtime(pg_schema: str, conn: Any) -> None:
    snap = snapshot(conn, pg_schema)
    assert snap["enums"]["river_job_state"] == [
        "available", "cancelled", "completed", "discarded", "pending", "retryable", "running",
        "scheduled",
    ]  # fmt: skip
    tables = snap["tables"]
    assert tables["river_leader"]["unlogged"] is True
    # riverboat_flow_ended and riverboat_flow_client (riverboat's line) hold only what a
    # crash may forget.
    unlogged = {"river_leader", "riverboat_flow_ended", "riverboat_flow_client"}
    assert all(tables[name]["unlogged"] for name in unlogged)
    assert not any(t["unlogged"] for name, t in tables.items() if name not in unlogged)
    assert [c[0] for c in tables["river_job"]["columns"]][-2:] == ["unique_key", "unique_states"]
    assert not any(t["triggers"] for t in tables.values())
    # The bitmask function agrees with the client-side encoding (available = 0x01).
    got = conn.execute(
        f"""SELECT s::text, "{pg_schema}".river_job_state_in_bitmask(245::bit(8), s)
            FROM unnest(enum_range(NULL::"{pg_schema}".river_job_state)) AS s"""
    ).fetchall()
    assert dict(got) == {
        "available": True, "cancelled": False, "completed": True, "discarded": False,
        "pending": True, "retryable": True, "running": True, "scheduled": True,
    }  # fmt: skip


@pytest.mark.parametrize("version", ALL)
def test_every_version_up(migrator: Migrator, empty_schema: str, conn: Any, version: int) -> None:
    assert migrator.up(version) == list(range(1, version + 1))
    assert migrator.current_version() == version
    assert catalog(conn, empty_schema) == want(version)
    if version < 5:
        assert rows(conn, empty_schema) == [(v,) for v in range(1, version + 1)]
    else:
        assert rows(conn, empty_schema) == [("main", v) for v in range(1, version + 1)]
    # And on from there to the latest.
    assert migrator.up() == list(range(version + 1, LATEST_VERSION + 1))
    assert catalog(conn, empty_schema) == want(LATEST_VERSION)


@pytest.mark.parametrize("version", range(LATEST_VERSION))
def test_every_version_down_and_up_again(
    migrator: Migrator, empty_schema: str, conn: Any, version: int
) -> None:
    migrator.up()
    assert migrator.down(version) == list(range(LATEST_VERSION, version, -1))
    assert migrator.current_version() == version
    assert catalog(conn, empty_schema) == want(version, via_down=True)
    assert len(rows(conn, empty_schema)) == version
    assert migrator.up() == list(range(version + 1, LATEST_VERSION + 1))
    assert catalog(conn, empty_schema) == want(LATEST_VERSION)
    assert rows(conn, empty_schema) == [("main", v) for v in ALL]


def test_down_to_zero_removes_everything(migrator: Migrator, empty_schema: str, conn: Any) -> None:
    migrator.up()
    assert migrator.down(0) == list(reversed(ALL))
    assert catalog(conn, empty_schema) == want(0)
    assert migrator.current_version() == 0
    assert migrator.down(0) == []
    assert migrator.down() == []
    # River's API spells "everything" as -1.
    migrator.up(2)
    assert migrator.down(-1) == [2, 1]


def test_down_defaults_to_one_step(migrator: Migrator) -> None:
    migrator.up()
    assert migrator.down() == [8]
    assert migrator.down() == [7]
    assert migrator.current_version() == 6


def test_target_versions(migrator: Migrator) -> None:
    assert migrator.up(3) == [1, 2, 3]
    assert migrator.up(3) == []  # already there: a no-op, as in River
    assert migrator.up(2) == []
    assert migrator.down(3) == []
    with pytest.raises(MigrationError, match="not applied"):
        migrator.down(5)
    assert migrator.up(6) == [4, 5, 6]
    assert migrator.down(4) == [6, 5]
    for bad in (0, 9, -1, True, "3"):
        with pytest.raises(InvalidInputError):
            migrator.up(bad)  # type: ignore[arg-type]
    for bad_down in (9, -2, 2.0):
        with pytest.raises(InvalidInputError):
            migrator.down(bad_down)  # type: ignore[arg-type]


def test_list(migrator: Migrator) -> None:
    assert [(i.version, i.applied) for i in migrator.list()] == [(v, False) for v in ALL]
    migrator.up(5)
    infos = migrator.list()
    assert all(isinstance(i, MigrationInfo) for i in infos)
    assert [i.name for i in infos][:2] == ["create river migration", "initial schema"]
    assert [i.applied for i in infos] == [True] * 5 + [False] * 3
    assert all(i.applied_at is not None and i.applied_at.tzinfo for i in infos[:5])
    assert infos[6].applied_at is None


def test_get_sql(migrator: Migrator, empty_schema: str) -> None:
    up = migrator.get_sql("up", [2, 1])
    assert up.index("001 create river migration [up]") < up.index("002 initial schema [up]")
    assert f'CREATE TABLE "{empty_schema}".river_migration' in up
    assert "<schema>" not in migrator.get_sql("up") + migrator.get_sql("down")
    down = migrator.get_sql("down", range(1, 8))
    assert down.index("007 ") < down.index("001 ")
    assert "DROP TABLE river_job" in render_sql("postgres", "down", [2])
    with pytest.raises(InvalidInputError):
        migrator.get_sql("up", [9])
    with pytest.raises(InvalidInputError):
        migrator.get_sql("sideways", [1])  # type: ignore[arg-type]


# -- bookkeeping compatibility -------------------------------------------------------


def test_legacy_table_from_an_old_river_is_upgraded(
    migrator: Migrator, empty_schema: str, conn: Any
) -> None:
    # What a River release from before 005 left behind: the schema at 004 and the
    # version-only table, with rows of its own (and its own timestamps).
    with conn.transaction():
        for version in range(1, 5):
            for statement in split_statements(
                render_sql("postgres", "up", [version], schema=empty_schema), dialect="postgres"
            ):
                conn.execute(statement)
        conn.execute(
            f"""INSERT INTO "{empty_schema}".river_migration (created_at, version)
                SELECT ('2024-01-0' || v || ' 00:00:00+00')::timestamptz, v
                FROM generate_series(1, 4) v"""
        )
    assert migrator.current_version() == 4
    assert [i.applied for i in migrator.list()] == [True] * 4 + [False] * 4
    assert migrator.up() == [5, 6, 7, 8]
    assert catalog(conn, empty_schema) == want(LATEST_VERSION)
    kept = conn.execute(
        f"""SELECT line, version, created_at::date::text FROM "{empty_schema}".river_migration
            WHERE version <= 4 ORDER BY version"""
    ).fetchall()
    assert kept == [("main", v, f"2024-01-0{v}") for v in range(1, 5)]
    # And back below 005, where the rows must be found without a line column again.
    assert migrator.down(3) == [8, 7, 6, 5, 4]
    assert rows(conn, empty_schema) == [(1,), (2,), (3,)]


def test_other_lines_block_reverting_005(migrator: Migrator, empty_schema: str, conn: Any) -> None:
    migrator.up()
    conn.execute(
        f"INSERT INTO \"{empty_schema}\".river_migration (line, version) VALUES ('pro', 1)"
    )
    with pytest.raises(MigrationError, match="005"):
        migrator.down(4)
    assert migrator.current_version() == 5  # 008 to 006 were reverted; 005 stayed


def test_newer_version_is_refused(
    migrator: Migrator, driver: PsycopgDriver, empty_schema: str, conn: Any
) -> None:
    migrator.up()
    conn.execute(
        f"INSERT INTO \"{empty_schema}\".river_migration (line, version) VALUES ('main', 99)"
    )
    assert migrator.current_version() == 99
    for call in (migrator.up, migrator.down, migrator.list, lambda: require_current(driver)):
        with pytest.raises(MigrationError, match=r"99.*newer"):
            call()
    assert catalog(conn, empty_schema) == want(LATEST_VERSION)


def test_a_failing_version_rolls_back_alone(
    migrator: Migrator, empty_schema: str, conn: Any
) -> None:
    migrator.up(3)
    # Something in the way of 004's CREATE TABLE river_queue.
    conn.execute(f'CREATE TABLE "{empty_schema}".river_queue (x int)')
    with pytest.raises(MigrationError, match="004"):
        migrator.up()
    assert migrator.current_version() == 3
    assert catalog(conn, empty_schema)["tables"]["river_job"] == want(3)["tables"]["river_job"]
    conn.execute(f'DROP TABLE "{empty_schema}".river_queue')
    assert migrator.up() == [4, 5, 6, 7, 8]


# -- the runtime's check -----------------------------------------------------------------


async def test_require_current(
    migrator: Migrator, driver: PsycopgDriver, pg_url: str, empty_schema: str
) -> None:
    adriver = AsyncPsycopgDriver(pg_url, schema=empty_schema)
    try:
        with pytest.raises(MigrationError, match=r"no river_migration table.*riverboat migrate up"):
            require_current(driver)
        migrator.up(5)
        with pytest.raises(MigrationError, match="version 5; riverboat needs version 6"):
            require_current(driver)
        with pytest.raises(MigrationError, match="version 5"):
            await require_current_async(adriver)
        migrator.up(6)
        assert require_current(driver) == 6
        migrator.up()
        assert require_current(driver) == 8
        assert await require_current_async(adriver) == 8
    finally:
        await adriver.close()


# -- schema names ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", ['x"; DROP TABLE y; --', "has-dash", "1abc", "a" * 47, "a b"])
def test_bad_schema_names_are_refused(pg_url: str, bad: str) -> None:
    with pytest.raises(InvalidInputError):
        PsycopgDriver(pg_url, schema=bad)
    with pytest.raises(InvalidInputError):
        render_sql("postgres", "up", schema=bad)


def test_default_schema_uses_search_path(pg_url: str, empty_schema: str, conn: Any) -> None:
    # No schema configured: objects land in the first schema of search_path, as in River.
    with psycopg.connect(pg_url, autocommit=True, options=f"-c search_path={empty_schema}") as c:
        drv = PsycopgDriver(c)
        assert Migrator(drv).up() == ALL
        assert require_current(drv) == 8
    assert catalog(conn, empty_schema) == want(LATEST_VERSION)


# -- concurrency -----------------------------------------------------------------------


def _up_in_process(url: str, schema: str, barrier: Any, results: Any) -> None:
    drv = PsycopgDriver(url, schema=schema, max_pool_size=1)
    try:
        barrier.wait(timeout=30)
        results.put(("ok", Migrator(drv).up()))
    except Exception as exc:  # reported to the parent, which fails the test
        results.put(("error", repr(exc)))
    finally:
        drv.close()


def test_concurrent_up_from_processes(pg_url: str, empty_schema: str, conn: Any) -> None:
    ctx = multiprocessing.get_context("spawn")
    workers = 4
    barrier = ctx.Barrier(workers)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_up_in_process, args=(pg_url, empty_schema, barrier, results))
        for _ in range(workers)
    ]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    assert [kind for kind, _ in outcomes] == ["ok"] * workers, outcomes
    applied = sorted(v for _, versions in outcomes for v in versions)
    assert applied == ALL  # every version applied once, by someone
    assert rows(conn, empty_schema) == [("main", v) for v in ALL]
    assert catalog(conn, empty_schema) == want(LATEST_VERSION)


# -- the bundled files -----------------------------------------------------------------


def test_bundled_files() -> None:
    bundles = load_bundles("postgres")
    assert sorted(bundles) == ALL
    assert bundles[7].name == "notification outbox sqlite jsonb and sql cleanup"
    assert bundles[8].name == "job id autoincrement"
    for bundle in bundles.values():
        for sql in (bundle.up, bundle.down):
            statements = split_statements(sql, dialect="postgres")
            assert statements
            assert all(s.endswith(";") for s in statements)


def test_split_statements_respects_quotes_and_bodies() -> None:
    sql = """
    -- a comment; with a semicolon
    CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;
    DO $x$ BEGIN PERFORM 1; END $x$;
    SELECT 'a;b', "c;d" /* e; */ ;
    """
    assert split_statements(sql, dialect="postgres") == [
        "-- a comment; with a semicolon\n    "
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;",
        "DO $x$ BEGIN PERFORM 1; END $x$;",
        "SELECT 'a;b', \"c;d\" /* e; */ ;",
    ]
    trigger = "CREATE TRIGGER t AFTER INSERT ON a BEGIN UPDATE b SET c = 1; END; SELECT 1;"
    assert split_statements(trigger, dialect="sqlite") == [
        "CREATE TRIGGER t AFTER INSERT ON a BEGIN UPDATE b SET c = 1; END;",
        "SELECT 1;",
    ]


# -- against River's own files -------------------------------------------------------


def _river_postgres_migrations() -> Path:
    """River 0.51.2's Postgres migration files, from the Go module cache (`go mod download
    github.com/riverqueue/river/riverdriver/riverpgxv5@v0.51.2`)."""
    cache = os.environ.get("GOMODCACHE") or str(Path.home() / "go" / "pkg" / "mod")
    module = "github.com/riverqueue/river/riverdriver/riverpgxv5@v0.51.2"
    return Path(cache) / module / "migration" / "main"


RIVER_POSTGRES = _river_postgres_migrations()


def _river_file(version: int, direction: str, schema: str) -> str:
    (path,) = RIVER_POSTGRES.glob(f"{version:03d}_*.{direction}.sql")
    return path.read_text().replace("/* TEMPLATE: schema */", f"{schema}.")


@pytest.mark.skipif(not RIVER_POSTGRES.is_dir(), reason="River 0.51.2 is not in the module cache")
def test_matches_rivers_own_files_at_every_version(
    migrator: Migrator, empty_schema: str, conn: Any
) -> None:
    """River's SQL and riverboat's, applied side by side, up through every version and
    back down: the same catalog at each step (River 0.51.2 has no migration after 008)."""
    assert sorted(int(p.name[:3]) for p in RIVER_POSTGRES.glob("*.up.sql")) == ALL
    theirs = "r_" + empty_schema
    conn.execute(f'CREATE SCHEMA "{theirs}"')
    try:
        for version in ALL:
            conn.execute(_river_file(version, "up", theirs))
            migrator.up(version)
            assert catalog(conn, empty_schema) == catalog(conn, theirs), f"up to {version}"
        for version in reversed(ALL):
            conn.execute(_river_file(version, "down", theirs))
            migrator.down(version - 1)
            assert catalog(conn, empty_schema) == catalog(conn, theirs), f"down from {version}"
    finally:
        conn.execute(f'DROP SCHEMA "{theirs}" CASCADE')
