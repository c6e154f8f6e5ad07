DROP TABLE <schema>river_migration;
