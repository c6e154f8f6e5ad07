-- Version 8 of riverboat's line lets riverboat write a workflow task's links as one
-- string on Postgres (see the Postgres migration). SQLite has no index on metadata and
-- keeps writing the separate keys: this version changes nothing here and keeps the
-- line's versions the same on both databases.
SELECT 1;
