"""riverboat as users install it: the built wheel and sdist pass ``twine check``, carry the
migrations and the dashboard's files, and the wheel installed in a fresh virtualenv runs
``riverboat --version``, the demo and the dashboard. The docs' install lines are forms
that work (riverboat is not on PyPI)."""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

import riverboat

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _run(*command: str | Path, cwd: Path | None = None, timeout: float = 300) -> str:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_version_option() -> None:
    out = _run(sys.executable, "-m", "riverboat.cli", "--version")
    assert out.strip() == f"riverboat {riverboat.__version__}"


def test_every_install_line_in_the_docs_installs_from_a_checkout_or_a_wheel() -> None:
    """`pip install "riverboat[x]"` answers "No matching distribution": each install line
    names the checkout (`.[x]`) or a built wheel, and each page with one says where the
    package comes from."""
    for page in DOCS:
        text = page.read_text()
        lines = [line for line in text.splitlines() if "pip install" in line]
        for line in lines:
            if "not on PyPI" in line:  # the line that says why the others look as they do
                continue
            for target in re.findall(r"pip install ((?:-e )?['\"]?[^\s'\"`]+)", line):
                target = target.removeprefix("-e ").strip("'\"")
                assert not target.startswith("riverboat"), f"{page.name}: {line}"
        if any(re.search(r"pip install (-e )?['\"]?\.\[", line) for line in lines):
            assert "checkout" in text, f"{page.name} installs from '.' without saying from what"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_built_wheel_installs_and_runs_in_a_fresh_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # --no-isolation: the build backend (hatchling) comes from the dev extras, so the test
    # needs no index; a user's plain `python -m build` fetches it into an isolated env.
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, REPO)
    wheels = list(dist.glob("riverboat-*-py3-none-any.whl"))
    sdists = list(dist.glob("riverboat-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(dist.iterdir())
    _run(sys.executable, "-m", "twine", "check", "--strict", wheels[0], sdists[0])

    names = zipfile.ZipFile(wheels[0]).namelist()
    for wanted in (
        "riverboat/py.typed",
        "riverboat/ui/static/htmx.min.js",
        "riverboat/ui/static/style.css",
        "riverboat/ui/templates/base.html",
        "riverboat/migrations/postgres/002_initial_schema.up.sql",
        "riverboat/migrations/sqlite/002_initial_schema.up.sql",
    ):
        assert wanted in names, wanted
    assert not any(n.startswith(("tests/", "docs/")) for n in names)
    with tarfile.open(sdists[0]) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert "src/riverboat/ui/static/htmx.min.js" in members
    assert "src/riverboat/migrations/sqlite/008_job_id_autoincrement.up.sql" in members
    assert not any(m.startswith((".venv", ".ci")) for m in members)

    env_dir = tmp_path / "venv"
    long = os.environ.get("RIVERBOAT_LONG") == "1"
    venv.create(env_dir, with_pip=long)
    python = env_dir / "bin" / "python"
    if long:
        # As a user would: the wheel and its extras' dependencies from the package index.
        _run(python, "-m", "pip", "install", "-q", f"{wheels[0]}[ui,demo]", timeout=600)
    else:
        # Offline: the wheel itself, installed by this environment's pip into the venv
        # (``--python``: no pip bootstrapped into it, which took ~5 s), its dependencies
        # seen from this test run's environment (a .pth line appends that site-packages
        # after the venv's own, so the wheel's riverboat wins over the editable one).
        _run(
            sys.executable, "-m", "pip", "--python", python,
            "install", "-q", "--no-deps", "--no-index", wheels[0],
        )  # fmt: skip
        site = Path(
            subprocess.check_output(
                [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                text=True,
            ).strip()
        )
        (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    riverboat_cli = env_dir / "bin" / "riverboat"
    where = _run(python, "-c", "import riverboat; print(riverboat.__file__)")
    assert str(env_dir) in where, where

    assert _run(riverboat_cli, "--version").strip() == f"riverboat {riverboat.__version__}"
    work = tmp_path / "work"
    work.mkdir()
    out = _run(riverboat_cli, "demo", "--plain", "--jobs", "5", cwd=work, timeout=120)
    assert "summary" in out and (work / "riverboat-demo.sqlite3").exists()
    assert "--allowed-host" in _run(riverboat_cli, "ui", "--help")

    port = _free_port()
    url = f"sqlite:///{work / 'riverboat-demo.sqlite3'}"
    proc = subprocess.Popen(
        [riverboat_cli, "ui", "--database-url", url, "--port", str(port)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "riverboat ui: http://" in line:
                break
        for path, marker in (("/", "Overview"), ("/static/htmx.min.js", "htmx")):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read().decode()
            conn.close()
            assert response.status == 200 and marker in body, (path, body[:300])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.mark.parametrize("extra", ["otel"])
def test_otel_extra_brings_the_sdk_the_docs_import(extra: str) -> None:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = project["optional-dependencies"][extra]
    assert any(r.startswith("opentelemetry-sdk") for r in requirements), requirements
