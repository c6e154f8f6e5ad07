"""The collector setting ``riverboat worker`` applies to its own processes
(riverboat.runtime.collector), and only there."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverboat import Client, InsertManyParams, InvalidInputError
from riverboat.drivers.sqlite import SqliteDriver
from riverboat.migrations import Migrator
from riverboat.runtime.collector import GC_THRESHOLD_DEFAULT, GC_THRESHOLD_ENV, tune_collector

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def restore_gc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(GC_THRESHOLD_ENV, raising=False)
    saved = gc.get_threshold()
    gc.set_threshold(700, *saved[1:])
    try:
        yield
    finally:
        gc.set_threshold(*saved)


def test_raises_the_first_threshold_and_keeps_the_others(restore_gc: None) -> None:
    before = gc.get_threshold()
    assert tune_collector() == GC_THRESHOLD_DEFAULT
    assert gc.get_threshold() == (GC_THRESHOLD_DEFAULT, *before[1:])


def test_never_lowers_a_threshold_already_higher(restore_gc: None) -> None:
    gc.set_threshold(50_000)
    assert tune_collector(10_000) == 50_000
    assert gc.get_threshold()[0] == 50_000


def test_zero_leaves_python_alone(restore_gc: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GC_THRESHOLD_ENV, "0")
    assert tune_collector() is None
    assert gc.get_threshold()[0] == 700


@pytest.mark.parametrize("raw", ["lots", "1.5", "-3"])
def test_a_bad_setting_is_refused(
    restore_gc: None, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(GC_THRESHOLD_ENV, raw)
    with pytest.raises(InvalidInputError):
        tune_collector()
    assert gc.get_threshold()[0] == 700


def test_embedding_a_client_leaves_the_collector_alone(restore_gc: None, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'embedded.sqlite3'}"
    _migrate(url)
    with Client(url) as client:
        client.insert_many([InsertManyParams({}, kind="anything")])
    assert gc.get_threshold()[0] == 700


def _migrate(url: str) -> None:
    driver = SqliteDriver(url)
    try:
        Migrator(driver).up()
    finally:
        driver.close()


_APP = """
    import gc, os
    from riverboat import Client, QueueConfig, Workers, record_output

    workers = Workers()

    @workers.register("gc_probe")
    def gc_probe(job):
        record_output({"threshold": gc.get_threshold()[0]})

    client = Client(os.environ["PROBE_URL"], queues={"default": QueueConfig()}, workers=workers)
"""


def _worker(tmp_path: Path, url: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "gc_probe_app.py").write_text(textwrap.dedent(_APP))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "riverboat.cli",
            "worker",
            "gc_probe_app:client",
            "--exit-when-idle",
        ],
        env={
            **os.environ,
            "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO / 'src'}",
            "PROBE_URL": url,
            **env,
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("setting, expected", [(None, GC_THRESHOLD_DEFAULT), ("12345", 12345)])
def test_riverboat_worker_tunes_its_own_process(
    tmp_path: Path, setting: str | None, expected: int
) -> None:
    url = f"sqlite:///{tmp_path / 'worker.sqlite3'}"
    _migrate(url)
    with Client(url) as client:
        (result,) = client.insert_many([InsertManyParams({}, kind="gc_probe")])
    env = {GC_THRESHOLD_ENV: setting} if setting is not None else {}
    done = _worker(tmp_path, url, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    with Client(url) as client:
        job = client.job_get(result.job.id)
    assert job.state == "completed"
    assert job.metadata["output"] == {"threshold": expected}


def test_riverboat_worker_refuses_a_bad_setting_before_starting(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'worker.sqlite3'}"
    done = _worker(tmp_path, url, **{GC_THRESHOLD_ENV: "many"})
    assert done.returncode != 0
    assert GC_THRESHOLD_ENV in done.stderr
