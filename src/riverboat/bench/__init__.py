"""``riverboat bench``: the seed PR's tables, reproducible, for every driver.

Three parts, each a module: per-operation timings with statement counts (``ops``), an
end-to-end run of the real runtime with CPU accounting for client and server
(``e2e``), and the seed's scenarios plus a raw-SQL floor (``scenarios``, ``floor``).
``defaults``, ``inserts`` and ``scale`` are the wave-2 parts; ``measure`` holds what
they share (the raw-SQL backlog fill, per-job CPU figures). ``report`` renders a table
or JSON and compares against a saved baseline.
"""

from riverboat.bench.runner import BenchConfig, run_bench

__all__ = ["BenchConfig", "run_bench"]
