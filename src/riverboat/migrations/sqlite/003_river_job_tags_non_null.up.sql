-- Nothing to do on SQLite: river_job gets its final tags column in 006.
SELECT 1;
