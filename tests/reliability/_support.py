"""Shared pieces of the reliability suite: worker subprocesses, SQL shortcuts, waits on
database state with deadlines, execution records, and a TCP proxy that cuts
connections."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psycopg

from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
APP = "tests.reliability._worker_app:client"


def spawn_worker(
    out: Path, url: str, schema: str | None, *args: str, **env: str
) -> subprocess.Popen[bytes]:
    """``python -m riverboat.cli worker tests.reliability._worker_app:client`` with the
    app's settings in ``env`` (RB_* variables, see _worker_app.client)."""
    full_env = {
        **os.environ,
        "RB_URL": url,
        "RB_SCHEMA": schema or "",
        "RB_OUT": str(out),
        "PYTHONPATH": str(REPO),
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "riverboat.cli", "worker", APP, *args],
        env=full_env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


class OutputReader:
    """Collects a subprocess's output lines on a thread; waits for a line by deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._cond:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self._cond.notify_all()
        self.proc.stdout.close()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[str], bool], timeout: float, start: int = 0) -> int:
        """Index of the first line from ``start`` on that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i in range(start, len(self.lines)):
                    if predicate(self.lines[i]):
                        return i
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (not self._thread.is_alive() and self.proc.poll() is not None):
                    raise AssertionError(
                        "expected output never came; output so far:\n" + self.text()
                    )
                self._cond.wait(remaining)

    def join(self, timeout: float = 10) -> None:
        self._thread.join(timeout)

    def text(self) -> str:
        return "\n".join(self.lines[-200:])


def sql(url: str, schema: str | None, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """One statement on a fresh autocommit connection, in ``schema``."""
    with psycopg.connect(url, autocommit=True) as conn:
        if schema:
            conn.execute(f'SET search_path TO "{schema}"')
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description is not None else []


def state_counts(url: str, schema: str | None) -> dict[str, int]:
    return dict(sql(url, schema, "SELECT state::text, count(*) FROM river_job GROUP BY 1"))


def executions(out: Path) -> Counter[int]:
    """How many times each job's body ran to the end, from every process's record."""
    counts: Counter[int] = Counter()
    for path in out.glob("exec.*"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():  # a torn last line is ignored
                counts[int(parts[0])] += 1
    return counts


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        raise


class CuttingProxy:
    """A TCP proxy on 127.0.0.1 in front of Postgres, on its own thread and loop.

    :meth:`cut` closes every open connection at once (both directions, with RST), as a
    flaky network or a load balancer restart would."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.cuts = 0
        self.connections = 0
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._server: asyncio.Server | None = None

    def start(self) -> CuttingProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._loop.run_forever()
        self._loop.close()

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.connections += 1
        pair = (writer, up_writer)
        self._pairs.add(pair)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self._pairs.discard(pair)

    def _cut_all(self) -> int:
        pairs = list(self._pairs)
        for pair in pairs:
            for w in pair:
                transport = w.transport
                transport.abort()
        self._pairs.clear()
        self.cuts += 1
        return len(pairs)

    def cut(self) -> int:
        """Drop every open connection; returns how many were dropped."""
        future = asyncio.run_coroutine_threadsafe(self._acut(), self._loop)
        return future.result(10)

    async def _acut(self) -> int:
        return self._cut_all()

    def close(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            self._cut_all()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class FreezingProxy:
    """A TCP proxy on 127.0.0.1 in front of Postgres that can stop forwarding without
    closing anything: a stalled peer, a NAT or failover black hole. Sockets stay open,
    the kernel keeps acknowledging what it can buffer, nothing reaches the other side.

    :meth:`freeze` freezes the connections open now; with ``new_too`` it also accepts
    new connections and freezes them (a network that is gone for everyone). Frozen
    connections stay frozen until :meth:`close` (the stale bytes they hold are never
    delivered late); :meth:`thaw` lets new connections through again."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections = 0
        self.frozen_connections = 0
        self._freeze_new = False
        # Per connection: the event its pipes wait on before forwarding (set: flowing).
        self._flows: set[asyncio.Event] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._server: asyncio.Server | None = None

    def start(self) -> FreezingProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._loop.run_forever()
        # Frozen connections' tasks wait for ever: end them before the loop closes.
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    def url(self, pg_url: str) -> str:
        import psycopg

        info = psycopg.conninfo.conninfo_to_dict(pg_url)
        user, dbname = info.get("user", "postgres"), info.get("dbname", "postgres")
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._forward(reader, writer)
        except asyncio.CancelledError:  # close(): asyncio would log a cancelled handler
            pass

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        flowing = asyncio.Event()
        self._writers.add(writer)
        if self._freeze_new:
            self.frozen_connections += 1
            self.connections += 1
            await asyncio.Event().wait()  # never forwarded, never connected upstream
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.add(up_writer)
        self.connections += 1
        flowing.set()
        self._flows.add(flowing)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while True:
                    await flowing.wait()  # frozen: stop reading, so nothing moves on
                    data = await src.read(65536)
                    if not data:
                        break
                    await flowing.wait()
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self._flows.discard(flowing)

    def _call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def freeze(self, *, new_too: bool = False, open_too: bool = True) -> int:
        """Stop forwarding on every open connection (unless not ``open_too``: then only
        new ones freeze); returns how many were frozen."""

        def freeze() -> int:
            self._freeze_new = new_too
            frozen = [flow for flow in self._flows if flow.is_set() and open_too]
            for flow in frozen:
                flow.clear()
            self.frozen_connections += len(frozen)
            return len(frozen)

        result: int = self._call(freeze)
        return result

    def thaw(self) -> None:
        """Let new connections through again (frozen ones stay frozen)."""

        def thaw() -> None:
            self._freeze_new = False

        self._call(thaw)

    def close(self) -> None:
        def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for writer in self._writers:
                writer.transport.abort()

        self._call(shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def reruns(counts: Counter[int]) -> set[int]:
    return {job_id for job_id, n in counts.items() if n > 1}


def insert_jobs(
    url: str, schema: str | None, kind: str, args: Iterable[dict[str, Any]]
) -> list[int]:
    """Insert through riverboat's own sync client (one transaction per 5,000)."""
    import riverboat

    with riverboat.Client(url, schema=schema) as client:
        results = client.insert_many([riverboat.InsertManyParams(a, kind=kind) for a in args])
    return [r.job.id for r in results]


def holds_a_write_lock(pid: int) -> bool:
    """Whether process ``pid`` holds a POSIX write lock (/proc/locks): on a SQLite file
    in WAL mode, the lock of a write transaction (or a checkpoint) under way."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[1] == "POSIX" and fields[3] == "WRITE":
            if fields[4] == str(pid):
                return True
    return False


def freeze_between_writes(proc: subprocess.Popen[bytes], sqlite: bool) -> None:
    """SIGSTOP ``proc``; on SQLite, only at a moment it holds no write lock. A process
    frozen inside a SQLite write transaction keeps the database's write lock (nothing
    can take a POSIX lock from a live process), so every other process's writes wait
    until it wakes: not the freeze these tests are about (docs/fleet.md says so)."""
    for _ in range(1000):
        proc.send_signal(signal.SIGSTOP)
        if not sqlite or not holds_a_write_lock(proc.pid):
            return
        proc.send_signal(signal.SIGCONT)
        # Its transaction ends within milliseconds once it runs again.
        wait_until(lambda: not holds_a_write_lock(proc.pid), timeout=10, what="the write lock")
    raise AssertionError(f"process {proc.pid} held SQLite's write lock at every try")


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite:")


def query(url: str, schema: str | None, text: str) -> list[tuple[Any, ...]]:
    """One statement on either database, committed (``text`` must suit both when used
    for both)."""
    if not is_sqlite(url):
        return sql(url, schema, text)
    from riverboat.drivers._sqlite_module import sqlite_module

    conn = sqlite_module().connect(url.removeprefix("sqlite:///"), timeout=10)
    try:
        with conn:
            rows: list[tuple[Any, ...]] = conn.execute(text).fetchall()
        return rows
    finally:
        conn.close()


def job_table(url: str, schema: str | None) -> dict[int, tuple[str, int, list[dict[str, Any]]]]:
    """id -> (state, attempt, errors) for every job."""
    import json

    if is_sqlite(url):
        rows = query(url, schema, "SELECT id, state, attempt, json(errors) FROM river_job")
        return {r[0]: (r[1], r[2], json.loads(r[3]) if r[3] else []) for r in rows}
    rows = sql(url, schema, "SELECT id, state::text, attempt, errors FROM river_job")
    return {r[0]: (r[1], r[2], list(r[3] or [])) for r in rows}


def counts_by_state(url: str, schema: str | None) -> dict[str, int]:
    cast = "state" if is_sqlite(url) else "state::text"
    return dict(query(url, schema, f"SELECT {cast}, count(*) FROM river_job GROUP BY 1"))


def running_ids(url: str, schema: str | None) -> set[int]:
    return {r[0] for r in query(url, schema, "SELECT id FROM river_job WHERE state = 'running'")}
