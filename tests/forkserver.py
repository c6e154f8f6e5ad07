"""Python scripts run as ``python FLAGS SCRIPT``, in a process forked from a server that
has riverboat and its drivers imported already.

A new interpreter costs its start-up and riverboat's imports, about 0.3 s of CPU on
the 2-core VM, several times that in wall time under the suite's load: the docs'
blocks (tests/docblocks.py) paid it 70 times a run. Each script still gets a process
of its own, forked from the server (started once per pytest process and per set of
interpreter flags, with those flags: ``-W error`` applies to what it imports as well):
its own stdio (the caller's pipes, passed over a Unix socket), working directory,
environment, ``sys.argv`` and ``sys.path[0]``, ``__main__`` and exit status; atexit
handlers and non-daemon threads run at its exit as at any interpreter's. What differs
from a fresh interpreter: the modules preloaded below are imported already (their
import-time warnings met the server's flags once), and the hash seed is the server's.
A request whose environment would change how an interpreter starts (``PYTHON*``
variables) runs in a plain subprocess, and so does everything when the server cannot
start.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time

__all__ = ["run_python"]

PRELOAD = (
    "asyncio",
    "riverboat",
    "riverboat.cli",
    "riverboat.drivers.psycopg",
    "riverboat.drivers.sqlite",
    "psycopg_pool",
)

# The server: reads one request at a time (JSON and the three stdio descriptors),
# forks, and reports the child's pid, then its wait status. The child leaves the loop
# by exiting, as the script's own interpreter would.
_SERVER = r"""
import json, os, runpy, socket, sys, traceback
sock = socket.socket(fileno=int(sys.argv[1]))
for name in sys.argv[2].split(","):
    __import__(name)
sock.sendall(b"ready\n")
while True:
    msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
    if not msg:
        break
    req = json.loads(msg)
    pid = os.fork()
    if pid == 0:
        sock.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = list(req["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
        del req, msg, fds, pid
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit:
            raise
        except BaseException:
            traceback.print_exc()
            sys.exit(1)
        sys.exit(0)
    for fd in fds:
        os.close(fd)
    sock.sendall(json.dumps(pid).encode() + b"\n")
    _, status = os.waitpid(pid, 0)
    sock.sendall(json.dumps(status).encode() + b"\n")
"""


class _Server:
    def __init__(self, flags: tuple[str, ...]) -> None:
        self.flags = flags
        ours, theirs = socket.socketpair()
        self.sock = ours
        self.env = dict(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, *flags, "-c", _SERVER, str(theirs.fileno()), ",".join(PRELOAD)],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        theirs.close()
        self.reader = ours.makefile("rb")
        if self.reader.readline() != b"ready\n":
            err = self.proc.stderr.read().decode() if self.proc.stderr else ""
            self.close()
            raise RuntimeError(f"the fork server did not start: {err}")

    def run(
        self, argv: list[str], cwd: str, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        stdin_r = os.open(os.devnull, os.O_RDONLY)
        request = json.dumps({"argv": argv, "cwd": cwd, "env": env}).encode()
        try:
            socket.send_fds(self.sock, [request], [stdin_r, stdout_w, stderr_w])
        finally:
            for fd in (stdin_r, stdout_w, stderr_w):
                os.close(fd)
        pid = json.loads(self.reader.readline())
        # Both pipes read at once, as Popen.communicate does: a script that fills one
        # while the other is read never blocks.
        chunks: dict[int, list[bytes]] = {stdout_r: [], stderr_r: []}
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            for fd in chunks:
                selector.register(fd, selectors.EVENT_READ)
            try:
                while selector.get_map():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        os.kill(pid, signal.SIGKILL)
                        json.loads(self.reader.readline())  # its status, once reaped
                        raise subprocess.TimeoutExpired(
                            argv, timeout, b"".join(chunks[stdout_r]), b"".join(chunks[stderr_r])
                        )
                    for key, _ in selector.select(left):
                        data = os.read(key.fd, 1 << 16)
                        if data:
                            chunks[key.fd].append(data)
                        else:
                            selector.unregister(key.fd)
            finally:
                os.close(stdout_r)
                os.close(stderr_r)
        status = json.loads(self.reader.readline())
        return subprocess.CompletedProcess(
            argv,
            os.waitstatus_to_exitcode(status),
            b"".join(chunks[stdout_r]).decode(),
            b"".join(chunks[stderr_r]).decode(),
        )

    def close(self) -> None:
        self.sock.close()
        self.reader.close()
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


_servers: dict[tuple[str, ...], _Server | None] = {}


@atexit.register
def _close_servers() -> None:
    for server in _servers.values():
        if server is not None:
            server.close()
    _servers.clear()


def _starts_differently(env: dict[str, str], server_env: dict[str, str]) -> bool:
    keys = {k for k in (*env, *server_env) if k.startswith("PYTHON")}
    return any(env.get(k) != server_env.get(k) for k in keys)


def run_python(
    flags: tuple[str, ...],
    script: str,
    *,
    cwd: str,
    env: dict[str, str],
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """``python FLAGS SCRIPT`` in ``cwd`` with exactly ``env``: its exit code, stdout
    and stderr, as ``subprocess.run(..., capture_output=True, text=True)`` returns
    them (and ``subprocess.TimeoutExpired`` after ``timeout``)."""
    argv = [script]
    if flags not in _servers:
        try:
            _servers[flags] = _Server(flags)
        except (OSError, RuntimeError):
            _servers[flags] = None
    server = _servers[flags]
    if server is None or _starts_differently(env, server.env):
        return subprocess.run(
            [sys.executable, *flags, script],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    run = server.run(argv, cwd, env, timeout)
    run.args = [sys.executable, *flags, script]
    return run
