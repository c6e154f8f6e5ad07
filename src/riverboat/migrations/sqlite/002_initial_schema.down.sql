DROP TABLE <schema>river_job;
DROP TABLE <schema>river_leader;
