-- Version 7 of riverboat's line lets riverboat write a workflow task's id lists as one
-- string of ids on Postgres (see the Postgres migration). SQLite has no index on
-- metadata and keeps writing arrays: this version changes nothing here and keeps the
-- line's versions the same on both databases.
SELECT 1;
