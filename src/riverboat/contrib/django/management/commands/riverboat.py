"""``python manage.py riverboat migrate [up|down|list]`` and ``riverboat worker``.

``migrate`` runs riverboat's :class:`~riverboat.migrations.Migrator` on the Django
database (``--database``, default ``RIVERBOAT["DATABASE_ALIAS"]``), in River's schema
(``--schema``, default ``RIVERBOAT["SCHEMA"]``). ``worker`` is ``riverboat worker`` with
the client made from ``settings.RIVERBOAT`` (queues, workers, Django tasks).
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from riverboat.cli.worker import log_level
from riverboat.errors import RiverboatError

FACTORY = "riverboat.contrib.django.runtime:make_async_client"


class Command(BaseCommand):  # type: ignore[misc]
    help = "riverboat: River's schema migrations and the job worker, on Django's database"

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
        migrate = sub.add_parser("migrate", help="apply, revert or list River's migrations")
        migrate.add_argument(
            "action", nargs="?", choices=("up", "down", "list"), default="up", help="default: up"
        )
        migrate.add_argument("--target-version", type=int, metavar="N")
        migrate.add_argument("--database", metavar="ALIAS", help="a DATABASES alias")
        migrate.add_argument("--schema", metavar="S", help="River's schema")
        worker = sub.add_parser("worker", help="work the configured queues until SIGTERM")
        worker.add_argument("--processes", type=int, default=1, help="default 1")
        worker.add_argument(
            "--exit-when-idle", action="store_true", help="exit once every queue is drained"
        )
        worker.add_argument(
            "--soft-stop-timeout",
            type=float,
            metavar="SECONDS",
            help="wait this long for running jobs on SIGTERM (default: the client's, 25 s)",
        )
        worker.add_argument("--log-level", default="INFO", type=log_level, help="default INFO")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["command"] == "migrate":
                self._migrate(options)
            else:
                self._worker(options)
        except RiverboatError as exc:
            raise CommandError(" ".join(str(exc).split())) from exc

    def _migrate(self, options: dict[str, Any]) -> None:
        from riverboat.contrib.django.settings import get_driver
        from riverboat.migrations import Migrator

        driver = get_driver(options["database"], options["schema"])
        migrator = Migrator(driver)
        names = migrator.names
        action = options["action"]
        if action in ("up", "down"):
            # A mistyped target is refused before anything runs: down unwinds riverboat's
            # own line first, which a target only River's line checks came too late for.
            migrator.check_target(options["target_version"], action)
        if action == "up":
            done = migrator.up(options["target_version"])
            for version in done:
                self.stdout.write(f"applied {version:03d} {names[version]}")
            if not done:
                self.stdout.write(f"nothing to apply; at version {migrator.current_version()}")
            if options["target_version"] is None:
                # riverboat's own line (its riverboat_* tables) goes on top of River's.
                own = Migrator(driver, "riverboat")
                for version in own.up():
                    self.stdout.write(f"applied riverboat {version:03d} {own.names[version]}")
        elif action == "down":
            # As `riverboat migrate down`: riverboat's line sits on top of River's and is
            # unwound first (all of it for a target; its newest version for one step).
            target = options["target_version"]
            own = Migrator(driver, "riverboat")
            own_done: list[int] = []
            if own.current_version():
                own_done = own.down(0 if target is not None else None)
                for version in own_done:
                    self.stdout.write(f"reverted riverboat {version:03d} {own.names[version]}")
            done = migrator.down(target) if target is not None or not own_done else []
            for version in done:
                self.stdout.write(f"reverted {version:03d} {names[version]}")
            if not done and not own_done:
                self.stdout.write("nothing to revert")
        else:
            for info in migrator.list():
                when = info.applied_at.isoformat(sep=" ") if info.applied_at else "-"
                mark = "*" if info.applied else " "
                self.stdout.write(f"{mark} {info.version:03d}  {info.name:<50} {when}")
        self.stdout.write(
            f"current version: {migrator.current_version()} (latest {migrator.latest_version})"
        )

    def _worker(self, options: dict[str, Any]) -> None:
        from riverboat.cli import worker as cli_worker

        namespace = argparse.Namespace(
            target=FACTORY,
            processes=options["processes"],
            exit_when_idle=options["exit_when_idle"],
            log_level=options["log_level"],
            soft_stop_timeout=options.get("soft_stop_timeout"),
        )
        code = cli_worker.run(namespace)
        if code:
            raise CommandError(f"worker exited with code {code}", returncode=code)
