"""``riverboat ui`` from the shell: it serves, warns when exposed without a token, and
refuses a bad database before starting."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(*args: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "riverboat.cli", "ui", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    for line in proc.stderr:  # until the server says where it listens
        lines.append(line)
        if "riverboat ui: http://" in line:
            break
    return proc, lines


@pytest.mark.parametrize(
    ("host", "extra", "warned"),
    [
        ("0.0.0.0", (), True),
        ("0.0.0.0", ("--token", "abc123"), False),
        ("127.0.0.1", (), False),
    ],
)
def test_serves_and_warns_when_exposed(
    sqlite_url: str, host: str, extra: tuple[str, ...], warned: bool
) -> None:
    port = _free_port()
    proc, lines = _start("--database-url", sqlite_url, "--host", host, "--port", str(port), *extra)
    try:
        assert any(f"http://{host}:{port}/" in line for line in lines), lines
        assert any("WARNING" in line for line in lines) is warned, lines
        headers = {"Authorization": "Bearer abc123"} if extra else {}
        # The socket listens before the URL is printed: this waits in the backlog.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/", headers=headers)
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stderr is not None
        proc.stderr.close()


def test_refuses_a_bad_database(tmp_path: object) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "riverboat.cli", "ui", "--database-url", "mysql://nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "database_url" in done.stderr and "Traceback" not in done.stderr


def _status(port: int, host_header: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/", headers={"Host": host_header})
    status = conn.getresponse().status
    conn.close()
    return status


def test_answers_only_its_own_host_names(sqlite_url: str) -> None:
    port = _free_port()
    proc, lines = _start(
        "--database-url",
        sqlite_url,
        "--port",
        str(port),
        "--allowed-host",
        "jobs.internal",
        "--allowed-host",
        ".ops.example",
    )
    try:
        assert any(f"http://127.0.0.1:{port}/" in line for line in lines), lines
        for host, wanted in (
            (f"127.0.0.1:{port}", 200),
            (f"localhost:{port}", 200),
            ("jobs.internal", 200),
            ("a.ops.example:443", 200),
            ("rebind.evil.example", 400),
        ):
            assert _status(port, host) == wanted, host
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stderr is not None
        proc.stderr.close()


def test_every_address_without_allowed_host_says_which_names_answer(sqlite_url: str) -> None:
    port = _free_port()
    proc, lines = _start(
        "--database-url", sqlite_url, "--host", "0.0.0.0", "--port", str(port), "--token", "x1"
    )
    try:
        assert any("--allowed-host" in line for line in lines), lines
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stderr is not None
        proc.stderr.close()


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_a_port_out_of_range_is_one_line(
    sqlite_url: str, port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # It was socket's OverflowError as a traceback.
    from riverboat.cli import main

    assert main(["ui", "--database-url", sqlite_url, "--port", port]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("riverboat: error: port: must be 0 to 65535 (0: any free port)")
