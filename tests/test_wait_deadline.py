"""``job_wait`` and ``workflow_wait`` keep their timeout while their LISTEN connection is
being opened: the connect is part of the wait. Through :class:`FreezingProxy`, the
client's pool connection (open before) works and every new connection hangs, as a
server that stops accepting would. Before, the sync client waited up to 10 s for the
LISTEN connection whatever the timeout, and the async client as long as the connect
took (here: for ever)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

import riverboat
from riverboat import WaitTimeoutError
from tests.reliability._support import FreezingProxy
from tests.waiting import wait_until

# Far above the 0.5 s asked for and far below the 10 s (or the hang) it took.
BOUND = 5.0


@pytest.fixture
def hanging_new_connections(pg_url: str) -> Iterator[tuple[FreezingProxy, str]]:
    import psycopg

    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    proxy = FreezingProxy(str(info.get("host", "127.0.0.1")), int(info.get("port") or 5432))
    proxy.start()
    yield proxy, proxy.url(pg_url)
    proxy.close()


def test_sync_job_wait_keeps_its_timeout_while_listen_connects(
    hanging_new_connections: tuple[FreezingProxy, str], pg_schema: str
) -> None:
    proxy, url = hanging_new_connections
    with riverboat.Client(url, schema=pg_schema) as client:
        job = client.insert({}, kind="nobody_works_it").job  # the pool's connection
        proxy.freeze(new_too=True, open_too=False)
        started = time.monotonic()
        with pytest.raises(WaitTimeoutError):
            client.job_wait(job.id, timeout=0.5)
        assert time.monotonic() - started < BOUND


async def test_async_waits_keep_their_timeout_while_listen_connects(
    hanging_new_connections: tuple[FreezingProxy, str], pg_schema: str
) -> None:
    proxy, url = hanging_new_connections
    async with riverboat.AsyncClient(url, schema=pg_schema) as client:
        wf = riverboat.Workflow("waits")
        wf.add("only", {}, kind="nobody_works_it")
        info = await client.workflow_insert(wf)
        proxy.freeze(new_too=True, open_too=False)
        for wait in (
            lambda: client.job_wait(info.tasks[0].job.id, timeout=0.5),
            lambda: client.workflow_wait(wf.id, timeout=0.5),
        ):
            started = time.monotonic()
            with pytest.raises(WaitTimeoutError):
                await asyncio.wait_for(wait(), 2 * BOUND)
            assert time.monotonic() - started < BOUND


def test_a_forked_child_waits_without_its_parents_listen_thread(
    pg_url: str, pg_schema: str
) -> None:
    """A process forked after a wait (gunicorn --preload, multiprocessing's fork) has no
    listen thread, though it inherits the parent's record of one: each wait there gave
    that thread's loop its LISTEN connection to open, which nothing ran, and waited out
    the 10 s join before its first poll."""
    import os

    with riverboat.Client(pg_url, schema=pg_schema) as client:
        first = client.insert({}, kind="nobody_works_it").job
        with pytest.raises(WaitTimeoutError):
            client.job_wait(first.id, timeout=0.2)  # the listen thread is up
        job = client.insert({}, kind="nobody_works_it").job
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report through the exit code, never return to pytest
            code = 1
            try:
                with riverboat.Client(pg_url, schema=pg_schema) as child:
                    os.write(ready_w, b"w")
                    started = time.monotonic()
                    done = child.job_wait(job.id, timeout=2 * BOUND)
                    quick = time.monotonic() - started < BOUND
                    code = 0 if done.state == riverboat.JobState.CANCELLED and quick else 2
            finally:
                os._exit(code)
        import psycopg

        os.close(ready_w)
        with psycopg.connect(pg_url, autocommit=True) as listener:
            listener.execute(f'LISTEN "{pg_schema}.riverboat_wait"')
            assert os.read(ready_r, 1) == b"w"
            # Finalized once the child listens (it says so), or when it gave up joining.
            for _ in listener.notifies(timeout=2 * BOUND, stop_after=1):
                pass
        client.job_cancel(job.id)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def _with_app(url: str, app: str) -> str:
    return url + ("&" if "?" in url else "?") + f"application_name={app}"


@pytest.mark.parametrize("waits_for", ["job", "workflow"])
def test_a_wait_outlives_its_connections_being_cut(
    pg_url: str, pg_schema: str, waits_for: str
) -> None:
    """Every connection of the waiting client is terminated during the wait (as a
    server restart does): the next read failed and ended the wait with a DriverError
    (3 of 6 runs with a real restart). The wait asks again at its next pause and
    returns the job once another client finalizes it."""
    import psycopg

    app = f"rb_wait_cut_{waits_for}"
    with riverboat.Client(_with_app(pg_url, app), schema=pg_schema) as waiter:
        if waits_for == "job":
            job = waiter.insert({}, kind="nobody_works_it").job
        else:
            flow = riverboat.Workflow(name="cut")
            flow.add("only", {}, kind="nobody_works_it")
            job = waiter.workflow_insert(flow).tasks[0].job
        result: list[object] = []
        started = threading.Event()

        def wait() -> None:
            started.set()
            try:
                if waits_for == "job":
                    result.append(waiter.job_wait(job.id, timeout=30))
                else:
                    result.append(
                        waiter.workflow_wait(job.metadata["riverboat_workflow"]["id"], timeout=30)
                    )
            except Exception as exc:  # the assertion below shows it
                result.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()
        started.wait(5)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            # Once the wait listens (its first reads done), until at least one of the
            # waiter's connections (pool, LISTEN) was cut.
            wait_until(
                lambda: admin.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE application_name = %s AND query ILIKE 'LISTEN%%'",
                    (app,),
                ).fetchone()[0],  # type: ignore[index]
                timeout=10,
                what="the waiter's LISTEN",
            )
            cut = 0
            deadline = time.monotonic() + 10
            while not cut and time.monotonic() < deadline:
                rows = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (app,),
                ).fetchall()
                cut = sum(1 for (ok,) in rows if ok)
            assert cut
        with riverboat.Client(pg_url, schema=pg_schema) as other:
            other.job_cancel(job.id)
        thread.join(40)
    assert len(result) == 1 and not isinstance(result[0], Exception), result
