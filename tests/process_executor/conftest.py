"""The process-executor tests run on Postgres and SQLite (``any_db``)."""

from tests.runtime.dbs import any_db  # noqa: F401
