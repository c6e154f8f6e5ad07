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

Also here: River's own benchmark (``river bench`` of River's ``cmd/river`` module, built
by ``go install`` or given as ``$RIVERBOAT_RIVER_CLI``) beside riverboat at its settings
on the same database, and the SQLite side by side (the interop program's riversqlite
driver on the same WAL file riverboat works).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riverboat.bench.defaults import _any_left_sql, _work_backlog
from riverboat.bench.measure import Figures, PostgresBench, fill_backlog

__all__ = [
    "INTEROP_BINARY",
    "RiverBenchFigure",
    "RiverFigure",
    "build_interop",
    "build_interop_binary",
    "interop_cache_dir",
    "interop_sources_hash",
    "river_cli",
    "run_compare_river",
    "run_compare_river_sqlite",
    "run_river_bench",
]

MAX_WORKERS = 20
ROUNDS = 2
# (name, FetchCooldown ms, FetchPollInterval ms); 0 is River's default (100 ms, 1 s).
RIVER_CONFIGS = [("river_defaults", 0.0, 0.0), ("river_fetch_cooldown_1ms", 1.0, 0.0)]
INTEROP_BINARY = "riverinterop"
# A run ends when the backlog is done or after this long (jobs/s is what was done by
# then): River at its defaults works 20 slots per 100 ms cooldown, 200 jobs/s.
RUN_LIMIT = 15.0


@dataclass(slots=True)
class RiverFigure(Figures):
    """One client (riverboat or River, ``name``) working the backlog: its rate, the
    client process's CPU per job and the server's when the server is local."""

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


def interop_cache_dir() -> Path:
    """Where built interop programs are kept: ``$XDG_CACHE_HOME/riverboat/interop``
    (default ``~/.cache``), one folder per hash of the sources."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "riverboat" / "interop"


def interop_sources_hash(source: Path) -> str:
    """A hash of everything the build reads from the checkout: the Go files, go.mod and
    go.sum (Go's module cache is keyed by go.sum already)."""
    digest = hashlib.sha256()
    for path in sorted(source.iterdir()):
        if path.suffix == ".go" or path.name in ("go.mod", "go.sum"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_interop_binary(go: str, source: Path) -> Path:
    """``go build`` ``source`` into :func:`interop_cache_dir`, once per hash of its
    sources: a cold build takes a minute or more (mostly modernc.org/sqlite), a warm
    one still links a 30 MB program. Concurrent callers (the test suite's workers, a
    bench beside them) wait on a file lock for the first one's build. Raises
    RuntimeError with Go's output when the build fails."""
    import fcntl

    target_dir = interop_cache_dir() / interop_sources_hash(source)
    binary = target_dir / INTEROP_BINARY
    if binary.exists():
        return binary
    target_dir.mkdir(parents=True, exist_ok=True)
    with open(target_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        partial = target_dir / f"{INTEROP_BINARY}.{os.getpid()}.partial"
        built = subprocess.run(
            # No VCS stamp: the program depends on its sources only, and a checkout
            # without git metadata (an export, a worktree elsewhere) builds the same.
            [go, "build", "-buildvcs=false", "-o", str(partial), "."],
            cwd=source,
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            raise RuntimeError(f"go build of {source} failed:\n{built.stdout}{built.stderr}")
        partial.rename(binary)
    return binary


def build_interop() -> tuple[str | None, str | None]:
    """The Go interop program, built or found in the cache: (binary, None) or (None, why
    not)."""
    source = interop_dir()
    if source is None:
        return None, "interop/go is not there (riverboat is not run from its checkout)"
    go = shutil.which("go")
    if go is None:
        return None, "the Go toolchain is not installed"
    try:
        return str(build_interop_binary(go, source)), None
    except (RuntimeError, OSError) as exc:  # the build, or the cache folder
        return None, str(exc).strip()[-500:]


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _river_worker(
    binary: str,
    db: str,
    extra: list[str],
    cooldown_ms: float,
    poll_ms: float,
    until_done: Callable[[Callable[[], None]], Awaitable[None]],
) -> tuple[float, float]:
    """River's worker process (interop/go) on database ``db`` until ``until_done(alive)``
    returns (``alive`` raises once the process has exited); then SIGTERM. Returns (wall
    s, its CPU s)."""
    wall = time.perf_counter()
    process = subprocess.Popen(
        [
            binary,
            "work",
            "-db",
            db,
            *extra,
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

    def alive() -> None:
        if process.poll() is not None:
            raise RuntimeError(f"River's worker exited with {process.returncode}")

    try:
        await until_done(alive)
        cpu = _cpu_seconds(process.pid)
        wall = time.perf_counter() - wall
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, 30)
            except subprocess.TimeoutExpired:
                process.kill()
    return wall, cpu


async def _work_with_river(
    pg: PostgresBench, binary: str, jobs: int, cooldown_ms: float, poll_ms: float
) -> tuple[int, float, float]:
    """River's process on the backlog: (jobs done, wall s, its CPU s)."""
    import psycopg

    left_sql = _any_left_sql(pg.schema)
    async with await psycopg.AsyncConnection.connect(pg.url, autocommit=True) as conn:

        async def until_done(alive: Callable[[], None]) -> None:
            deadline = time.perf_counter() + RUN_LIMIT
            while time.perf_counter() < deadline:
                await asyncio.sleep(0.02)
                alive()
                row = await (await conn.execute(left_sql, prepare=True)).fetchone()
                if row is not None and not row[0]:
                    return

        wall, cpu = await _river_worker(
            binary, pg.url, ["-schema", pg.schema], cooldown_ms, poll_ms, until_done
        )
        row = await (
            await conn.execute(
                f"SELECT count(*) FROM \"{pg.schema}\".river_job WHERE state = 'completed'"
            )
        ).fetchone()
    return (int(row[0]) if row else 0), wall, cpu


Run = tuple[str, Callable[[], Awaitable[tuple[int, float, float]]]]


def _figure(name: str, done: int, wall: float, cpu: float, server: float | None) -> RiverFigure:
    """One run's figure from (jobs done, wall s, worker CPU s, server CPU s or None)."""
    done = max(done, 1)
    return RiverFigure(
        name,
        MAX_WORKERS,
        done,
        round(done / wall, 1),
        round(cpu / done * 1000, 4),
        round(server / done * 1000, 4) if server is not None else None,
        round((cpu + server) / done * 1000, 4) if server is not None else None,
    )


async def _best_of_rounds(
    runs: list[Run], measure: Callable[[str, Run, int], Awaitable[RiverFigure]]
) -> dict[str, RiverFigure]:
    """Each run ROUNDS times, the order reversed every other round; the best of each."""
    best: dict[str, RiverFigure] = {}
    for round_ in range(1, ROUNDS + 1):
        for run in runs if round_ % 2 else runs[::-1]:
            figure = await measure(run[0], run, round_)
            if run[0] not in best or figure.jobs_per_sec > best[run[0]].jobs_per_sec:
                best[run[0]] = figure
    return best


async def run_compare_river(
    pg: PostgresBench, jobs: int, server_cpu: Callable[[], float] | None
) -> dict[str, Any]:
    """riverboat at defaults, River at its defaults and with a 1 ms FetchCooldown."""
    pg.progress("compare-river: building interop/go (or finding it built)")
    binary, why_not = await asyncio.to_thread(build_interop)
    if binary is None:
        return {"skipped": why_not}

    async def measure(name: str, run: Run, _round: int) -> RiverFigure:
        pg.progress(f"compare-river: {name}, {jobs} jobs")
        await asyncio.to_thread(fill_backlog, pg.url, pg.schema, jobs)
        server = server_cpu() if server_cpu is not None else None
        done, wall, cpu = await run[1]()
        if server is not None and server_cpu is not None:
            server = server_cpu() - server
        return _figure(name, done, wall, cpu, server)

    async def riverboat_defaults() -> tuple[int, float, float]:
        done, wall, cpu, _ = await _work_backlog(pg, jobs, MAX_WORKERS, RUN_LIMIT)
        return done, wall, cpu

    def river(cooldown: float, poll: float) -> Callable[[], Any]:
        return lambda: _work_with_river(pg, binary, jobs, cooldown, poll)

    runs: list[Run] = [("riverboat_defaults", riverboat_defaults)]
    runs += [(name, river(cooldown, poll)) for name, cooldown, poll in RIVER_CONFIGS]
    best = await _best_of_rounds(runs, measure)
    return {"runs": [best[name].to_dict() for name, _ in runs]}


# -- River's own benchmark (`river bench` of River's cmd/river module) ------------------

RIVER_CLI_VERSION = "v0.51.2"
RIVER_CLI_ENV = "RIVERBOAT_RIVER_CLI"
# River's bench client (cmd/river/riverbench): one queue, 2,000 workers, FetchCooldown
# 2 ms, FetchPollInterval 20 ms; riverboat's counterpart works the same backlog with the same.
RIVER_BENCH_WORKERS = 2000
RIVER_BENCH_COOLDOWN = 0.002
RIVER_BENCH_POLL = 0.02
_OVERALL = re.compile(r"overall job/sec \[\s*([0-9.]+)\s*\]")
_WORKED = re.compile(r"total jobs worked \[\s*([0-9]+)\s*\]")


@dataclass(slots=True)
class RiverBenchFigure(Figures):
    name: str
    jobs: int
    jobs_per_sec: float
    # riverboat: the working phase only; River: the whole `river bench` process, its
    # insert of the backlog included (its bench inserts before it starts the clock).
    client_cpu_ms_per_job: float
    client_cpu_counts: str


def river_cli(out_dir: str) -> tuple[str | None, str | None]:
    """River's CLI: ``$RIVERBOAT_RIVER_CLI``, else built by ``go install`` (the module
    proxy) into ``out_dir``: (binary, None) or (None, why not)."""
    given = os.environ.get(RIVER_CLI_ENV)
    if given:
        if os.access(given, os.X_OK):
            return given, None
        return None, f"{RIVER_CLI_ENV}={given} is not an executable"
    go = shutil.which("go")
    if go is None:
        return None, "the Go toolchain is not installed"
    module = f"github.com/riverqueue/river/cmd/river@{RIVER_CLI_VERSION}"
    built = subprocess.run(
        [go, "install", module],
        cwd=out_dir,
        env={**os.environ, "GOBIN": out_dir},
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        return None, (
            f"go install {module} failed ({built.stderr.strip()[-300:]}); build River's "
            f"cmd/river yourself and set {RIVER_CLI_ENV} (docs/benchmarks.md)"
        )
    return os.path.join(out_dir, "river"), None


def river_bench_url(url: str, schema: str) -> str:
    """``url`` for River's CLI (pgx): ``postgres://``, and the scratch schema on the
    search path (``river bench`` truncates and vacuums ``river_job`` unqualified)."""
    if url.startswith("postgresql://"):
        url = "postgres://" + url.removeprefix("postgresql://")
    return f"{url}{'&' if '?' in url else '?'}search_path={schema}"


def parse_river_bench(output: str) -> tuple[int, float] | None:
    """(jobs worked, overall jobs/s) from ``river bench``'s last line, if it printed one."""
    overall = _OVERALL.search(output)
    worked = _WORKED.search(output)
    if overall is None or worked is None:
        return None
    return int(worked.group(1)), float(overall.group(1))


def _run_river_bench(binary: str, url: str, schema: str, jobs: int) -> tuple[int, float, float]:
    """``river bench -n jobs``: (jobs worked, its jobs/s, its process CPU s)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [
            binary,
            "bench",
            "--database-url",
            river_bench_url(url, schema),
            "--schema",
            schema,
            "-n",
            str(jobs),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    parsed = parse_river_bench(done.stdout)
    if done.returncode != 0 or parsed is None:
        raise RuntimeError(
            f"river bench exited with {done.returncode}: {(done.stderr or done.stdout)[-500:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return parsed[0], parsed[1], cpu


async def run_river_bench(pg: PostgresBench, jobs: int) -> dict[str, Any]:
    """River's ``river bench -n jobs`` and riverboat at the same settings on the same
    backlog (inserted by raw SQL for riverboat), in alternating rounds, best of each."""
    with tempfile.TemporaryDirectory(prefix="riverboat-rivercli-") as tmp:
        pg.progress(f"river bench: go install river {RIVER_CLI_VERSION}")
        binary, why_not = await asyncio.to_thread(river_cli, tmp)
        if binary is None:
            return {"skipped": why_not}
        best: dict[str, RiverBenchFigure] = {}

        async def river() -> RiverBenchFigure:
            done, rate, cpu = await asyncio.to_thread(
                _run_river_bench, binary, pg.url, pg.schema, jobs
            )
            return RiverBenchFigure(
                "river_bench",
                done,
                rate,
                round(cpu / max(done, 1) * 1000, 4),
                "process, insert included",
            )

        async def riverboat() -> RiverBenchFigure:
            await asyncio.to_thread(fill_backlog, pg.url, pg.schema, jobs)
            done, wall, cpu, _ = await _work_backlog(
                pg,
                jobs,
                RIVER_BENCH_WORKERS,
                600.0,
                fetch_cooldown=RIVER_BENCH_COOLDOWN,
                fetch_poll_interval=RIVER_BENCH_POLL,
            )
            return RiverBenchFigure(
                "riverboat_river_bench_settings",
                done,
                round(done / wall, 1),
                round(cpu / max(done, 1) * 1000, 4),
                "working phase",
            )

        runs: list[Callable[[], Any]] = [river, riverboat]
        for round_ in range(1, ROUNDS + 1):
            for body in runs if round_ % 2 else runs[::-1]:
                pg.progress(f"river bench: {body.__name__}, {jobs} jobs, round {round_}/{ROUNDS}")
                figure = await body()
                if figure.name not in best or figure.jobs_per_sec > best[figure.name].jobs_per_sec:
                    best[figure.name] = figure
    return {
        "command": f"river bench --database-url URL --schema SCHEMA -n {jobs}",
        "river_cli": RIVER_CLI_VERSION if not os.environ.get(RIVER_CLI_ENV) else binary,
        "runs": [figure.to_dict() for figure in best.values()],
    }


# -- SQLite side by side: riverboat's SQLite driver and River's riversqlite ------------


def fill_sqlite_backlog(path: str, jobs: int) -> None:
    """Empty ``river_job`` of the SQLite file and insert ``jobs`` available no-op jobs of
    kind ``benchmark`` in one statement (no insert path measured)."""
    from riverboat.drivers._sqlite_module import sqlite_module

    conn = sqlite_module().connect(path, timeout=30)
    try:
        conn.execute("DELETE FROM river_job")
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "INSERT INTO river_job (args, kind, max_attempts, queue, state) "
            "SELECT '{\"num\": 0}', 'benchmark', 25, 'default', 'available' FROM n",
            (jobs,),
        )
        conn.commit()
    finally:
        conn.close()


_SQLITE_LEFT = (
    "SELECT EXISTS (SELECT 1 FROM river_job WHERE state IN ('available', 'running')"
    " AND kind = 'benchmark')"
)


class _SqliteProgress:
    """Whether any job of the backlog is left, read on a connection of its own."""

    def __init__(self, path: str) -> None:
        from riverboat.drivers._sqlite_module import sqlite_module

        self._conn = sqlite_module().connect(path, timeout=30, check_same_thread=False)

    def any_left(self) -> bool:
        row = self._conn.execute(_SQLITE_LEFT).fetchone()
        self._conn.commit()
        return bool(row[0])

    def completed(self) -> int:
        row = self._conn.execute(
            "SELECT count(*) FROM river_job WHERE state = 'completed' AND kind = 'benchmark'"
        ).fetchone()
        self._conn.commit()
        return int(row[0])

    def close(self) -> None:
        self._conn.close()


async def _until_done(progress: _SqliteProgress, limit: float, alive: Callable[[], None]) -> None:
    deadline = time.perf_counter() + limit
    while time.perf_counter() < deadline:
        await asyncio.sleep(0.02)
        alive()
        if not progress.any_left():
            return


async def _riverboat_on_sqlite(path: str, jobs: int) -> tuple[int, float, float]:
    import riverboat
    from riverboat.drivers.sqlite import AsyncSqliteDriver
    from riverboat.runtime.producer import QueueConfig
    from riverboat.runtime.worker import Job, Workers

    workers = Workers()

    @workers.register("benchmark")
    async def benchmark(job: Job[Any]) -> None:
        return None

    driver = AsyncSqliteDriver(f"sqlite:///{path}")
    client = riverboat.AsyncClient(
        driver, queues={"default": QueueConfig(max_workers=MAX_WORKERS)}, workers=workers
    )
    progress = _SqliteProgress(path)
    try:
        cpu = time.process_time()
        wall = time.perf_counter()
        await client.start()
        await _until_done(progress, RUN_LIMIT, lambda: None)
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
        await client.stop()
        return progress.completed(), wall, cpu
    finally:
        progress.close()
        await client.close()
        await driver.close()


async def _river_on_sqlite(
    binary: str, path: str, jobs: int, cooldown_ms: float
) -> tuple[int, float, float]:
    progress = _SqliteProgress(path)
    try:
        wall, cpu = await _river_worker(
            binary,
            f"sqlite:///{path}",
            [],
            cooldown_ms,
            0,
            lambda alive: _until_done(progress, RUN_LIMIT, alive),
        )
        return progress.completed(), wall, cpu
    finally:
        progress.close()


async def run_compare_river_sqlite(
    jobs: int, progress: Callable[[str], None] = lambda _m: None
) -> dict[str, Any]:
    """The same backlog of no-op jobs in a SQLite file (WAL), worked by one process with
    20 slots: riverboat at its defaults, River (riversqlite, interop/go) at its defaults
    and with a 1 ms FetchCooldown; alternating rounds, best of each."""
    from riverboat.bench.env import scratch_target

    progress("compare-river (SQLite): building interop/go (or finding it built)")
    binary, why_not = await asyncio.to_thread(build_interop)
    if binary is None:
        return {"skipped": why_not}
    with scratch_target(None, "sqlite") as target:
        path = target.sqlite_path
        assert path is not None

        def river(cooldown: float) -> Callable[[], Any]:
            return lambda: _river_on_sqlite(binary, path, jobs, cooldown)

        async def measure(name: str, run: Run, round_: int) -> RiverFigure:
            progress(f"compare-river (SQLite): {name}, {jobs} jobs, round {round_}")
            await asyncio.to_thread(fill_sqlite_backlog, path, jobs)
            done, wall, cpu = await run[1]()
            return _figure(name, done, wall, cpu, None)

        runs: list[Run] = [("riverboat_defaults", lambda: _riverboat_on_sqlite(path, jobs))]
        runs += [(name, river(cooldown)) for name, cooldown, _ in RIVER_CONFIGS]
        best = await _best_of_rounds(runs, measure)
    river_best = max(
        (figure.jobs_per_sec for name, figure in best.items() if name != "riverboat_defaults"),
        default=0.0,
    )
    return {
        "runs": [best[name].to_dict() for name, _ in runs],
        "riverboat_over_best_river": round(best["riverboat_defaults"].jobs_per_sec / river_best, 2)
        if river_best
        else None,
    }
