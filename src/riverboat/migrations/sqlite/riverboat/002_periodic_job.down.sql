DROP TABLE <schema>riverboat_periodic_job;
