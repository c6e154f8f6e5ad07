"""Shared fixtures: a real Postgres server for the session, a migrated schema per test,
and a migrated SQLite file per test. Nothing is mocked.

Running every migration for each of the suite's ~1,000 database tests cost more than a
minute, so the session migrates one template per dialect and each test gets a clone:
a Postgres schema rebuilt from ``pg_dump`` of the migrated template schema (one round
trip, about half the cost of the migrations), a SQLite file copied from the migrated
template file. A Postgres clone that a test left as it found it (same catalog, no
client still connected) is emptied and handed to the next test instead of dropped:
cheaper for the server than a new clone (tests/templates.py). tests/test_templates.py
checks that a clone's catalog equals a freshly migrated one. The migration tests
(tests/migrations, tests/sqlite) override these fixtures to run the real migrations.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

# Bytecode is written (to __pycache__, which git ignores and the wheel leaves out) even
# where the environment says not to (PYTHONDONTWRITEBYTECODE, as container images set):
# without it every subprocess the suite starts (worker processes, the CLI, docs
# snippets: hundreds) compiled riverboat from source again, ~0.3 s of CPU each, and each
# xdist worker rewrote every test module. Before the imports below, so they are cached.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

from tests.pgserver import PgServer  # noqa: E402
from tests.templates import SchemaCloner, migrate_sqlite_file  # noqa: E402


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """URL of a Postgres server: RIVERBOAT_TEST_DATABASE_URL, or a throwaway cluster."""
    url = os.environ.get("RIVERBOAT_TEST_DATABASE_URL")
    if url:
        yield url
        return
    server = PgServer()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


# Tests whose assertions hold only when the machine is not saturated (faults injected on
# a clock, leases and terms measured in fractions of a second, a 0.3 s bench window).
# scripts/test runs them after the parallel part, on their own (``--serial-tests``) and
# two at a time (one per core of the 2-core VM; mostly they wait): about 33 s of wall
# time, 55 s one at a time.
SERIAL = (
    "tests/bench/test_bench_smoke.py::test_bench_duration_caps_the_working_phase",
    # Riverboat leads with a 2 s leader row beside Go River on one SQLite file: at nice
    # 19 on a saturated machine its renewal waited past that once, and River took over.
    "tests/interop/test_fleet.py::test_mixed_fleet_works_each_job_once_and_hands",
    "tests/leadership/test_request_resign.py",
    "tests/reliability/test_db_faults.py",
    "tests/reliability/test_leader_faults.py",
    "tests/runtime/test_lifecycle.py::test_connections_are_leased_per_statement",
    "tests/sqlite/test_concurrency.py",
)


# The longest tests, with their seconds in a full parallel run on the 2-core VM (load
# ~6.5; ``--durations``). pytest-xdist's worksteal hands each worker a contiguous slice
# of the collection and a worker runs its slice in order; stealing takes the back half
# of a queue. So tests that sit together in the collection run one after another on one
# worker: tests/bench alone was some 280 s of worker 0's slice, the parallel part's
# critical path. Under xdist, these go to the fronts of the slices instead, each to the
# slice with the least so far (``_spread_longest``).
LONGEST = (
    ("tests/bench/test_bench_smoke.py::test_bench_json_shape_on_postgres[psycopg]", 70),
    ("tests/bench/test_bench_smoke.py::test_bench_json_shape_on_postgres[sqlalchemy]", 40),
    ("tests/test_packaging.py::test_built_wheel_installs_and_runs_in_a_fresh_venv", 36),
    ("tests/bench/test_bench_smoke.py::test_compare_river_works_the_backlog_with_river_too", 25),
    ("tests/bench/test_bench_smoke.py::test_bench_json_shape_on_postgres[asyncpg]", 20),
    ("tests/reliability/test_worker_crash.py::test_sigkill_at_random_points_postgres", 22),
    ("tests/bench/test_bench_smoke.py::test_bench_on_postgres_without_the_sqlite_extra", 17),
    ("tests/migrations/test_cli.py::test_errors_are_one_line", 18),
    ("tests/reliability/test_worker_crash.py::test_sigkill_at_random_points_sqlite", 15),
    ("tests/test_demo.py::test_demo_reuses_its_database_and_clears_its_own_rows", 14),
    ("tests/bench/test_bench_smoke.py::test_bench_process_part_reports_overhead", 14),
    ("tests/bench/test_bench_smoke.py::test_bench_scale_part_works_every_job", 14),
    ("tests/flow/test_flow_limits_view.py::test_local_limits_and_sequences_show_their_use", 12),
    ("tests/reliability/test_shutdown.py::test_sigterm_finishes_running_jobs_and_flushes", 10),
    ("tests/process_executor/test_worker_process.py::test_a_worker_registered_by_decorator", 10),
    ("tests/leadership/test_periodic_durable.py::test_ticks_survive_kill_leader_change", 12),
    ("tests/flow/test_flow.py::test_a_global_limit_holds_while_a_killed_process_leaves", 11),
    ("tests/leadership/test_periodic_fleet_changes.py::test_runtime_changes_on_a_follower", 11),
    ("tests/test_workflow.py::test_a_workflow_survives_its_leader_worker_killed_mid_task", 9),
    ("tests/bench/test_bench_smoke.py::test_workflow_part_measures_the_graph", 8),
    ("tests/test_insert_validation.py::test_fuzz_kind", 12),
    ("tests/runtime/test_processes.py::test_two_processes_work_10000_jobs_exactly_once", 11),
    ("tests/reliability/test_dead_workers.py::", 9),
    # The timing-sensitive tests' own run (SERIAL, two workers), seconds on its quiet
    # machine: in collection order, the three fault tests of test_db_faults.py (22 s)
    # came in one worker's half with test_leader_faults.py, and that worker ran 34 s
    # while the other idled after 26.
    ("tests/reliability/test_db_faults.py::test_proxy_cuts_every_connection", 14),
    ("tests/interop/test_fleet.py::test_mixed_fleet_works_each_job_once_and_hands", 16),
    ("tests/reliability/test_frozen_connection.py::test_sigterm_while_every_connection", 9),
    ("tests/reliability/test_db_faults.py::test_terminate_backends_in_a_loop", 6),
    ("tests/process_executor/test_process_executor.py::test_a_timeout_counts_from_when", 4),
    ("tests/reliability/test_frozen_connection.py::test_worker_drops_frozen_connections", 4),
    ("tests/runtime/test_health.py::test_an_outage_is_logged_in_a_few_lines", 4),
    ("tests/reliability/test_leader_faults.py::test_frozen_leader_steps_down_before_acting", 4),
    ("tests/process_executor/test_frozen_parent.py::test_a_job_holding_the_gil_past_the", 3),
    ("tests/reliability/test_db_faults.py::test_server_restart_mid_run", 2),
    ("tests/process_executor/test_hard_stop_bounds.py::test_a_hard_stop_of_a_child_stop", 3),
    ("tests/process_executor/test_hard_stop_bounds.py::test_process_job_middleware_stu", 2),
)


# The modules that drive chromium (the ``browser`` fixture: one chromium for a run of
# browser tests, tests/ui/conftest.py Chromium; playwright's sync API must be gone
# before an async test starts its loop).
# They sat at the back of the collection, where the other workers stole them at the
# end, one or two tests each: each thief started its own chromium (one to two seconds
# of CPU, up to nine of wall time under the suite's load; 43 s of setup for the 8 tests
# of test_workflow_page.py). Under xdist they run together at the front of one slice
# (``_spread_longest``), as one block of BROWSER_SECONDS.
BROWSER_MODULES = (
    "tests/ui/test_browser.py::",
    "tests/ui/test_limits_view.py::",
    "tests/ui/test_periodic_page.py::",
    "tests/ui/test_workers_page.py::",
    "tests/ui/test_workflow_page.py::",
    "tests/interop/test_river_ui.py::",
)
BROWSER_SECONDS = 80


def _spread_longest(items: list[pytest.Item], workers: int) -> None:
    """Reorders ``items`` so that each of ``workers`` contiguous slices (cut as xdist's
    worksteal cuts its first distribution) starts with its share of LONGEST, and one of
    them with the BROWSER_MODULES' tests (in collection order), assigned longest first
    to the slice with the least time so far. Deterministic, so every worker collects the
    same order, as xdist requires."""
    browser = [item for item in items if item.nodeid.startswith(BROWSER_MODULES)]
    weight = {  # a browser test is placed with its block (once), whatever LONGEST says
        item.nodeid: w
        for item in items
        for prefix, w in LONGEST
        if item.nodeid.startswith(prefix) and not item.nodeid.startswith(BROWSER_MODULES)
    }
    if workers < 2 or not (weight or browser):
        return
    sizes, left = [], len(items)
    for slot in range(workers):
        sizes.append(left // (workers - slot))
        left -= sizes[-1]
    blocks = [([item], weight[item.nodeid]) for item in items if item.nodeid in weight]
    if browser:
        blocks.append((browser, BROWSER_SECONDS))
    fronts: list[list[pytest.Item]] = [[] for _ in range(workers)]
    load = [0] * workers
    for block, seconds in sorted(blocks, key=lambda b: -b[1]):
        slot = min(range(workers), key=lambda k: (load[k], k))
        fronts[slot] += block
        load[slot] += seconds
    placed = {id(item) for front in fronts for item in front}
    rest = iter([item for item in items if id(item) not in placed])
    ordered: list[pytest.Item] = []
    for slot, size in enumerate(sizes):
        ordered += fronts[slot]
        ordered += [item for _, item in zip(range(size - len(fronts[slot])), rest, strict=False)]
    ordered += list(rest)
    items[:] = ordered


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--serial-tests",
        choices=("include", "only", "skip"),
        default="include",
        help="the timing-sensitive tests (tests/conftest.py SERIAL, marked serial): run them "
        "with the others (include), on their own (only) or not at all (skip); scripts/test "
        "runs the rest on pytest-xdist workers with skip, then these with only on two",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``long`` run only with ``RIVERBOAT_LONG=1`` (``./scripts/test --long``);
    ``--serial-tests`` selects the SERIAL tests in or out; on xdist workers the LONGEST
    tests are spread over the workers' first slices."""
    if os.environ.get("RIVERBOAT_LONG") != "1":
        skip = pytest.mark.skip(reason="long scenario: run with ./scripts/test --long")
        for item in (i for i in items if "long" in i.keywords):
            item.add_marker(skip)
    for item in items:
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
    mode = config.getoption("--serial-tests")
    if mode != "include":
        keep: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        for item in items:
            (keep if ("serial" in item.keywords) == (mode == "only") else dropped).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
    _spread_longest(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a browser test's teardown, stops the chromium it shared (tests/ui/conftest.py
    Chromium) unless the next test uses it too."""
    try:
        return (yield)
    finally:
        ui = sys.modules.get("tests.ui.conftest")
        chromium = getattr(ui, "CHROMIUM", None)
        if chromium is not None and chromium.started:
            if nextitem is None or "browser" not in getattr(nextitem, "fixturenames", ()):
                chromium.stop()


@pytest.fixture
def test_seed(request: pytest.FixtureRequest) -> int:
    """The seed of a randomized test: ``RIVERBOAT_TEST_SEED`` to replay one, else a new
    one. It is printed (pytest shows it with a failure's output) and recorded in the
    JUnit report as the ``seed`` property."""
    import random

    given = os.environ.get("RIVERBOAT_TEST_SEED")
    seed = int(given) if given else random.randrange(1 << 30)
    print(f"random seed {seed}: replay with RIVERBOAT_TEST_SEED={seed}")
    request.node.user_properties.append(("seed", seed))
    return seed


@pytest.fixture(scope="session")
def pg_schema_cloner(pg_url: str) -> Iterator[SchemaCloner]:
    cloner = SchemaCloner(pg_url)
    yield cloner
    cloner.close()


@pytest.fixture
def pg_schema(pg_url: str, pg_schema_cloner: SchemaCloner) -> Iterator[str]:
    """A schema at River's latest version, as a fresh clone of the session's migrated
    template is: the one the worker's last test left as it found it, emptied, else a
    new clone; afterwards emptied for the next test, or dropped when the test changed
    its catalog (tests/templates.py SchemaCloner)."""
    schema = pg_schema_cloner.take()
    yield schema
    pg_schema_cloner.give_back(schema)


@pytest.fixture
def pg_driver(pg_url: str, pg_schema: str) -> Iterator[object]:
    from riverboat.drivers.psycopg import PsycopgDriver

    driver = PsycopgDriver(pg_url, schema=pg_schema)
    yield driver
    driver.close()


@pytest.fixture
async def apg_driver(pg_url: str, pg_schema: str) -> AsyncIterator[object]:
    from riverboat.drivers.psycopg import AsyncPsycopgDriver

    driver = AsyncPsycopgDriver(pg_url, schema=pg_schema)
    yield driver
    await driver.close()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once for the session. Closing its last connection
    checkpoints the write-ahead log into the file, so the file alone is the database."""
    path = tmp_path_factory.mktemp("sqlite-template") / "riverboat.sqlite3"
    migrate_sqlite_file(path)
    leftovers = [p.name for p in path.parent.iterdir() if p != path]
    assert not leftovers, f"the template left {leftovers} next to it"
    return path


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    """A migrated SQLite database file (a copy of the session's migrated template) in the
    test's temporary directory."""
    path = tmp_path / "riverboat.sqlite3"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"
