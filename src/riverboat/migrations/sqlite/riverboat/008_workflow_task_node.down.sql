-- Nothing to revert on SQLite (see the up migration).
SELECT 1;
