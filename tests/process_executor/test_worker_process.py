"""The process executor under a real ``riverboat worker`` command, on Postgres and SQLite.

No orphans: a worker SIGKILLed while its children work leaves none of them running (they
die with it: PR_SET_PDEATHSIG on Linux, EOF on their pipe elsewhere), and their jobs
stay ``running`` for the rescuer, as a thread job's would. And Ctrl-C, which the
terminal sends to the whole process group, soft-stops the worker without killing the
children whose jobs it lets finish."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from riverboat import JobState
from tests.process_executor.test_process_executor import _alive
from tests.runtime.dbs import Db
from tests.waiting import wait_until

WORKER_MODULE = """
import os, time
import riverboat
from riverboat import QueueConfig
from riverboat import Workers

def hang(job):
    with open(os.path.join(os.environ["RB_TEST_DIR"], f"child-{job.id}"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(job.args.get("seconds", 3600))

workers = Workers()
workers.register("hang")(hang)

def client():
    return riverboat.AsyncClient(
        os.environ["RB_TEST_URL"],
        schema=os.environ["RB_TEST_SCHEMA"] or None,
        queues={"default": QueueConfig(max_workers=2, executor="process")},
        workers=workers,
        fetch_cooldown=0.01,
        fetch_poll_interval=0.05,
    )
"""


def _start(any_db: Db, tmp_path: Path, args: str) -> tuple[list[int], subprocess.Popen[bytes]]:
    """Two ``hang`` jobs with ``args``, and a worker in its own process group (as a
    terminal's foreground job is) working them."""
    (tmp_path / "rb_pe_worker.py").write_text(textwrap.dedent(WORKER_MODULE))
    ids = []
    for _ in range(2):
        rows = any_db.execute(
            "INSERT INTO river_job (args, kind, max_attempts, queue, state) "
            f"VALUES ('{args}', 'hang', 25, 'default', 'available') RETURNING id"
        )
        ids.append(rows[0][0])
    env = {
        **os.environ,
        "RB_TEST_URL": any_db.url,
        "RB_TEST_SCHEMA": any_db.schema or "",
        "RB_TEST_DIR": str(tmp_path),
        "PYTHONPATH": str(tmp_path),
    }
    with (tmp_path / "worker.log").open("wb") as log:  # the worker keeps its own copy
        proc = subprocess.Popen(
            [sys.executable, "-m", "riverboat.cli", "worker", "rb_pe_worker:client"],
            env=env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return ids, proc


def _children(tmp_path: Path, ids: list[int]) -> list[int]:
    files = [tmp_path / f"child-{job_id}" for job_id in ids]
    wait_until(
        lambda: all(f.exists() and f.read_text() for f in files),
        timeout=30,
        what="both jobs running in children",
    )
    return [int(f.read_text()) for f in files]


def test_children_die_with_a_sigkilled_worker(any_db: Db, tmp_path: Path) -> None:
    ids, proc = _start(any_db, tmp_path, "{}")
    try:
        children = _children(tmp_path, ids)
        assert proc.pid not in children and len(set(children)) == 2
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    wait_until(
        lambda: not any(_alive(pid) for pid in children),
        timeout=30,
        what="the children died with their parent",
    )
    states = any_db.execute("SELECT state FROM river_job ORDER BY id")
    assert [JobState(state) for (state,) in states] == [JobState.RUNNING] * 2


def test_ctrl_c_soft_stops_the_worker_and_lets_children_finish(any_db: Db, tmp_path: Path) -> None:
    ids, proc = _start(any_db, tmp_path, '{"seconds": 1}')
    try:
        children = _children(tmp_path, ids)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole group gets it
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    states = any_db.execute("SELECT state FROM river_job ORDER BY id")
    assert [JobState(state) for (state,) in states] == [JobState.COMPLETED] * 2
    assert not any(_alive(pid) for pid in children)
    log = (tmp_path / "worker.log").read_text()
    assert "started: queues default (2 slots, process pool of 2)" in log


PACKAGE_MAIN = """
import os
import sys

from riverboat import Client, Job, QueueConfig, Workers, record_output

from .helper import double

workers = Workers()


@workers.register("double", executor="process")
def work(job: Job[dict]) -> None:
    record_output({"value": double(job.args["n"]), "pid": os.getpid()})


if __name__ == "__main__":
    url, schema = sys.argv[1], sys.argv[2] or None
    queues = {"default": QueueConfig(max_workers=1)}
    with Client(url, schema=schema, queues=queues, workers=workers) as client:
        job_id = client.insert({"n": 21}, kind="double").job.id
        client.run_until_idle()
        row = client.job_get(job_id)
        assert row.metadata["output"]["value"] == 42, row
        assert row.metadata["output"]["pid"] != os.getpid()
        print("ok")
"""


def test_a_worker_registered_by_decorator_in_a_module_run_with_dash_m(
    any_db: Db, tmp_path: Path
) -> None:
    """The decorator runs before the module binds the function's name, and the child
    imports ``python -m package.module``'s main by its name (relative imports work)."""
    package = tmp_path / "jobs_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helper.py").write_text("def double(n):\n    return 2 * n\n")
    (package / "run.py").write_text(textwrap.dedent(PACKAGE_MAIN))
    run = subprocess.run(
        [sys.executable, "-W", "error", "-m", "jobs_pkg.run", any_db.url, any_db.schema or ""],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def _run_on_sqlite(tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """``python <command...>`` run in ``tmp_path``, where ``{url}`` in ``command`` is the
    url of a migrated SQLite file there; the run must exit 0."""
    from riverboat.cli import main

    url = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    assert main(["migrate", "up", "--database-url", url]) == 0
    run = subprocess.run(
        [sys.executable, *(part.format(url=url) for part in command)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return run


SCRIPT_WITH_MULTIPROCESSING = """
from __future__ import annotations

import dataclasses
import multiprocessing  # noqa: F401  (or a library that imports it: joblib, torch...)
import pickle
import sys
from typing import ClassVar

from riverboat import Client, InsertOpts, Job, QueueConfig, Workers

workers = Workers()


@dataclasses.dataclass
class Point:  # looked up by its module's name while the class is made
    registry: ClassVar[dict] = {}
    x: int = 0


@workers.register("dump")
def dump(job: Job[dict]) -> None:
    pickle.dumps(Point(1))  # pickle finds the class by its module's name


class PaymentDeclined(Exception):
    pass


@workers.register("first")
def first(job: Job[dict]) -> None:
    import multiprocessing.pool  # noqa: F401  (imported by the job itself)


@workers.register("second")
def second(job: Job[dict]) -> None:
    pass


@workers.register("declined")
def declined(job: Job[dict]) -> None:
    raise PaymentDeclined("card declined")


@workers.register("exhausted")
def exhausted(job: Job[dict]) -> None:
    next(iter([]))


seen = []


class Handler:
    def handle_error(self, job, exc):
        seen.append((job.kind, isinstance(exc, PaymentDeclined)))


if __name__ == "__main__":
    queues = {"default": QueueConfig(max_workers=1, executor="process")}
    with Client(sys.argv[1], queues=queues, workers=workers, middleware=[Handler()]) as client:
        # In this order: one slot, and jobs of one priority go in id order.
        ids = [
            client.insert({}, InsertOpts(max_attempts=1), kind=kind).job.id
            for kind in ("dump", "first", "second", "declined", "exhausted", "dump")
        ]
        client.run_until_idle()
        for job_id in ids:
            row = client.job_get(job_id)
            print(row.kind, row.state, [(e.error, "pe_script.py" in e.trace) for e in row.errors])
    print("handled", seen)
"""


def test_a_script_that_imports_multiprocessing_keeps_its_process_jobs(tmp_path: Path) -> None:
    """Importing multiprocessing points ``sys.modules["__mp_main__"]`` at the process's
    own ``__main__``: in a child, riverboat's, so every job defined in the script failed
    ("module '__main__' has no attribute 'first'"), at the top of the script or once a
    job imported it; what looks the script's module up by name (a dataclass's ClassVar,
    pickle) failed. An exception class of the script was named ``__mp_main__`` by the
    child, so an error handler's isinstance against the script's class was False; and a
    StopIteration a job raised lost its trace ("coroutine raised StopIteration")."""
    (tmp_path / "pe_script.py").write_text(textwrap.dedent(SCRIPT_WITH_MULTIPROCESSING))
    run = _run_on_sqlite(tmp_path, "pe_script.py", "{url}")
    lines = run.stdout.splitlines()
    assert lines[0] == lines.pop(5) == "dump completed []", run.stdout
    lines = lines[1:]
    assert lines[:3] == [
        "first completed []",
        "second completed []",
        "declined discarded [('PaymentDeclined: card declined', True)]",
    ], run.stdout
    assert lines[3] == (
        "exhausted discarded [('RuntimeError: the job raised StopIteration()', True)]"
    ), run.stdout
    assert lines[4] == "handled [('declined', True), ('exhausted', False)]", run.stdout


DOUBLE_IMPORT_APP = """
import sys

from riverboat import Client, InsertOpts, QueueConfig, Workers


class Declined(Exception):
    pass


workers = Workers()


@workers.register("in_main")
def in_main(job):
    raise Declined("from main")


seen = []


class Handler:
    def handle_error(self, job, exc):
        by_name = sys.modules["pkg.app"].Declined
        seen.append((job.kind, isinstance(exc, Declined), isinstance(exc, by_name)))


if __name__ == "__main__":
    from pkg import tasks

    workers.register("in_tasks")(tasks.raise_declined)
    queues = {"default": QueueConfig(max_workers=1, executor=sys.argv[2])}
    with Client(sys.argv[1], queues=queues, workers=workers, middleware=[Handler()]) as client:
        for priority, kind in enumerate(("in_main", "in_tasks"), start=1):
            client.insert({}, InsertOpts(max_attempts=1, priority=priority), kind=kind)
        client.run_until_idle()
    print(seen)
"""


def test_an_error_class_of_a_dash_m_module_imported_twice_is_both(tmp_path: Path) -> None:
    """``python -m pkg.app`` whose ``pkg.tasks`` imports ``pkg.app`` by name: the parent
    holds the module twice (``__main__`` and ``pkg.app``), the child once. The error of
    a process job is an instance of both classes (an error handler may check either);
    naming the child's module ``__main__`` had made it only the first."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "app.py").write_text(textwrap.dedent(DOUBLE_IMPORT_APP))
    (package / "tasks.py").write_text(
        "from pkg.app import Declined\n\n\ndef raise_declined(job):\n"
        '    raise Declined("from tasks")\n'
    )
    run = _run_on_sqlite(tmp_path, "-m", "pkg.app", "{url}", "process")
    assert run.stdout.strip() == "[('in_main', True, True), ('in_tasks', True, True)]", run.stdout


SCRIPT_EXITING_AT_IMPORT = """
import sys

from riverboat import Client, InsertOpts, Job, QueueConfig, Workers

if __name__ != "__main__":
    sys.exit("run this script, don't import it")  # a guard some scripts have

workers = Workers()


@workers.register("report")
def report(job: Job[dict]) -> None:
    pass


if __name__ == "__main__":
    queues = {"default": QueueConfig(max_workers=1, executor="process")}
    with Client(sys.argv[1], queues=queues, workers=workers) as client:
        job_id = client.insert({}, InsertOpts(max_attempts=1), kind="report").job.id
        client.run_until_idle()
        row = client.job_get(job_id)
        print(row.state, row.errors[-1].error if row.errors else "")
"""


def test_a_script_that_exits_at_import_fails_its_jobs_saying_why(tmp_path: Path) -> None:
    """A script that exits when imported (a guard against use as a module): the child,
    which runs it to find the job's function, got its SystemExit past the preload,
    which stopped the child's start. Each job now fails saying what happened."""
    (tmp_path / "exits_script.py").write_text(textwrap.dedent(SCRIPT_EXITING_AT_IMPORT))
    run = _run_on_sqlite(tmp_path, "exits_script.py", "{url}")
    state, _, error = run.stdout.strip().partition(" ")
    assert state == "discarded", run.stdout
    assert "exited (SystemExit: run this script, don't import it)" in error, error
