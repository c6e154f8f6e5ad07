"""Prometheus: scrape a worker's metrics over HTTP while it runs (SQLite)."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from riverboat import AsyncClient, Client, Job, QueueConfig, Workers
from riverboat.contrib.prometheus import PrometheusMiddleware, start_metrics_server
from riverboat.drivers.sqlite import SqliteDriver
from tests.waiting import wait_until, wait_until_async


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def _value(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.asyncio
async def test_counters_and_sampled_queue_gauges(sqlite_url: str) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMiddleware(registry=registry, sample_interval=0.05)
    server = start_metrics_server(0, "127.0.0.1", registry=registry)
    port = server.server_port
    release = asyncio.Event()
    workers = Workers()

    @workers.register("slow")
    async def slow(job: Job[dict[str, int]]) -> None:
        await release.wait()

    client = AsyncClient(
        sqlite_url,
        queues={"default": QueueConfig(max_workers=3)},
        workers=workers,
        middleware=[metrics],
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    )
    for i in range(5):
        await client.insert({"n": i}, kind="slow")
    try:
        await client.start()

        async def three_running_two_available() -> str:
            text = await asyncio.to_thread(_scrape, port)
            running = _value(text, "riverboat_queue_jobs", queue="default", state="running")
            available = _value(text, "riverboat_queue_jobs", queue="default", state="available")
            return text if (running, available) == (3, 2) else ""

        text = await wait_until_async(three_running_two_available, timeout=10, poll=0.05)
        assert _value(text, "riverboat_jobs_running", queue="default") == 3
        assert _value(text, "riverboat_leader") == 1
        assert _value(text, "riverboat_jobs_inserted_total", kind="slow") == 5
        assert _value(text, "riverboat_jobs_worked_total", kind="slow") == 0
        release.set()
        await wait_until_async(client.runtime.is_idle, timeout=10)
        text = await asyncio.to_thread(_scrape, port)
        assert _value(text, "riverboat_jobs_worked_total", kind="slow", outcome="completed") == 5
        assert _value(text, "riverboat_jobs_running", queue="default") == 0
        assert _value(text, "riverboat_job_duration_seconds_count", kind="slow") == 5
        assert _value(text, "riverboat_producer_claim_size_sum", queue="default") >= 5
    finally:
        await client.stop()
        await client.close()
        server.shutdown()
        server.server_close()


WORKER_MODULE = """
import time
from riverboat import AsyncClient, Workers
from riverboat import QueueConfig

workers = Workers()

@workers.register("tick")
def tick(job):
    time.sleep(0.01)

def client():
    return AsyncClient(
        URL,
        queues={"default": QueueConfig(max_workers=2)},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    )
"""


def test_worker_command_serves_metrics(sqlite_url: str, tmp_path: Path) -> None:
    (tmp_path / "metrics_app.py").write_text(
        f"URL = {sqlite_url!r}\n" + textwrap.dedent(WORKER_MODULE)
    )
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "riverboat.cli",
            "worker",
            "metrics_app:client",
            "--metrics-port",
            str(port),
            "--log-level",
            "WARNING",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def scrape_once_serving() -> str:
            try:
                return _scrape(port)
            except OSError:  # the worker is not listening yet
                return ""

        text = wait_until(scrape_once_serving, timeout=20, poll=0.05, what="the metrics port")
        assert "riverboat_jobs_worked" in text
        assert _value(text, "riverboat_jobs_worked_total", kind="tick") == 0
        with Client(SqliteDriver(sqlite_url)) as client:
            for i in range(20):
                client.insert({"n": i}, kind="tick")
        seen: list[float] = []

        def all_worked() -> bool:
            seen.append(_value(_scrape(port), "riverboat_jobs_worked_total", kind="tick"))
            return seen[-1] == 20

        wait_until(all_worked, timeout=20, poll=0.05, what="20 jobs worked")
        assert seen == sorted(seen)
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
