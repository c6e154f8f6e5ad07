"""The operator's commands end when the database stops answering without closing their
connections (a stalled proxy, a partitioned host): every call has a deadline (60 s,
and --timeout plus 2 s for the commands that take one). `jobs tail --timeout 3` and
`jobs wait --timeout 3` ran for minutes; each now ends with one line, exit 1."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import riverboat
from riverboat import Workflow
from tests.cli_in_process import cli_in_process
from tests.reliability._support import FreezingProxy
from tests.waiting import wait_until


@pytest.fixture
def proxy(pg_url: str) -> Iterator[FreezingProxy]:
    port = int(pg_url.rsplit(":", 1)[1].split("/", 1)[0])
    frozen = FreezingProxy("127.0.0.1", port).start()
    yield frozen
    frozen.close()


def test_waits_and_tail_end_when_the_database_stops_answering(
    pg_url: str, pg_schema: str, proxy: FreezingProxy
) -> None:
    with riverboat.Client(pg_url, schema=pg_schema) as client:
        job = client.insert({}, kind="nobody_works_it").job
        wf = Workflow("frozen")
        wf.add("only", {}, kind="nobody_works_it")
        client.workflow_insert(wf)
    url = proxy.url(pg_url)
    for argv in (
        ["jobs", "wait", str(job.id), "--timeout", "1"],
        ["workflows", "wait", wf.id, "--timeout", "1"],
        ["jobs", "tail", "--timeout", "1"],
    ):
        connected = proxy.connections
        done: list[subprocess.CompletedProcess[str]] = []

        def run(argv: list[str] = argv, done: list[Any] = done) -> None:
            done.append(cli_in_process(*argv, "--database-url", url, "--schema", pg_schema))

        command = threading.Thread(target=run)
        command.start()

        # Frozen once the command is connected (its pool's connection and the one that
        # proved the URL): whatever it does next gets no answer.
        def command_connected(connected: int = connected) -> bool:
            return proxy.connections >= connected + 2

        wait_until(command_connected, what="the command connected")
        proxy.freeze(new_too=True)
        command.join(60)  # it ran for minutes (the test's own timeout) before
        assert not command.is_alive(), argv
        assert done[0].returncode == 1, (argv, done[0].stderr)
        assert done[0].stderr.count("\n") == 1 and "riverboat: error:" in done[0].stderr, argv
        proxy.thaw()
