"""River itself beside riverboat (``riverboat bench --compare-river``): the same backlog
of no-op jobs on the same database, worked by one process with 20 slots, by riverboat at
its defaults and by River 0.51.2 (the Go interop program, ``interop/go``) at River's
defaults and with a 1 ms FetchCooldown.

The backlog is inserted by raw SQL (``fill_backlog``). Progress is read every 20 ms from
a separate connection (whether any job is still available or running). The client's CPU
is this process's (riverboat) or the Go process's, from ``/proc/<pid>/stat``; the
server's is from ``ServerCpu`` when the server runs on this machine. The three
alternate over two rounds in opposite orders; the best of each is kept.

The Go program is built with the Go toolchain from ``interop/go`` of the riverboat
checkout (River's module from the Go module cache or proxy); without either the part
reports ``{"skipped": reason}``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riverboat.bench.defaults import _any_left_sql, _work_backlog
from riverboat.bench.measure import Figures, PostgresBench, fill_backlog

__all__ = ["RiverFigure", "build_interop", "run_compare_river"]

MAX_WORKERS = 20
ROUNDS = 2
# (name, FetchCooldown ms, FetchPollInterval ms); 0 is River's default (100 ms, 1 s).
RIVER_CONFIGS = [("river_defaults", 0.0, 0.0), ("river_fetch_cooldown_1ms", 1.0, 0.0)]


@dataclass(slots=True)
class RiverFigure(Figures):
    name: str
    max_workers: int
    jobs: int
    jobs_per_sec: float
    client_cpu_ms_per_job: float
    postgres_cpu_ms_per_job: float | None
    total_cpu_ms_per_job: float | None


def interop_dir() -> Path | None:
    """``interop/go`` of the checkout riverboat runs from (None: not a checkout)."""
    import riverboat

    path = Path(riverboat.__file__).resolve().parents[2] / "interop" / "go"
    return path if (path / "go.mod").exists() else None


def build_interop(out_dir: str) -> tuple[str | None, str | None]:
    """Build the Go interop program into ``out_dir``: (binary, None) or (None, why not)."""
    source = interop_dir()
    if source is None:
        return None, "interop/go is not there (riverboat is not run from its checkout)"
    go = shutil.which("go")
    if go is None:
        return None, "the Go toolchain is not installed"
    binary = os.path.join(out_dir, "riverinterop")
    built = subprocess.run(
        [go, "build", "-o", binary, "."], cwd=source, capture_output=True, text=True
    )
    if built.returncode != 0:
        return None, f"go build failed: {built.stderr.strip()[-500:]}"
    return binary, None


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _work_with_river(
    pg: PostgresBench, binary: str, jobs: int, cooldown_ms: float, poll_ms: float
) -> tuple[int, float, float]:
    """River's process on the backlog: (jobs done, wall s, its CPU s)."""
    import psycopg

    left_sql = _any_left_sql(pg.schema)
    async with await psycopg.AsyncConnection.connect(pg.url, autocommit=True) as conn:
        wall = time.perf_counter()
        process = subprocess.Popen(
            [
                binary,
                "work",
                "-db",
                pg.url,
                "-schema",
                pg.schema,
                "-kinds",
                "benchmark",
                "-max-workers",
                str(MAX_WORKERS),
                "-fetch-cooldown-ms",
                str(cooldown_ms),
                "-fetch-poll-interval-ms",
                str(poll_ms),
                "-quiet",
            ],
            stdout=subprocess.DEVNULL,
        )
        try:
            deadline = wall + 120
            cpu = 0.0
            while time.perf_counter() < deadline:
                await asyncio.sleep(0.02)
                if process.poll() is not None:
                    raise RuntimeError(f"River's worker exited with {process.returncode}")
                row = await (await conn.execute(left_sql, prepare=True)).fetchone()
                if row is not None and not row[0]:
                    cpu = _cpu_seconds(process.pid)
                    break
            wall = time.perf_counter() - wall
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.to_thread(process.wait, 30)
                except subprocess.TimeoutExpired:
                    process.kill()
        row = await (
            await conn.execute(
                f"SELECT count(*) FROM \"{pg.schema}\".river_job WHERE state = 'completed'"
            )
        ).fetchone()
    return (int(row[0]) if row else 0), wall, cpu


async def run_compare_river(
    pg: PostgresBench, jobs: int, server_cpu: Callable[[], float] | None
) -> dict[str, Any]:
    """riverboat at defaults, River at its defaults and with a 1 ms FetchCooldown."""
    with tempfile.TemporaryDirectory(prefix="riverboat-river-") as tmp:
        pg.progress("compare-river: building interop/go")
        binary, why_not = await asyncio.to_thread(build_interop, tmp)
        if binary is None:
            return {"skipped": why_not}
        best: dict[str, RiverFigure] = {}

        async def measure(name: str, body: Callable[[], Any]) -> None:
            pg.progress(f"compare-river: {name}, {jobs} jobs")
            await asyncio.to_thread(fill_backlog, pg.url, pg.schema, jobs)
            server = server_cpu() if server_cpu is not None else None
            done, wall, cpu = await body()
            if server is not None and server_cpu is not None:
                server = server_cpu() - server
            done = max(done, 1)
            figure = RiverFigure(
                name,
                MAX_WORKERS,
                done,
                round(done / wall, 1),
                round(cpu / done * 1000, 4),
                round(server / done * 1000, 4) if server is not None else None,
                round((cpu + server) / done * 1000, 4) if server is not None else None,
            )
            if name not in best or figure.jobs_per_sec > best[name].jobs_per_sec:
                best[name] = figure

        async def riverboat_defaults() -> tuple[int, float, float]:
            done, wall, cpu, _ = await _work_backlog(pg, jobs, MAX_WORKERS, 120.0)
            return done, wall, cpu

        def river(cooldown: float, poll: float) -> Callable[[], Any]:
            return lambda: _work_with_river(pg, binary, jobs, cooldown, poll)

        runs: list[tuple[str, Callable[[], Any]]] = [("riverboat_defaults", riverboat_defaults)]
        runs += [(name, river(cooldown, poll)) for name, cooldown, poll in RIVER_CONFIGS]
        for round_ in range(1, ROUNDS + 1):
            for name, body in runs if round_ % 2 else runs[::-1]:
                await measure(name, body)
    return {"runs": [best[name].to_dict() for name, _ in runs]}
