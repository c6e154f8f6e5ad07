"""A throwaway Postgres cluster for the test suite (and benchmarks).

Finds server binaries (``RIVERBOAT_PG_BIN``, then ``pg_config --bindir``, then Debian's
``/usr/lib/postgresql/<version>/bin``), runs ``initdb`` in a temporary directory on a free
port, and stops and removes it afterwards. Postgres refuses to run as root, so as root the
cluster runs as the ``postgres`` system user (created by Debian's package).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["PgServer", "find_pg_bin"]


def find_pg_bin() -> Path | None:
    env = os.environ.get("RIVERBOAT_PG_BIN")
    if env:
        return Path(env)
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for path in candidates:
        if (path / "initdb").exists():
            return path
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        path = Path(out.stdout.strip())
        if (path / "initdb").exists():
            return path
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgServer:
    def __init__(self, bin_dir: Path | None = None, run_as: str | None = None) -> None:
        found = bin_dir or find_pg_bin()
        if found is None:
            raise RuntimeError(
                "no Postgres server binaries found: install Debian's postgresql package "
                "or set RIVERBOAT_PG_BIN"
            )
        self.bin = found
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="riverboat-pg-"))
        self.data = self.dir / "data"
        self.run_as = run_as if run_as is not None else ("postgres" if os.geteuid() == 0 else "")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _cmd(self, *args: str) -> list[str]:
        if self.run_as:
            return ["runuser", "-u", self.run_as, "--", *args]
        return list(args)

    def start(self) -> None:
        if self.run_as:
            user = pwd.getpwnam(self.run_as)
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        subprocess.run(
            self._cmd(
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ),
            check=True,
            capture_output=True,
        )
        options = " ".join(
            [
                f"-p {self.port}",
                f"-k {self.dir}",
                "-c listen_addresses=127.0.0.1",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=300",
                "-c shared_preload_libraries=pg_stat_statements",
                "-c pg_stat_statements.track=all",
            ]
        )
        subprocess.run(
            self._cmd(
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-o",
                options,
                "-l",
                str(self.dir / "server.log"),
                "-w",
                "start",
            ),
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        subprocess.run(
            self._cmd(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"),
            capture_output=True,
        )
        shutil.rmtree(self.dir, ignore_errors=True)

    def restart(self) -> None:
        subprocess.run(
            # -l: without a log file the new postmaster inherits our captured stdout,
            # and capture_output would wait for it forever.
            self._cmd(
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.dir / "server.log"),
                "-m",
                "fast",
                "-w",
                "restart",
            ),
            check=True,
            capture_output=True,
        )
