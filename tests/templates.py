"""Migrated databases for tests, made fast: the fixtures in tests/conftest.py clone a
template migrated once per session, and hand a clone a test left as it found it to the
next test, emptied (see there); the migration tests call the functions that run every
migration."""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from riverboat.testing import create_migrated_postgres_schema, drop_postgres_schema
from tests.pgserver import find_pg_bin

if TYPE_CHECKING:
    import psycopg

__all__ = ["SchemaCloner", "create_migrated_schema", "drop_schema", "migrate_sqlite_file"]


def _new_schema() -> str:
    return "t_" + uuid.uuid4().hex[:16]


def create_migrated_schema(pg_url: str) -> str:
    """A new schema brought to the latest version by running every migration."""
    return create_migrated_postgres_schema(pg_url, "t_")


def drop_schema(pg_url: str, schema: str) -> None:
    drop_postgres_schema(pg_url, schema)


class SchemaCloner:
    """Makes migrated schemas from the SQL ``pg_dump`` writes for one migrated template
    schema (data included: river_migration's rows). The template's name is random, so
    replacing it in the dump renames exactly the template's objects. Without a usable
    ``pg_dump`` (none installed, or older than an external server) every schema is
    migrated instead."""

    def __init__(self, pg_url: str) -> None:
        self.pg_url = pg_url
        self.template = "tmpl_" + uuid.uuid4().hex
        self.sql: str | None = None
        self.why_not: str | None = None
        self._template_created = False
        self._conn: psycopg.Connection[Any] | None = None
        self._spare: list[str] = []  # schemas given back clean, for the next test
        self._clean: dict[str, tuple[str, str]] = {}
        self.reuse = True
        self._connected_before: set[int] = set()  # other clients' backends at take()
        self.reused = 0
        self.dropped: Counter[str] = Counter()  # why schemas were not reused
        bin_dir = find_pg_bin()
        if bin_dir is None or not (bin_dir / "pg_dump").exists():
            self.why_not = "no pg_dump found"
            return
        import psycopg

        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.template}"')
        self._template_created = True
        from riverboat.drivers.psycopg import PsycopgDriver
        from riverboat.migrations import up_all

        driver = PsycopgDriver(pg_url, schema=self.template, max_pool_size=1)
        try:
            up_all(driver)
        finally:
            driver.close()
        dump = subprocess.run(
            [
                str(bin_dir / "pg_dump"),
                "--schema",
                self.template,
                "--inserts",
                "--no-owner",
                "--no-privileges",
                "--dbname",
                pg_url,
            ],
            capture_output=True,
            text=True,
        )
        if dump.returncode != 0:
            self.why_not = f"pg_dump failed: {dump.stderr.strip()}"
            return
        # Drop psql's meta-commands (``\restrict``): the SQL is sent by psycopg.
        self.sql = "\n".join(line for line in dump.stdout.splitlines() if not line.startswith("\\"))

    def create(self) -> str:
        if self.sql is None:
            return create_migrated_schema(self.pg_url)
        schema = _new_schema()
        self._execute(self.sql.replace(self.template, schema))
        return schema

    def drop(self, schema: str) -> None:
        self._execute(f'DROP SCHEMA "{schema}" CASCADE')

    # -- reuse ------------------------------------------------------------------------
    #
    # Cloning and dropping a schema cost the server ~20 ms of CPU per test (some 30
    # objects made, then dropped, and every backend told of each). A test that leaves
    # the schema's catalog as it found it gets its schema emptied instead (TRUNCATE:
    # new, empty files, as a fresh clone has) and the next test takes it: ~8 ms. What
    # must hold for that, else the schema is dropped as before:
    # - no client that connected during the test is still connected (waiting 0.1 s
    #   for backends on their way out): a client that outlived its test (a pool left
    #   open, a stray process) would otherwise work the next test's jobs;
    # - the catalog's fingerprint (_fingerprint_sql: tables, columns, defaults,
    #   constraints, indexes, triggers, functions, types, sequences' settings, storage
    #   options, grants, and river_migration's rows) is the one taken when the clone
    #   was made;
    # - the reset itself works (a lock held by someone else makes it time out).
    # The reset also gives back what the planner and autovacuum see of a fresh clone:
    # never-analyzed tables (TRUNCATE sets reltuples to -1), no pg_statistic rows, no
    # activity counted (pg_stat_reset_single_table_counters: changes counted across
    # tests would make autovacuum ANALYZE a table in the middle of a later test), and
    # every sequence back at its start. tests/test_templates.py compares a reused
    # schema with a freshly migrated one.

    def take(self) -> str:
        """A schema at River's latest version, as a fresh clone is: one a test gave back
        (``give_back``), else a new clone."""
        self._connected_before = self._other_clients()
        if self._spare:
            return self._spare.pop()
        schema = self.create()
        if self.sql is not None:
            try:
                self._clean[schema] = self._state(schema)
            except Exception:  # reusing is an optimisation: the test still gets its schema
                pass
        return schema

    def give_back(self, schema: str) -> None:
        """Empties ``schema`` for the next test, or drops it when it cannot be reused."""
        clean = self._clean.pop(schema, None)
        if clean is not None and self._reset(schema, clean):
            self._clean[schema] = clean
            self._spare.append(schema)
            self.reused += 1
            return
        self.drop(schema)

    def _state(self, schema: str) -> tuple[str, str]:
        """The schema's catalog fingerprint, and the statement that sets its sequences
        back to their present states."""
        assert self._conn is not None
        row = self._conn.execute(_fingerprint_sql(schema)).fetchone()
        assert row is not None and row[0] is not None
        setvals = []
        for (sequence,) in self._conn.execute(
            f"SELECT relname FROM pg_class WHERE relnamespace = '{schema}'::regnamespace"
            " AND relkind = 'S' ORDER BY relname"
        ).fetchall():
            name = f'"{schema}"."{sequence}"'
            got = self._conn.execute(f"SELECT last_value, is_called FROM {name}").fetchone()
            assert got is not None
            setvals.append(f"SELECT setval('{name}', {int(got[0])}, {bool(got[1])});")
        return str(row[0]), "\n".join(setvals)

    def _reset(self, schema: str, clean: tuple[str, str]) -> bool:
        """Empties ``schema`` as described above; False when it cannot be reused."""
        import psycopg

        conn = self._conn
        if conn is None or conn.closed or not self.reuse:
            self.dropped["no reuse"] += 1
            return False
        fingerprint, setvals = clean
        try:
            row = conn.execute(_reusable_sql(schema)).fetchone()
            assert row is not None
            others, now, dirty, rels = row
            if set(others) - self._connected_before and not self._others_gone():
                self.dropped["other clients connected"] += 1
                return False
            if now != fingerprint:
                self.dropped["catalog changed"] += 1
                return False
            oids = "'{" + ",".join(str(int(oid)) for oid in rels) + "}'::oid[]"
            truncate = ", ".join(f'"{schema}"."{name}"' for name in dirty)
            conn.execute(
                "BEGIN; SET LOCAL lock_timeout = '5s';\n"
                + (f"TRUNCATE {truncate};\n" if truncate else "")
                + f"DELETE FROM pg_statistic WHERE starelid = ANY({oids});\n"
                "DELETE FROM pg_statistic_ext_data WHERE stxoid IN"
                f" (SELECT oid FROM pg_statistic_ext WHERE stxrelid = ANY({oids}));\n"
                f"SELECT pg_stat_reset_single_table_counters(r) FROM unnest({oids}) r;\n"
                + setvals
                + "\nCOMMIT;"
            )
        except psycopg.errors.InsufficientPrivilege:
            self.reuse = False  # not a superuser (RIVERBOAT_TEST_DATABASE_URL): clone each time
            self.dropped["not a superuser"] += 1
            self._rollback()
            return False
        except psycopg.Error as exc:
            self.dropped[type(exc).__name__] += 1
            self._rollback()
            return False
        return True

    def _other_clients(self) -> set[int]:
        """The backends of the server's other clients."""
        if self._conn is None or self._conn.closed or not self.reuse:
            return set()
        row = self._conn.execute(_OTHER_CLIENTS).fetchone()
        return set(row[0]) if row is not None else set()

    def _others_gone(self) -> bool:
        """Whether the clients that connected during the test are gone within 0.1 s: a
        client closed at the end of its test sent its goodbye, but its backend may not
        have exited yet (the server says nothing when it does; asking again is all
        there is)."""
        for _ in range(20):
            time.sleep(0.005)
            if not self._other_clients() - self._connected_before:
                return True
        return False

    def _rollback(self) -> None:
        import psycopg

        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.execute("ROLLBACK")
            except psycopg.Error:
                self._conn.close()

    def _execute(self, sql: str) -> None:
        """On the session's own connection: a new one per call cost two backend starts
        per test. Reconnects once if the connection was lost."""
        import psycopg

        for attempt in (1, 2):
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(
                    self.pg_url, autocommit=True, application_name="riverboat-test-templates"
                )
            try:
                self._conn.execute(sql)
                return
            except psycopg.OperationalError:
                self._conn.close()
                if attempt == 2:
                    raise

    def close(self) -> None:
        for schema in self._spare:
            self._execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        self._spare.clear()
        if self._conn is not None:
            self._conn.close()
        if self._template_created:
            drop_schema(self.pg_url, self.template)


_SCHEMA_NAME = re.compile(r"\A[a-z0-9_]+\Z")


def _fingerprint_sql(schema: str) -> str:
    """One row per catalog object of ``schema`` (see SchemaCloner), hashed: any change a
    test makes to the schema's shape changes it. River_migration keeps its rows (the
    reset's TRUNCATE passes it by): they, and what the planner knows of that table,
    must be as cloned."""
    assert _SCHEMA_NAME.match(schema), schema
    return f"""
WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = '{schema}'),
rels AS (SELECT c.* FROM pg_class c, ns WHERE c.relnamespace = ns.oid)
SELECT md5(string_agg(x, E'\\n' ORDER BY x)) FROM (
    SELECT concat_ws(' ', 'n', n.nspname, n.nspowner, n.nspacl::text) AS x
      FROM pg_namespace n, ns WHERE n.oid = ns.oid
    UNION ALL
    SELECT concat_ws(' ', 'c', relname, relkind, relpersistence, relnatts, relchecks,
                     relhastriggers, relrowsecurity, relforcerowsecurity, relreplident,
                     relispartition, reloptions::text, relacl::text, relowner, relam)
      FROM rels
    UNION ALL
    SELECT concat_ws(' ', 'a', c.relname, a.attnum, a.attname,
                     format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef,
                     a.attisdropped, a.attidentity, a.attgenerated, a.attstattarget,
                     a.attcollation, a.attstorage, a.attcompression, a.attoptions::text,
                     a.attacl::text)
      FROM pg_attribute a JOIN rels c ON c.oid = a.attrelid WHERE a.attnum > 0
    UNION ALL
    SELECT concat_ws(' ', 'd', c.relname, d.adnum, pg_get_expr(d.adbin, d.adrelid))
      FROM pg_attrdef d JOIN rels c ON c.oid = d.adrelid
    UNION ALL
    SELECT concat_ws(' ', 'k', k.conname, k.conrelid::regclass, k.contypid::regtype,
                     k.convalidated, k.condeferrable, k.condeferred,
                     pg_get_constraintdef(k.oid))
      FROM pg_constraint k, ns WHERE k.connamespace = ns.oid
    UNION ALL
    SELECT concat_ws(' ', 'i', pg_get_indexdef(i.indexrelid), i.indisvalid, i.indisready,
                     i.indislive, i.indisclustered, i.indisreplident)
      FROM pg_index i JOIN rels c ON c.oid = i.indexrelid
    UNION ALL
    SELECT concat_ws(' ', 't', c.relname, t.tgname, t.tgisinternal, t.tgenabled,
                     pg_get_triggerdef(t.oid))
      FROM pg_trigger t JOIN rels c ON c.oid = t.tgrelid
    UNION ALL
    SELECT concat_ws(' ', 'w', r.rulename, c.relname, r.ev_type, r.is_instead, r.ev_enabled,
                     md5(r.ev_action::text))
      FROM pg_rewrite r JOIN rels c ON c.oid = r.ev_class
    UNION ALL
    SELECT concat_ws(' ', 'r', p.polname, c.relname, p.polcmd, p.polpermissive,
                     pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid))
      FROM pg_policy p JOIN rels c ON c.oid = p.polrelid
    UNION ALL
    SELECT concat_ws(' ', 'p', p.oid::regprocedure, p.prokind, p.prorettype::regtype,
                     p.proretset, p.provolatile, p.prosecdef, p.proleakproof, p.proisstrict,
                     p.proparallel, p.procost, p.prorows, p.proconfig::text, p.proacl::text,
                     p.prolang, p.proowner, md5(p.prosrc))
      FROM pg_proc p, ns WHERE p.pronamespace = ns.oid
    UNION ALL
    SELECT concat_ws(' ', 'y', t.typname, t.typtype, t.typnotnull, t.typbasetype::regtype,
                     t.typdefault, t.typacl::text)
      FROM pg_type t, ns WHERE t.typnamespace = ns.oid
    UNION ALL
    SELECT concat_ws(' ', 'e', e.enumtypid::regtype, e.enumsortorder, e.enumlabel)
      FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid, ns WHERE t.typnamespace = ns.oid
    UNION ALL
    SELECT concat_ws(' ', 's', c.relname, s.seqtypid, s.seqstart, s.seqincrement, s.seqmax,
                     s.seqmin, s.seqcache, s.seqcycle)
      FROM pg_sequence s JOIN rels c ON c.oid = s.seqrelid
    UNION ALL
    SELECT concat_ws(' ', 'x', x.stxname, x.stxrelid::regclass, x.stxkeys::text,
                     x.stxkind::text)
      FROM pg_statistic_ext x, ns WHERE x.stxnamespace = ns.oid
    UNION ALL
    SELECT concat_ws(' ', 'o', o.oid::regoperator, o.oprcode)
      FROM pg_operator o, ns WHERE o.oprnamespace = ns.oid
    UNION ALL
    SELECT concat_ws(' ', 'l', l.collname) FROM pg_collation l, ns WHERE l.collnamespace = ns.oid
    UNION ALL
    SELECT concat_ws(' ', 'g', g.conname) FROM pg_conversion g, ns WHERE g.connamespace = ns.oid
    UNION ALL
    SELECT concat_ws(' ', 'z', relpages, reltuples, relallvisible, pg_relation_size(oid))
      FROM rels WHERE relname = 'river_migration' AND relkind = 'r'
    UNION ALL
    SELECT concat_ws(' ', 'm', m::text) FROM "{schema}".river_migration m
) q
"""


_OTHER_CLIENTS = """SELECT ARRAY(SELECT pid FROM pg_stat_activity
    WHERE backend_type = 'client backend' AND pid <> pg_backend_pid())"""


def _reusable_sql(schema: str) -> str:
    """Whether a schema given back can be reused (other clients connected to the server,
    its catalog's fingerprint) and what its reset touches: the tables with rows, pages
    or statistics (river_migration aside), and every relation of the schema."""
    return f"""
SELECT ({_OTHER_CLIENTS}),
       ({_fingerprint_sql(schema)}),
       ARRAY(SELECT c.relname::text FROM pg_class c
              WHERE c.relnamespace = '{schema}'::regnamespace AND c.relkind IN ('r', 'p')
                AND c.relname <> 'river_migration'
                AND (pg_relation_size(c.oid) > 0 OR c.reltuples >= 0 OR c.relpages > 0
                     OR c.relallvisible > 0)
              ORDER BY c.relname),
       ARRAY(SELECT c.oid FROM pg_class c WHERE c.relnamespace = '{schema}'::regnamespace)
"""


def migrate_sqlite_file(path: Path) -> str:
    """Runs every migration on the SQLite file ``path``; returns its URL."""
    from riverboat.drivers.sqlite import SqliteDriver
    from riverboat.migrations import up_all

    url = f"sqlite:///{path}"
    driver = SqliteDriver(url)
    try:
        up_all(driver)
    finally:
        driver.close()
    return url
