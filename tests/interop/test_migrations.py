"""Migrations both ways: River's migrator and riverboat's agree about ``river_migration``
on Postgres and SQLite, whichever side migrated."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from riverboat import Client, Job, QueueConfig, Workers
from riverboat._url import driver_from_url
from riverboat.migrations import Migrator
from riverboat.migrations._files import load_bundles
from tests.interop.river_go import GoError, RiverGo, Target

ALL = list(range(1, 9))
RIVERBOAT_VERSIONS = sorted(load_bundles("postgres", "riverboat"))


@dataclass
class Touch:
    kind: ClassVar[str] = "interop_touch"
    n: int


def _migrator(target: Target) -> tuple[Any, Migrator]:
    driver = driver_from_url(target.url, schema=target.schema)
    return driver, Migrator(driver)


def test_river_migrates_and_riverboat_lists_validates_and_works(
    river_go_binary: Path, empty_target: Target
) -> None:
    river = RiverGo(river_go_binary, empty_target)
    assert river.migrate("up") == {"direction": "up", "versions": ALL}

    driver, migrator = _migrator(empty_target)
    try:
        assert [(m.version, m.applied) for m in migrator.list()] == [(v, True) for v in ALL]
        assert migrator.current_version() == 8
        assert migrator.validate() == []
        assert migrator.up() == []  # nothing left to do
    finally:
        driver.close()

    # The CLI as an operator would run it against River's migrations.
    flags = ["--database-url", empty_target.url]
    if empty_target.schema:
        flags += ["--schema", empty_target.schema]
    validate = subprocess.run(
        [sys.executable, "-m", "riverboat.cli", "migrate", "validate", "--line", "main", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert validate.returncode == 0, validate.stdout + validate.stderr
    # Without --line riverboat's own line is checked too: River didn't apply it.
    both = subprocess.run(
        [sys.executable, "-m", "riverboat.cli", "migrate", "validate", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert both.returncode == 1 and "riverboat 001" in both.stdout, both.stdout + both.stderr

    workers = Workers()
    seen: list[int] = []

    @workers.register(Touch)
    def touch(job: Job[Touch]) -> None:
        seen.append(job.args.n)

    with Client(
        empty_target.url,
        schema=empty_target.schema,
        queues={"default": QueueConfig()},
        workers=workers,
    ) as client:
        client.insert_many([Touch(n=i) for i in range(3)])
        client.run_until_idle()
    assert sorted(seen) == [0, 1, 2]


def test_riverboat_migrates_and_river_lists_validates_and_steps(
    river_go_binary: Path, empty_target: Target
) -> None:
    driver, migrator = _migrator(empty_target)
    try:
        assert migrator.up() == ALL
    finally:
        driver.close()
    river = RiverGo(river_go_binary, empty_target)
    assert river.migrate("list") == {"all": ALL, "existing": ALL}
    assert river.migrate("validate") == {"ok": True, "messages": []}
    assert river.migrate("up") == {"direction": "up", "versions": []}

    # River steps down one version, then to a target; riverboat sees each step.
    assert river.migrate("down", max_steps=1) == {"direction": "down", "versions": [8]}
    driver, migrator = _migrator(empty_target)
    try:
        assert migrator.current_version() == 7
        assert migrator.validate() == [8]
    finally:
        driver.close()
    validated = river.migrate("validate")
    assert validated["ok"] is False and validated["messages"]

    assert river.migrate("down", target_version=5) == {"direction": "down", "versions": [7, 6]}
    driver, migrator = _migrator(empty_target)
    try:
        assert [m.version for m in migrator.list() if m.applied] == [1, 2, 3, 4, 5]
        # riverboat brings it back up one step; River lists it, then finishes the job.
        assert migrator.up(max_steps=1) == [6]
    finally:
        driver.close()
    assert river.migrate("list")["existing"] == [1, 2, 3, 4, 5, 6]
    assert river.migrate("up", target_version=7) == {"direction": "up", "versions": [7]}
    assert river.migrate("up") == {"direction": "up", "versions": [8]}
    driver, migrator = _migrator(empty_target)
    try:
        assert migrator.validate() == []
        # riverboat takes everything down, River sees an empty database and rebuilds it.
        assert migrator.down(target_version=0) == [8, 7, 6, 5, 4, 3, 2, 1]
    finally:
        driver.close()
    assert river.migrate("list")["existing"] == []
    assert river.migrate("up")["versions"] == ALL


def test_a_version_river_does_not_know_is_reported_by_both(river: RiverGo, target: Target) -> None:
    """A ``river_migration`` row from the future (a newer River) is reported by both
    sides, not taken as current: River's migrator refuses to list it, riverboat's
    validate refuses it. (River's validate itself only looks for missing versions.)"""
    driver, migrator = _migrator(target)
    try:
        from riverboat._sql import Query, Statement

        table = f'"{target.schema}".river_migration' if target.schema else "river_migration"
        driver.execute(
            Statement(
                Query(
                    "interop_future_version",
                    f"INSERT INTO {table} (line, version) VALUES ('main', 99)",
                ),
                {},
            )
        )
        assert migrator.current_version() == 99
        with pytest.raises(Exception, match="99"):
            migrator.validate()
    finally:
        driver.close()
    with pytest.raises(GoError, match="migration 99 not found"):
        river.migrate("list")
    assert river.migrate("validate") == {"ok": True, "messages": []}


def test_a_gap_in_river_migration_is_reported_by_both(river: RiverGo, target: Target) -> None:
    """Version 6 missing between applied ones: both sides name it as unapplied rather
    than taking the highest version as the schema's."""
    from riverboat._sql import Query, Statement

    driver, migrator = _migrator(target)
    try:
        table = f'"{target.schema}".river_migration' if target.schema else "river_migration"
        driver.execute(
            Statement(Query("interop_drop_v6", f"DELETE FROM {table} WHERE version = 6"), {})
        )
        assert migrator.validate() == [6]
    finally:
        driver.close()
    assert river.migrate("validate") == {"ok": False, "messages": ["Unapplied migrations: [6]"]}
    assert river.migrate("list")["existing"] == [1, 2, 3, 4, 5, 7, 8]


def test_rivers_migrator_ignores_riverboats_own_line(
    river_go_binary: Path, empty_target: Target
) -> None:
    """River keys river_migration by (line, version): the 'riverboat' line's rows don't
    disturb River's list, validate, up or down of its 'main' line."""
    from riverboat.migrations import up_all

    driver = driver_from_url(empty_target.url, schema=empty_target.schema)
    try:
        assert up_all(driver) == {"main": ALL, "riverboat": RIVERBOAT_VERSIONS}
    finally:
        driver.close()
    river = RiverGo(river_go_binary, empty_target)
    assert river.migrate("list") == {"all": ALL, "existing": ALL}
    assert river.migrate("validate") == {"ok": True, "messages": []}
    assert river.migrate("up") == {"direction": "up", "versions": []}
    assert river.migrate("down", max_steps=1) == {"direction": "down", "versions": [8]}
    assert river.migrate("up") == {"direction": "up", "versions": [8]}
    driver = driver_from_url(empty_target.url, schema=empty_target.schema)
    try:
        assert Migrator(driver, line="riverboat").current_version() == RIVERBOAT_VERSIONS[-1]
    finally:
        driver.close()
