"""Rendering a bench report as a table or JSON, and comparing it with a baseline."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["compare", "render_table"]

# The seed PR's Ruby figures (ActiveRecord/Sequel "after"; µs), for the side-by-side.
SEED_OPS_US = {
    "claim_50": 3691.0,
    "claim_complete": 449.0,
    "merge_metadata": 156.0,
    "update_job": 154.0,
    "insert_pending": 272.0,
    "upsert_queue": 143.0,
}
SEED_E2E = {
    "total_cpu_ms_per_job": 0.904,
    "jobs_per_sec": 8843.0,
    "statements_per_job": 1.288,
    "connection_resets": 0,
    "followup_job_reads": 0,
}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


# A table column: its header, the row key it shows and its width (the first column is
# left-aligned, the others right-aligned through _fmt); a width of 0 appends the value
# as it is, after two spaces.
Column = tuple[str, str, int]


def _table(columns: list[Column], rows: list[dict[str, Any]]) -> list[str]:
    (first, first_key, first_width), *rest = columns

    def cell(value: Any, width: int) -> str:
        return f"  {value}" if width == 0 else f"{value:>{width}}"

    out = [f"{first:<{first_width}}" + "".join(cell(h, w) for h, _, w in rest)]
    for row in rows:
        out.append(
            f"{row[first_key]:<{first_width}}"
            + "".join(cell(row[k] if w == 0 else _fmt(row[k]), w) for _, k, w in rest)
        )
    return out


# The columns every River comparison starts with.
_WORKER_COLUMNS: list[Column] = [
    ("worker", "name", 28),
    ("jobs/s", "jobs_per_sec", 10),
    ("client ms/job", "client_cpu_ms_per_job", 15),
]

# The River comparisons, in report order: the report's key, the title, the columns.
_RIVER_SECTIONS: list[tuple[str, str, list[Column]]] = [
    (
        "compare_river",
        "River 0.51.2 (interop/go) beside riverboat, same backlog, 20 slots",
        [
            *_WORKER_COLUMNS,
            ("pg ms/job", "postgres_cpu_ms_per_job", 11),
            ("total ms/job", "total_cpu_ms_per_job", 14),
        ],
    ),
    (
        "compare_river_sqlite",
        "River 0.51.2 (riversqlite) beside riverboat, same SQLite file (WAL), 20 slots",
        _WORKER_COLUMNS,
    ),
    (
        "river_bench",
        "River's own benchmark (river bench -n JOBS) beside riverboat at its settings",
        [("run", "name", 34), *_WORKER_COLUMNS[1:], ("client CPU counts", "client_cpu_counts", 0)],
    ),
]


def _river_section(part: Any, title: str, columns: list[Column]) -> list[str]:
    """A River comparison's lines: its title, then why it was skipped or its table."""
    if not part:
        return []
    lines = ["", title]
    if "skipped" in part:
        return [*lines, f"skipped: {part['skipped']}"]
    return lines + _table(columns, part["runs"])


def _inserts_lines(title: str, floor: str, rows: list[dict[str, Any]]) -> list[str]:
    """An inserts comparison's lines: its title, then each riverboat call beside what it
    is measured against (``floor`` heads that column)."""
    lines = [
        "",
        title,
        f"{'insert':<18}{'jobs/s':>10}{'py ms/job':>11}  {floor:<22}{'jobs/s':>10}"
        f"{'py ms/job':>11}{'ratio':>7}",
    ]
    for row in rows:
        lines.append(
            f"{row['name']:<18}{_fmt(row['jobs_per_sec']):>10}"
            f"{_fmt(row['python_cpu_ms_per_job']):>11}  {row['floor']:<22}"
            f"{_fmt(row['floor_jobs_per_sec']):>10}"
            f"{_fmt(row['floor_python_cpu_ms_per_job']):>11}{_fmt(row['ratio_to_floor']):>7}"
        )
    return lines


def render_table(report: dict[str, Any]) -> str:
    lines = [
        f"riverboat bench — driver {report['driver']} ({report['dialect']}), "
        f"server {report.get('server_version') or '-'}, statements counted by "
        f"{report['statement_source']}",
        f"Python {report.get('python_version', '-')}, psycopg "
        f"{report.get('psycopg_version', '-')} ({report.get('psycopg_impl', '-')} "
        f"implementation), fsync={report.get('fsync', '-')}, "
        f"synchronous_commit={report.get('synchronous_commit', '-')}, "
        f"gc threshold {report.get('gc_threshold', '-')} (as riverboat worker sets it), "
        "autovacuum off on the scratch table",
        "",
        f"{'operation':<26}{'median µs':>11}{'p90 µs':>10}{'stmts/call':>12}{'seed µs':>10}",
    ]
    for op in report.get("operations", []):
        stmts = op["server_statements_per_call"]
        if stmts is None:
            stmts = op["statements_per_call"]
        lines.append(
            f"{op['name']:<26}{_fmt(op['median_us']):>11}{_fmt(op['p90_us']):>10}"
            f"{_fmt(stmts):>12}{_fmt(SEED_OPS_US.get(op['name'])):>10}"
        )
    e2e = report.get("end_to_end")
    if e2e:
        lines += [
            "",
            f"end to end ({e2e['jobs']} no-op jobs; counted: {e2e.get('counted', '-')})",
            f"{'metric':<32}{'riverboat':>12}{'seed':>10}",
        ]
        for key in (
            "python_cpu_ms_per_job",
            "postgres_cpu_ms_per_job",
            "total_cpu_ms_per_job",
            "jobs_per_sec",
            "statements_per_job",
            "statements_per_job_with_insert",
            "server_statements_per_job",
            "connection_resets",
            "followup_job_reads",
        ):
            lines.append(f"{key:<32}{_fmt(e2e.get(key)):>12}{_fmt(SEED_E2E.get(key)):>10}")
        for phase in ("insert_many", "insert_single"):
            p = e2e[phase]
            lines.append(
                f"{phase:<32}{_fmt(p['jobs_per_sec']):>12} jobs/s, "
                f"{_fmt(p['total_cpu_ms_per_job'] or p['python_cpu_ms_per_job'])} ms CPU/job, "
                f"{_fmt(p['statements_per_job'])} stmts/job"
            )
    inserts = report.get("inserts")
    if inserts:
        title = "inserts against raw psycopg (same rows, same run)"
        lines += _inserts_lines(title, "floor", inserts)
    vs_pgqueuer = report.get("inserts_vs_pgqueuer")
    if isinstance(vs_pgqueuer, dict):
        lines += ["", f"inserts against pgqueuer: skipped ({vs_pgqueuer.get('skipped')})"]
    elif vs_pgqueuer:
        title = "inserts against pgqueuer's enqueue (same payloads, same run)"
        lines += _inserts_lines(title, "pgqueuer", vs_pgqueuer)
    defaults = report.get("defaults")
    if defaults:
        lines += ["", "at default settings (only max_workers set), backlog of no-op jobs"]
        lines += _table(
            [
                ("max_workers", "max_workers", 12),
                ("jobs/s", "jobs_per_sec", 10),
                ("raw loop", "raw_loop_jobs_per_sec", 10),
                ("ratio", "ratio_to_raw_loop", 7),
                ("stmts/job", "statements_per_job", 11),
                ("target", "statements_per_job_target", 8),
                ("py ms/job", "python_cpu_ms_per_job", 11),
            ],
            defaults,
        )
    for key, title, columns in _RIVER_SECTIONS:
        part = report.get(key)
        lines += _river_section(part, title, columns)
        if key == "compare_river_sqlite" and part and "skipped" not in part:
            lines.append(f"riverboat / best River: {_fmt(part.get('riverboat_over_best_river'))}")
    kinds = report.get("job_kinds")
    if kinds:
        lines += [
            "",
            "jobs/s by kind of work function, at defaults with max_workers=100",
            f"{'kind':<16}{'jobs/s':>10}{'py ms/job':>11}{'stmts/job':>11}  "
            f"{'compared to':<26}{'ratio':>7}",
        ]
        for row in kinds:
            lines.append(
                f"{row['name']:<16}{_fmt(row['jobs_per_sec']):>10}"
                f"{_fmt(row['python_cpu_ms_per_job']):>11}{_fmt(row['statements_per_job']):>11}"
                f"  {row['compared_to']:<26}{_fmt(row['ratio']):>7}"
            )
    latency = report.get("latency")
    if latency:
        lines += _latency_lines(latency)
    scale = report.get("scale")
    if scale:
        lines += ["", "scale: " + json.dumps(scale)]
    flow = report.get("flow")
    if flow:
        lines += ["", "flow: " + json.dumps(flow)]
    workflow = report.get("workflow")
    if workflow:
        lines += ["", "workflow"] + [
            f"  {key:<38}{_fmt(value):>10}" for key, value in workflow.items()
        ]
    process = report.get("process_executor")
    if process:
        noop = process["noop"]
        lines += [
            "",
            f"process executor ({process['cores']} cores)",
            f"no-op job, one at a time: thread {_fmt(noop['thread_ms_per_job'])} ms, "
            f"process {_fmt(noop['process_ms_per_job'])} ms, overhead "
            f"{_fmt(noop['overhead_ms_per_job'])} ms/job (target ≤ "
            f"{_fmt(noop['target_ms_per_job'])})",
        ]
        e2e = process.get("end_to_end")
        if e2e:
            for executor in ("thread", "process"):
                row = e2e[executor]
                lines.append(
                    f"{e2e['jobs']} no-op jobs end to end, {executor} executor "
                    f"(max_workers {e2e['max_workers']}): {_fmt(row['jobs_per_sec'])} jobs/s, "
                    f"{_fmt(row['wall_ms_per_job'])} ms wall/job, "
                    f"{_fmt(row['cpu_ms_per_job'])} ms CPU/job"
                )
            lines.append(
                "process executor CPU overhead end to end: "
                f"{_fmt(e2e['overhead_cpu_ms_per_job'])} ms/job"
            )
        cpu = process["cpu"]
        for row in cpu["processes"]:
            lines.append(
                f"{cpu['jobs']} CPU-bound jobs ({cpu['job_seconds']:g} s each), "
                f"{row['children']} children: {_fmt(row['jobs_per_sec'])} jobs/s, "
                f"speed-up {_fmt(row['speedup'])}"
            )
        threads = cpu["threads"]
        lines.append(
            f"{cpu['jobs']} CPU-bound jobs, {threads['threads']} threads: "
            f"{_fmt(threads['jobs_per_sec'])} jobs/s, speed-up {_fmt(threads['speedup'])}"
        )
    floor = report.get("raw_sql_floor")
    if floor:
        lines.append(
            f"{'raw SQL floor total CPU/job':<32}{_fmt(floor.get('total_cpu_ms_per_job')):>12}"
            f"   (riverboat / floor = {_fmt(report.get('overhead_ratio'))})"
        )
    for name, scenario in report.get("scenarios", {}).items():
        lines += ["", f"scenario {name}: " + json.dumps(scenario)]
    return "\n".join(lines)


def _latency_lines(latency: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "pick-up latency, one job at a time into an idle queue (insert to job body, ms);",
        "'river' sets fetch_cooldown=0.1 on both clients (River's pacing)",
        f"{'database':<10}{'pacing':<10}{'inserter':<15}{'p50':>8}{'p90':>8}{'p99':>8}"
        f"{'max':>8}{'claims/job':>12}{'insert p50/p99':>16}",
    ]
    bursts = []
    for database, parts in latency.items():
        if "skipped" in parts:
            lines.append(f"{database:<10}skipped: {parts['skipped']}")
            continue
        for row in parts["pickup"]:
            lines.append(
                f"{database:<10}{row['pacing']:<10}{row['inserter']:<15}{_fmt(row['p50_ms']):>8}"
                f"{_fmt(row['p90_ms']):>8}{_fmt(row['p99_ms']):>8}{_fmt(row['max_ms']):>8}"
                f"{_fmt(row['claims_per_job']):>12}"
                f"{_fmt(row['insert_p50_ms']) + ' / ' + _fmt(row['insert_p99_ms']):>16}"
            )
        bursts += parts["burst"]
    if bursts:
        lines += [
            "",
            "burst of single inserts from another process into an idle worker",
            f"{'database':<10}{'pacing':<10}{'jobs':>7}{'insert s':>10}{'stmts/job':>11}"
            f"{'claims/job':>12}{'notes/job':>11}{'py ms/job':>11}",
        ]
        for row in bursts:
            lines.append(
                f"{row['database']:<10}{row['pacing']:<10}{row['jobs']:>7}"
                f"{_fmt(row['insert_seconds']):>10}{_fmt(row['statements_per_job']):>11}"
                f"{_fmt(row['claims_per_job']):>12}{_fmt(row['notifications_per_job']):>11}"
                f"{_fmt(row['python_cpu_ms_per_job']):>11}"
            )
    return lines


def _flatten(data: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
    elif isinstance(data, list):
        for item in data:
            if isinstance(item, dict) and "name" in item:
                out.update(_flatten(item, f"{prefix}{item['name']}."))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        out[prefix[:-1]] = float(data)
    return out


def compare(report: dict[str, Any], baseline: dict[str, Any]) -> str:
    """Each numeric figure beside the baseline's, with current / baseline."""
    now, then = _flatten(report), _flatten(baseline)
    lines = [f"{'figure':<58}{'baseline':>12}{'now':>12}{'ratio':>8}"]
    for key in sorted(now):
        if key in then and not key.endswith((".calls", ".jobs", ".rows")):
            ratio = now[key] / then[key] if then[key] else None
            lines.append(
                f"{key:<58}{_fmt(then[key]):>12}{_fmt(now[key]):>12}"
                f"{(f'{ratio:.2f}' if ratio is not None else '-'):>8}"
            )
    return "\n".join(lines)
