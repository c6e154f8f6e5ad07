"""What the benchmark's parts share: filling a backlog by raw SQL, and the per-job CPU
figures every timed phase reports."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, cast

__all__ = ["CpuFigures", "Figures", "PostgresBench", "fill_backlog"]


class Figures:
    """A result of one benchmark part, reported as a JSON object."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = asdict(cast(Any, self))  # every subclass is a dataclass
        return data


@dataclass(slots=True)
class CpuFigures(Figures):
    """One timed phase per job: throughput, the client's CPU, the server's CPU (None
    when the server is not on this machine) and statements."""

    jobs: int
    jobs_per_sec: float
    python_cpu_ms_per_job: float
    postgres_cpu_ms_per_job: float | None
    total_cpu_ms_per_job: float | None
    statements_per_job: float

    @classmethod
    def measured(
        cls, jobs: int, wall: float, cpu: float, server: float | None, statements: int
    ) -> CpuFigures:
        """From seconds of wall time, client CPU and server CPU over ``jobs`` jobs."""
        py = cpu / jobs * 1000
        pg = server / jobs * 1000 if server is not None else None
        return cls(
            jobs,
            round(jobs / wall, 1),
            round(py, 4),
            round(pg, 4) if pg is not None else None,
            round(py + pg, 4) if pg is not None else None,
            round(statements / jobs, 4),
        )


@dataclass(frozen=True, slots=True)
class PostgresBench:
    """What the Postgres-only parts of the benchmark work with: the database and its
    scratch schema, AsyncClients on the driver under test, and the progress line."""

    url: str
    schema: str
    make_client: Callable[..., Any]
    progress: Callable[[str], None] = lambda _m: None


def fill_backlog(
    url: str,
    schema: str,
    jobs: int,
    *,
    finalized: int = 0,
    analyze: bool = True,
    checkpoint: bool = False,
) -> None:
    """Empty ``river_job`` and insert ``jobs`` available no-op jobs (kind ``benchmark``)
    by one ``INSERT ... SELECT generate_series``, after ``finalized`` completed filler
    rows, so no insert path is part of what is measured. ``analyze``: then VACUUM
    ANALYZE the table; ``checkpoint``: and write out what the fill dirtied now, not in a
    checkpoint during the measurement."""
    import psycopg

    table = f'"{schema}".river_job'
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {table}")
        if finalized:
            conn.execute(
                f"INSERT INTO {table} (args, kind, max_attempts, queue, state, attempt,"
                " attempted_at, finalized_at) SELECT '{\"num\": 0}', 'finalized_filler', 25,"
                " 'default', 'completed', 1, now(), now() FROM generate_series(1, %s)",
                (finalized,),
            )
        conn.execute(
            f"INSERT INTO {table} (args, kind, max_attempts, queue, state) "
            "SELECT '{\"num\": 0}', 'benchmark', 25, 'default', 'available' "
            "FROM generate_series(1, %s)",
            (jobs,),
        )
        if analyze:
            conn.execute(f"VACUUM ANALYZE {table}")
        if checkpoint:
            conn.execute("CHECKPOINT")
