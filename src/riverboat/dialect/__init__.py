"""Every SQL statement riverboat runs, once per dialect, with its argument encoding and
row decoding. Nothing here does I/O: a dialect method returns a :class:`Statement`, a
driver runs it, and the dialect decodes the rows (a sans-I/O core shared by sync and
async clients)."""

from riverboat.dialect.base import Dialect, JobStateUpdate, validate_schema_name

__all__ = ["Dialect", "JobStateUpdate", "validate_schema_name"]
