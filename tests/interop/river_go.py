"""The Go side of the interop tests: building ``interop/go`` (real River 0.51.2 and River
UI) once, and running its subcommands against the database a test shares with riverboat.

Every subcommand prints JSON on stdout (see interop/go/main.go): one document for the
one-shot commands, one object per line for ``work`` and ``ui``, which run until SIGTERM.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riverboat.bench.river import (
    INTEROP_BINARY,
    build_interop_binary,
    interop_cache_dir,
    interop_sources_hash,
)

REPO = Path(__file__).resolve().parents[2]
GO_DIR = REPO / "interop" / "go"


def build_river_go(go: str) -> Path:
    """The program, built once per hash of its sources into riverboat's cache (shared
    with ``riverboat bench --compare-river``); concurrent pytest workers wait for the
    first one's build."""
    return build_interop_binary(go, GO_DIR)


@dataclass
class Target:
    """One database as both sides address it: riverboat's URL and schema, and the same
    for River's program (a ``sqlite:///path`` URL or Postgres with ``--schema``)."""

    dialect: str  # "postgres" or "sqlite"
    url: str
    schema: str | None

    def go_flags(self) -> list[str]:
        flags = ["--db", self.url]
        if self.schema:
            flags += ["--schema", self.schema]
        return flags


class GoError(AssertionError):
    """River's program exited non-zero; the message carries its error."""


class RiverGo:
    """Runs the built program against one :class:`Target`."""

    def __init__(self, binary: Path, target: Target) -> None:
        self.binary = binary
        self.target = target

    def run(self, command: str, *flags: str, stdin: Any = None, timeout: float = 60) -> Any:
        result = subprocess.run(
            [str(self.binary), command, *self.target.go_flags(), *flags],
            input=None if stdin is None else json.dumps(stdin),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise GoError(f"riverinterop {command} {' '.join(flags)}: {result.stderr.strip()}")
        return json.loads(result.stdout)

    def migrate(self, action: str, **flags: int) -> Any:
        args = [f"--action={action}"]
        args += [f"--{name.replace('_', '-')}={value}" for name, value in flags.items()]
        return self.run("migrate", *args)

    def insert(self, mode: str, jobs: list[dict[str, Any]], *, rollback: bool = False) -> Any:
        return self.run("insert", stdin={"mode": mode, "jobs": jobs, "rollback": rollback})

    def insert_raw(self, mode: str, body: str) -> Any:
        """``insert`` with the request as given text, for args whose bytes matter."""
        result = subprocess.run(
            [str(self.binary), "insert", *self.target.go_flags()],
            input=body,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if result.returncode != 0:
            raise GoError(f"riverinterop insert: {result.stderr.strip()}")
        return json.loads(result.stdout)

    def job(self, action: str, job_id: int) -> dict[str, Any]:
        job: dict[str, Any] = self.run("job", f"--action={action}", f"--id={job_id}")["job"]
        return job

    def start(self, command: str, *flags: str) -> GoProcess:
        proc = subprocess.Popen(
            [str(self.binary), command, *self.target.go_flags(), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        return GoProcess(proc)

    def worker(self, *flags: str) -> GoProcess:
        """A started River client working jobs (``work``); stop it with ``stop()``."""
        process = self.start("work", *flags)
        process.wait_event(lambda e: e.get("event") == "started", timeout=30)
        return process


class GoProcess:
    """A long-running subcommand: its JSON lines collected on a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._cond = threading.Condition()
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.events.append(json.loads(line))
                self._cond.notify_all()
        self.proc.stdout.close()
        with self._cond:
            self._cond.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cond:
                self.stderr.append(line.rstrip("\n"))
        self.proc.stderr.close()

    def wait_event(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 15
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (
                    self.proc.poll() is not None and not self._threads[0].is_alive()
                ):
                    raise AssertionError(
                        f"the Go process never printed the awaited event; events: "
                        f"{self.events[-20:]}; stderr: {self.stderr[-20:]}"
                    )
                self._cond.wait(min(remaining, 0.5))

    def events_of(self, name: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e.get("event") == name]

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (River's soft stop), then wait for the exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        for thread in self._threads:
            thread.join(5)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for thread in self._threads:
            thread.join(5)


def find_go() -> str | None:
    return shutil.which("go")


def main() -> int:
    """``python -m tests.interop.river_go``: build (or find) the program and print its
    path; scripts/test calls it before the suite, so a cold build runs on its own
    instead of inside a test's timeout."""
    go = find_go()
    if go is None:
        print("no Go toolchain on PATH: the interop tests will skip (or fail under CI=true)")
        return 0
    if not (interop_cache_dir() / interop_sources_hash(GO_DIR) / INTEROP_BINARY).exists():
        print(f"building {GO_DIR} with {go} (a cold build takes a minute or more)", flush=True)
    print(build_river_go(go))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
