-- Nothing to revert on Postgres (see the up migration).
SELECT 1;
