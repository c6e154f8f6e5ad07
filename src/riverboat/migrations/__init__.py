"""Schema migrations: River's line ``main`` (versions 001..008) and riverboat's own line
``riverboat`` (its ``riverboat_*`` tables, versions from 001).

The ``main`` SQL produces exactly the schema River's own migrations produce, and applied
versions are recorded in ``river_migration`` the way River's migrator records them, so
either project can migrate a database the other created. riverboat's line is recorded
in the same table under ``line = 'riverboat'`` (River keys it by line and version since
005 for this purpose), which River's migrator ignores::

    from riverboat.drivers.psycopg import PsycopgDriver
    from riverboat.migrations import Migrator, up_all

    driver = PsycopgDriver("postgresql://localhost/app", schema="jobs")
    up_all(driver)  # main, then riverboat
    Migrator(driver, line="riverboat").current_version()

A new riverboat version needs only its two SQL files per dialect, under
``<dialect>/riverboat/NNN_name.{up,down}.sql``.

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
from riverboat.migrations._queries import LINE, LINES, QUERIES

__all__ = [
    "LATEST_VERSION",
    "LINES",
    "MIN_RUNTIME_VERSION",
    "Direction",
    "MigrationInfo",
    "Migrator",
    "applied_version",
    "applied_version_async",
    "lost_indexes_advice",
    "lost_indexes_async",
    "render_sql",
    "require_current",
    "require_current_async",
    "up_all",
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

# SQLite indexes on river_job that a line's version creates. River's SQLite 008 rebuilds
# river_job, and applied after that version it drops them with the old table
# (docs/operations.md): ``Migrator.lost_indexes`` names the ones gone.
_SQLITE_INDEXES: dict[tuple[str, int], tuple[str, ...]] = {
    ("riverboat", 6): ("riverboat_job_workflow_id_idx", "riverboat_job_workflow_task_idx"),
}


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

    def versions(self, has_line: bool, line: str = LINE) -> Statement:
        return self.must("versions", line=line) if has_line else self.must("versions_legacy")

    def record(self, version: int, direction: Direction, line: str = LINE) -> Statement | None:
        """The bookkeeping for one version, chosen by version exactly as River does for
        ``main``; riverboat's lines exist only with the ``line`` column."""
        if line != LINE:
            name = "insert" if direction == "up" else "delete"
            return self.must(name, line=line, version=version)
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


def _read_state(queries: _Queries, executor: Executor, line: str = LINE) -> _State:
    exists, has_line = queries.decode(executor.fetch(queries.table_state()))
    if not exists:
        return _State(False, False, {})
    if line != LINE and not has_line:
        # Before River's 005 no other line can have been recorded.
        return _State(True, False, {})
    rows = executor.fetch(queries.versions(has_line, line))
    return _State(True, has_line, _decode_versions(rows))


def _indexes_of(line: str, applied: Iterable[int]) -> builtins.list[tuple[int, str]]:
    """``(version, index)`` for the SQLite indexes that the ``applied`` versions of
    ``line`` created."""
    done = set(applied)
    return [
        (version, name)
        for (index_line, version), names in _SQLITE_INDEXES.items()
        if index_line == line and version in done
        for name in names
    ]


def _sqlite_indexes(schema: str | None) -> Statement:
    master = f'"{schema}".sqlite_master' if schema else "sqlite_master"
    return Statement(Query("lost_indexes", f"SELECT name FROM {master} WHERE type = 'index'"), {})


def _index_names(rows: Iterable[Sequence[Any]]) -> set[str]:
    return {str(row[0]) for row in rows}


def lost_indexes_advice(line: str, lost: Sequence[tuple[int, str]]) -> tuple[str, str]:
    """What ``lost`` (``(version, index)``, as :meth:`Migrator.lost_indexes` names them)
    means and what puts it right, for ``migrate validate`` and a runtime's start:
    ``("<line> line 006: indexes missing (...), dropped when ...", "run ... then ...")``."""
    version = min(v for v, _ in lost)
    what = (
        f"{line} line {version:03d}: indexes missing ({', '.join(name for _, name in lost)}), "
        "dropped when River's migration rebuilt river_job"
    )
    fix = (
        f"run `riverboat migrate down --line {line} --target-version {version - 1}`, "
        "then `riverboat migrate up`"
    )
    return what, fix


async def lost_indexes_async(driver: AsyncDriver) -> builtins.list[tuple[str, int, str]]:
    """``(line, version, index)`` for each SQLite index an applied riverboat version
    created that is gone (:meth:`Migrator.lost_indexes` for every line but River's);
    empty on Postgres. Three short reads, at a runtime's start."""
    if str(driver.dialect.name) != "sqlite":
        return []
    queries = _Queries("sqlite", driver.dialect.schema)
    exists, has_line = queries.decode(await driver.fetch(queries.table_state()))
    if not exists or not has_line:
        return []
    wanted = [
        (line, version, name)
        for line in LINES[1:]
        for version, name in _indexes_of(
            line, _decode_versions(await driver.fetch(queries.versions(True, line)))
        )
    ]
    if not wanted:
        return []
    present = _index_names(await driver.fetch(_sqlite_indexes(driver.dialect.schema)))
    return [(line, version, name) for line, version, name in wanted if name not in present]


def _line_title(line: str) -> str:
    return "River" if line == LINE else f"riverboat {line!r} line"


def _newer_error(version: int, latest: int, where: str, line: str = LINE) -> MigrationError:
    return MigrationError(
        f"the {where} is at {_line_title(line)} migration version {version}, newer than the "
        f"latest riverboat knows ({latest}); upgrade riverboat"
    )


def _check_line(line: str) -> str:
    if line not in LINES:
        known = ", ".join(repr(name) for name in LINES)
        raise InvalidInputError("line", f"unknown migration line {line!r}; known: {known}")
    return line


def render_sql(
    dialect: str,
    direction: Direction,
    versions: Iterable[int] | None = None,
    *,
    schema: str | None = None,
    line: str = LINE,
) -> str:
    """The SQL of the given migration versions (all by default) of ``line`` for ``dialect``.

    Up migrations come in ascending order, down migrations descending, each preceded
    by a comment naming it. This is only the schema change: running it by hand does
    not record anything in ``river_migration``.
    """
    if direction not in ("up", "down"):
        raise InvalidInputError("direction", f"must be 'up' or 'down', not {direction!r}")
    schema = validate_schema_name(schema)
    bundles = load_bundles(dialect, _check_line(line))
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
        title = "River main" if line == LINE else f"{line} line"
        header = f"-- {title} migration {version:03d} {bundle.name} [{direction}]"
        parts.append(f"{header}\n{render_schema(sql, schema).strip()}\n")
    return "\n".join(parts)


class Migrator:
    """Runs one migration line (River's ``main`` by default, or ``"riverboat"``) against
    one sync riverboat driver; :func:`up_all` applies every line.

    The driver's dialect decides which bundled files are used (``postgres`` or
    ``sqlite``) and its schema where the tables go. Migrating never creates the
    schema itself. The ``riverboat`` line needs ``river_migration.line``, i.e. River's
    ``main`` at version 005 or later.
    """

    def __init__(self, driver: Driver, line: str = LINE) -> None:
        self._driver = driver
        self._line = _check_line(line)
        self._dialect = str(driver.dialect.name)
        self._schema: str | None = driver.dialect.schema
        self._bundles: Mapping[int, Bundle] = load_bundles(self._dialect, line)
        self._queries = _Queries(self._dialect, self._schema)
        self._where = _where(self._dialect, self._schema)

    @property
    def line(self) -> str:
        """The migration line this migrator runs."""
        return self._line

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
        return _read_state(self._queries, self._driver, self._line).version

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
        planned = self._select(self._known_state(self._driver), direction, target, max_steps)
        # An empty plan (a target already reached, no steps) reverts nothing: a no-op.
        if (
            direction == "down"
            and self._line == LINE
            and planned
            and planned[-1] <= _LINE_COLUMN_ADDED
        ):
            self._refuse_below_line_column()
        return planned

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
        removes the line entirely (for ``main``: River's schema, ``river_migration``
        included, which River's 005 refuses while another line is applied). A positive
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

    def lost_indexes(self) -> builtins.list[tuple[int, str]]:
        """``(version, index)`` for each SQLite index an applied version of this line
        created that is gone (River's 008 rebuilt ``river_job`` after it); empty on
        Postgres. Reverting that version and applying it again puts them back."""
        if self._dialect != "sqlite":
            return []
        wanted = _indexes_of(self._line, self._known_state(self._driver).applied)
        if not wanted:
            return []
        present = _index_names(self._driver.fetch(_sqlite_indexes(self._schema)))
        return [(version, name) for version, name in wanted if name not in present]

    def get_sql(self, direction: Direction, version_range: Iterable[int] | None = None) -> str:
        """The SQL for ``version_range`` (all versions by default) in ``direction``,
        rendered for this driver's dialect and schema; see :func:`render_sql`."""
        return render_sql(
            self._dialect, direction, version_range, schema=self._schema, line=self._line
        )

    def check_target(self, target_version: int | None, direction: Direction) -> None:
        """Refuse a ``target_version`` that is not a version of this line (raises
        :class:`~riverboat.errors.InvalidInputError`), without touching the database."""
        self._check_target(target_version, direction)

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

    def _refuse_below_line_column(self) -> None:
        # River's 005 down can't keep other lines' rows; refuse before reverting anything
        # rather than stop half way down.
        others = [line for line in LINES if line != LINE and applied_version(self._driver, line)]
        if others:
            raise MigrationError(
                f"cannot revert River's main line below version {_LINE_COLUMN_ADDED} in the "
                f"{self._where} while the {', '.join(others)} line is applied: revert it first "
                f"(`riverboat migrate down --line {others[0]} --target-version 0`)"
            )

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
                if not state.has_line and self._line != LINE:
                    raise MigrationError(
                        f"the {_line_title(self._line)} needs River's main line at version "
                        f"{_LINE_COLUMN_ADDED} or later in the {self._where}: run "
                        "`riverboat migrate up --line main` first"
                    )
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
        state = _read_state(self._queries, executor, self._line)
        if state.version > self.latest_version:
            raise _newer_error(state.version, self.latest_version, self._where, self._line)
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
        prefix = "migration" if self._line == LINE else f"migration_{self._line}"
        name = f"{prefix}_{version:03d}_{direction}"
        try:
            for text in split_statements(sql, dialect=self._dialect):
                tx.execute(Statement(RawQuery(name, text), {}))
            record = self._queries.record(version, direction, self._line)
            if record is not None:
                tx.execute(record)
        except DriverError as exc:
            raise MigrationError(
                f"error applying {_line_title(self._line)} migration {version:03d} "
                f"({bundle.name}) [{direction}] "
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


def up_all(driver: Driver) -> dict[str, builtins.list[int]]:
    """Apply every missing version of every line in :data:`LINES` order (River's ``main``
    first, then riverboat's); returns the versions applied, by line."""
    return {line: Migrator(driver, line).up() for line in LINES}


def applied_version(driver: Driver, line: str) -> int:
    """The highest applied version of ``line``, 0 when none is (or no
    ``river_migration`` exists)."""
    queries = _Queries(str(driver.dialect.name), driver.dialect.schema)
    return _read_state(queries, driver, _check_line(line)).version


async def applied_version_async(driver: AsyncDriver, line: str) -> int:
    """:func:`applied_version` for an async driver."""
    queries = _Queries(str(driver.dialect.name), driver.dialect.schema)
    exists, has_line = queries.decode(await driver.fetch(queries.table_state()))
    if not exists or (line != LINE and not has_line):
        return 0
    rows = await driver.fetch(queries.versions(has_line, _check_line(line)))
    return max(_decode_versions(rows), default=0)
