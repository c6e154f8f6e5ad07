"""River-compatible schema migrations: the migration line ``main``, versions 001..008.

The SQL produces exactly the schema River's own migrations produce, and applied
versions are recorded in ``river_migration`` the way River's migrator records them, so
either project can migrate a database the other created::

    from riverboat.drivers.psycopg import PsycopgDriver
    from riverboat.migrations import Migrator

    driver = PsycopgDriver("postgresql://localhost/app", schema="jobs")
    Migrator(driver).up()

Each version runs in a transaction of its own together with its ``river_migration``
row. On Postgres every such transaction first takes the advisory lock
:data:`~riverboat.migrations._queries.PG_LOCK_KEY` and then re-reads the applied
versions, so concurrent migrators neither fail nor apply a version twice; on SQLite the
driver's ``transaction()`` (``BEGIN IMMEDIATE``) gives the same exclusivity.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from riverboat._sql import Query, Statement, render_schema
from riverboat.dialect.base import validate_schema_name
from riverboat.drivers.base import AsyncDriver, Driver, Executor
from riverboat.errors import DriverError, InvalidInputError, MigrationError
from riverboat.migrations._files import Bundle, RawQuery, load_bundles, split_statements
from riverboat.migrations._queries import LINE, QUERIES

__all__ = [
    "LATEST_VERSION",
    "MIN_RUNTIME_VERSION",
    "Direction",
    "MigrationInfo",
    "Migrator",
    "render_sql",
    "require_current",
    "require_current_async",
]

LATEST_VERSION = 8
"""The newest version of River's ``main`` line that riverboat knows."""

MIN_RUNTIME_VERSION = 6
"""The oldest schema the runtime works with: bulk unique inserts need 006."""

# River's migrator switches between queries with and without river_migration.line at
# these versions: 005 adds the column, and 001's down drops the table outright.
_LINE_COLUMN_ADDED = 5
_TABLE_ADDED = 1

Direction = Literal["up", "down"]

_log = logging.getLogger("riverboat.migrations")


@dataclass(frozen=True, slots=True)
class MigrationInfo:
    """One known migration version and whether the database has it."""

    version: int
    name: str
    applied: bool
    applied_at: datetime | None


@dataclass(frozen=True, slots=True)
class _State:
    table_exists: bool
    has_line: bool
    applied: dict[int, datetime | None]

    @property
    def version(self) -> int:
        return max(self.applied, default=0)


def _as_datetime(value: object) -> datetime | None:
    # SQLite hands timestamps back as text in UTC ("YYYY-MM-DD HH:MM:SS[.sss]").
    if value is None:
        return None
    if isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _where(dialect: str, schema: str | None) -> str:
    return f"{dialect} schema {schema!r}" if schema else f"{dialect} default schema"


class _Queries:
    """The dialect's river_migration statements, rendered for one schema."""

    def __init__(self, dialect: str, schema: str | None) -> None:
        texts = QUERIES.get(dialect)
        if texts is None:
            raise MigrationError(f"riverboat has no migrations for the {dialect!r} dialect")
        self.dialect = dialect
        self.schema = schema
        self._q = {
            name: Query(f"river_migration_{name}", render_schema(text, schema))
            for name, text in texts.items()
            if text is not None
        }

    def stmt(self, name: str, **params: Any) -> Statement | None:
        query = self._q.get(name)
        return None if query is None else Statement(query, params)

    def must(self, name: str, **params: Any) -> Statement:
        stmt = self.stmt(name, **params)
        assert stmt is not None, name
        return stmt

    def table_state(self) -> Statement:
        # Only SQLite's pragma_table_info needs the schema as a value.
        if self.dialect == "sqlite":
            return self.must("table_state", schema_name=self.schema or "main")
        return self.must("table_state")

    def versions(self, has_line: bool) -> Statement:
        return self.must("versions", line=LINE) if has_line else self.must("versions_legacy")

    def record(self, version: int, direction: Direction) -> Statement | None:
        """The bookkeeping for one version, chosen by version exactly as River does."""
        if direction == "up":
            if version < _LINE_COLUMN_ADDED:
                return self.must("insert_legacy", version=version)
            return self.must("insert", line=LINE, version=version)
        if version <= _TABLE_ADDED:
            return None
        if version <= _LINE_COLUMN_ADDED:
            return self.must("delete_legacy", version=version)
        return self.must("delete", line=LINE, version=version)

    def decode(self, table_rows: Sequence[Sequence[Any]]) -> tuple[bool, bool]:
        row = table_rows[0]
        return bool(row[0]), bool(row[1])


def _decode_versions(rows: Sequence[Sequence[Any]]) -> dict[int, datetime | None]:
    return {int(row[0]): _as_datetime(row[1]) for row in rows}


def _read_state(queries: _Queries, executor: Executor) -> _State:
    exists, has_line = queries.decode(executor.fetch(queries.table_state()))
    if not exists:
        return _State(False, False, {})
    rows = executor.fetch(queries.versions(has_line))
    return _State(True, has_line, _decode_versions(rows))


def _newer_error(version: int, latest: int, where: str) -> MigrationError:
    return MigrationError(
        f"the {where} is at River migration version {version}, newer than the latest "
        f"riverboat knows ({latest}); upgrade riverboat"
    )


def render_sql(
    dialect: str,
    direction: Direction,
    versions: Iterable[int] | None = None,
    *,
    schema: str | None = None,
) -> str:
    """The SQL of the given migration versions (all by default) for ``dialect``.

    Up migrations come in ascending order, down migrations descending, each preceded
    by a comment naming it. This is only the schema change: running it by hand does
    not record anything in ``river_migration``.
    """
    if direction not in ("up", "down"):
        raise InvalidInputError("direction", f"must be 'up' or 'down', not {direction!r}")
    schema = validate_schema_name(schema)
    bundles = load_bundles(dialect)
    chosen = set(bundles) if versions is None else set(versions)
    unknown = sorted(v for v in chosen if v not in bundles)
    if unknown:
        raise InvalidInputError(
            "versions",
            f"unknown migration version(s) {unknown}; known: 1..{len(bundles)}",
        )
    parts = []
    for version in sorted(chosen, reverse=direction == "down"):
        bundle = bundles[version]
        sql = bundle.up if direction == "up" else bundle.down
        header = f"-- River main migration {version:03d} {bundle.name} [{direction}]"
        parts.append(f"{header}\n{render_schema(sql, schema).strip()}\n")
    return "\n".join(parts)


class Migrator:
    """Runs River's ``main`` migration line against one sync riverboat driver.

    The driver's dialect decides which bundled files are used (``postgres`` or
    ``sqlite``) and its schema where the tables go. Migrating never creates the
    schema itself.
    """

    def __init__(self, driver: Driver) -> None:
        self._driver = driver
        self._dialect = str(driver.dialect.name)
        self._schema: str | None = driver.dialect.schema
        self._bundles: Mapping[int, Bundle] = load_bundles(self._dialect)
        self._queries = _Queries(self._dialect, self._schema)
        self._where = _where(self._dialect, self._schema)

    @property
    def latest_version(self) -> int:
        """The newest version bundled for this driver's dialect."""
        return max(self._bundles)

    @property
    def names(self) -> dict[int, str]:
        """River's name of every known version ("initial schema" for 002)."""
        return {v: b.name for v, b in sorted(self._bundles.items())}

    def current_version(self) -> int:
        """The highest applied version, 0 when ``river_migration`` does not exist.

        A version newer than riverboat knows is returned as is, not refused.
        """
        return _read_state(self._queries, self._driver).version

    def list(self) -> list[MigrationInfo]:
        """Every known version, in order, with whether and when it was applied."""
        state = self._known_state(self._driver)
        return [
            MigrationInfo(v, b.name, v in state.applied, state.applied.get(v))
            for v, b in sorted(self._bundles.items())
        ]

    def plan(
        self,
        direction: Direction,
        target_version: int | None = None,
        *,
        max_steps: int | None = None,
    ) -> builtins.list[int]:
        """The versions :meth:`up` or :meth:`down` would apply now, in order; nothing is
        changed (River's ``--dry-run``).

        Chosen as River's migrator chooses them: the candidates (missing versions
        ascending, or applied ones newest first) are first cut to ``max_steps``
        (a negative number means none; ``down`` without a target takes one step),
        then to ``target_version``. A target already reached is a no-op; a target
        the cut left out is refused, as River does.
        """
        if direction not in ("up", "down"):
            raise InvalidInputError("direction", f"must be 'up' or 'down', not {direction!r}")
        target = self._check_target(target_version, direction)
        self._check_max_steps(max_steps)
        return self._select(self._known_state(self._driver), direction, target, max_steps)

    def up(
        self, target_version: int | None = None, *, max_steps: int | None = None
    ) -> builtins.list[int]:
        """Apply every missing version up to ``target_version`` (default: the latest),
        at most ``max_steps`` of them (default: no limit).

        Returns the versions this call applied, ascending; a version another process
        applied meanwhile is skipped, not repeated. A target already applied is a no-op.
        """
        return self._run("up", target_version, max_steps)

    def down(
        self, target_version: int | None = None, *, max_steps: int | None = None
    ) -> builtins.list[int]:
        """Revert migrations, River's CLI way.

        Without ``target_version`` only the newest applied version is reverted (or
        ``max_steps`` of them). With it, every applied version above it is, newest
        first, leaving the database at ``target_version``; ``0`` (or River's ``-1``)
        removes River's schema entirely, ``river_migration`` included. A positive
        target must be applied already. Returns the versions reverted, in the order
        they were.
        """
        return self._run("down", target_version, max_steps)

    def validate(self, target_version: int | None = None) -> builtins.list[int]:
        """The known versions up to ``target_version`` (default: the latest) that are
        not applied, ascending: empty when the schema is current (River's
        ``river validate``). A schema newer than riverboat knows is refused.
        """
        target = self._check_target(target_version, "up")
        state = self._known_state(self._driver)
        limit = self.latest_version if target is None else target
        return [v for v in sorted(self._bundles) if v <= limit and v not in state.applied]

    def get_sql(self, direction: Direction, version_range: Iterable[int] | None = None) -> str:
        """The SQL for ``version_range`` (all versions by default) in ``direction``,
        rendered for this driver's dialect and schema; see :func:`render_sql`."""
        return render_sql(self._dialect, direction, version_range, schema=self._schema)

    # -- internals -------------------------------------------------------------------

    def _check_target(self, target: int | None, direction: Direction) -> int | None:
        if target is None:
            return None
        if isinstance(target, bool) or not isinstance(target, int):
            raise InvalidInputError("target_version", f"must be an int, not {target!r}")
        latest = self.latest_version
        if direction == "down" and target == -1:
            return 0
        lowest = 0 if direction == "down" else 1
        if not lowest <= target <= latest:
            raise InvalidInputError(
                "target_version",
                f"{target} is not a valid migration version for {direction} "
                f"(expected {lowest}..{latest})",
            )
        return target

    @staticmethod
    def _check_max_steps(max_steps: int | None) -> None:
        if max_steps is None:
            return
        if isinstance(max_steps, bool) or not isinstance(max_steps, int):
            raise InvalidInputError("max_steps", f"must be an int, not {max_steps!r}")

    def _select(
        self, state: _State, direction: Direction, target: int | None, max_steps: int | None
    ) -> builtins.list[int]:
        if direction == "up":
            candidates = [v for v in sorted(self._bundles) if v not in state.applied]
        else:
            if target:
                if target not in state.applied:
                    raise MigrationError(
                        f"cannot migrate down to version {target}: it is not applied to the "
                        f"{self._where} (current version {state.version})"
                    )
            candidates = sorted(state.applied, reverse=True)
        steps = max_steps if max_steps else None
        if steps is None and direction == "down" and target is None:
            steps = 1
        if steps is not None:
            candidates = candidates[: max(steps, 0)]
        if not target:
            return candidates
        if direction == "up" and target in state.applied:
            return []  # already there: River 0.39's idempotent no-op
        if target not in candidates:
            raise MigrationError(
                f"version {target} is not in the target list of migrations to apply "
                f"({max_steps} step(s) from version {state.version}); raise --max-steps"
            )
        chosen = candidates[: candidates.index(target) + 1]
        return chosen[:-1] if direction == "down" else chosen

    def _run(
        self, direction: Direction, target_version: int | None, max_steps: int | None
    ) -> builtins.list[int]:
        planned = self.plan(direction, target_version, max_steps=max_steps)
        done: builtins.list[int] = []
        for version in planned:
            with self._driver.transaction() as tx:
                state = self._locked_state(tx)
                # Another migrator may have got here first; its work is not repeated.
                if (version in state.applied) == (direction == "up"):
                    continue
                if direction == "down" and version != state.version:
                    raise MigrationError(
                        f"cannot revert migration {version:03d} from the {self._where}: "
                        f"version {state.version} was applied meanwhile"
                    )
                self._apply(tx, version, direction)
            _log.info("applied migration %03d [%s] to the %s", version, direction, self._where)
            done.append(version)
        return done

    def _known_state(self, executor: Executor) -> _State:
        state = _read_state(self._queries, executor)
        if state.version > self.latest_version:
            raise _newer_error(state.version, self.latest_version, self._where)
        return state

    def _locked_state(self, tx: Executor) -> _State:
        lock = self._queries.stmt("lock")
        if lock is not None:
            tx.fetch(lock)
        # Read only after the lock: whatever a concurrent migrator committed meanwhile
        # is visible now, so its versions are not applied again.
        return self._known_state(tx)

    def _apply(self, tx: Executor, version: int, direction: Direction) -> None:
        bundle = self._bundles[version]
        sql = render_schema(bundle.up if direction == "up" else bundle.down, self._schema)
        name = f"migration_{version:03d}_{direction}"
        try:
            for text in split_statements(sql, dialect=self._dialect):
                tx.execute(Statement(RawQuery(name, text), {}))
            record = self._queries.record(version, direction)
            if record is not None:
                tx.execute(record)
        except DriverError as exc:
            raise MigrationError(
                f"error applying migration {version:03d} ({bundle.name}) [{direction}] "
                f"to the {self._where}: {exc}"
            ) from exc


def _runtime_check(state: _State, latest: int, where: str) -> int:
    if state.version > latest:
        raise _newer_error(state.version, latest, where)
    if state.version < MIN_RUNTIME_VERSION:
        found = (
            "has no river_migration table"
            if not state.table_exists
            else f"is at River migration version {state.version}"
        )
        raise MigrationError(
            f"the {where} {found}; riverboat needs version {MIN_RUNTIME_VERSION} or later "
            f"(latest {latest}): run `riverboat migrate up` (or River's `river migrate-up`)"
        )
    return state.version


def require_current(driver: Driver) -> int:
    """Check that the driver's schema is migrated far enough for the runtime.

    Returns the current version; raises :class:`~riverboat.errors.MigrationError`,
    saying what to run, when it is below :data:`MIN_RUNTIME_VERSION` or newer than
    riverboat knows.
    """
    dialect = str(driver.dialect.name)
    queries = _Queries(dialect, driver.dialect.schema)
    state = _read_state(queries, driver)
    return _runtime_check(state, LATEST_VERSION, _where(dialect, driver.dialect.schema))


async def require_current_async(driver: AsyncDriver) -> int:
    """:func:`require_current` for an async driver."""
    dialect = str(driver.dialect.name)
    queries = _Queries(dialect, driver.dialect.schema)
    exists, has_line = queries.decode(await driver.fetch(queries.table_state()))
    applied: dict[int, datetime | None] = {}
    if exists:
        applied = _decode_versions(await driver.fetch(queries.versions(has_line)))
    state = _State(exists, has_line, applied)
    return _runtime_check(state, LATEST_VERSION, _where(dialect, driver.dialect.schema))
