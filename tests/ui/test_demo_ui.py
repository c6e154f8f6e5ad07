"""``riverboat demo --ui`` (what ``./scripts/demo --ui`` runs): the dashboard serves the
demo's database from the start, shows the worked jobs, and stays up with a stream of new
jobs until Ctrl-C."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import riverboat
from tests.waiting import wait_until


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    return response.status, body


def _read_until(proc: subprocess.Popen[str], marker: str, seen: list[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            return
    raise AssertionError(f"{marker!r} never printed:\n{''.join(seen)}")


def test_demo_with_the_dashboard(tmp_path: Path) -> None:
    port = _free_port()
    command = ["demo", "--ui", "--ui-port", str(port), "--plain", "--jobs", "5"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "riverboat.cli", *command],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    seen: list[str] = []
    try:
        _read_until(proc, f"dashboard at http://127.0.0.1:{port}/", seen)
        status, body = _get(port, "/")
        assert status == 200 and "Overview" in body
        _read_until(proc, "the dashboard stays", seen)
        status, body = _get(port, "/jobs?state=completed")
        assert status == 200 and "demo_resize_image" in body, body[-2000:]
        status, body = _get(port, "/jobs?state=discarded")
        assert status == 200 and 'data-job="' in body
        # After the tour the demo keeps producing jobs for the dashboard to show.
        url = f"sqlite:///{tmp_path / 'riverboat-demo.sqlite3'}"
        with riverboat.Client(url) as client:
            after_tour = client.job_count_matching()
            wait_until(
                lambda: (
                    client.job_count_matching(states=["completed"]) > 0
                    and client.job_count_matching() >= after_tour + 5
                ),
                timeout=30,
                what="new demo jobs after the tour",
            )
        assert proc.poll() is None  # still serving, until Ctrl-C
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == 0, "".join(seen)
