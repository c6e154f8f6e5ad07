"""``riverboat worker MODULE:ATTR`` with a mistyped target: one line, exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from riverboat.cli import main


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "workerapp_typo.py").write_text(
        "import riverboat\nclient = riverboat.AsyncClient('sqlite:///x.sqlite3')\n"
        "def send_email(job): pass\n"
        "async def build(): return client\n"
    )
    (tmp_path / "workerapp_broken.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("nosuchmod_xyz:client", "no module named 'nosuchmod_xyz' (from nosuchmod_xyz:client)"),
        ("workerapp_typo.sub:client", "no module named 'workerapp_typo.sub'"),
        ("workerapp_typo:clent", "workerapp_typo has no attribute 'clent'; did you mean client?"),
        ("workerapp_typo", "must look like package.module:attribute"),
        ("riverboat:Client", "riverboat:Client is a class; name a client, or a function"),
        # The work function named instead of the factory: a TypeError's traceback.
        ("workerapp_typo:send_email", "workerapp_typo:send_email takes arguments"),
        # A coroutine never awaited, beside the error.
        ("workerapp_typo:build", "workerapp_typo:build is an async function"),
    ],
)
def test_a_mistyped_target_is_one_line(
    app_dir: Path, target: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["worker", target]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("riverboat: error: target: ")
    assert expected in err


def test_a_module_whose_own_import_fails_keeps_its_traceback(app_dir: Path) -> None:
    # The user's module exists; what it imports does not: that traceback is theirs.
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_xyz"):
        main(["worker", "workerapp_broken:client"])


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--processes", "0"], "--processes: must be 1 to 256"),
        # A typo started processes until memory ran out.
        (["--processes", "100000"], "--processes: must be 1 to 256"),
        # These were a traceback from the metrics server, in every process.
        (["--metrics-port", "70000"], "--metrics-port: must be a TCP port, 1 to 65535"),
        (["--metrics-port", "-1"], "--metrics-port: must be a TCP port, 1 to 65535"),
        (["--metrics-port", "65535", "--processes", "2"], "with PORT+1 at most 65535"),
    ],
)
def test_out_of_range_worker_flags_are_one_line_before_anything_starts(
    app_dir: Path, flags: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The target is never imported: the flags are refused first.
    assert main(["worker", "nosuchmod_xyz:client", *flags]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("riverboat: error: ")
    assert expected in err
