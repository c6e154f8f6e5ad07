-- Version 6 of riverboat's line gives SQLite indexes that find workflow tasks (by their
-- workflow's id, and the newest). Postgres finds them through River's GIN index on metadata,
-- so this version changes nothing here and keeps the line's versions the same on both
-- databases.
SELECT 1;
