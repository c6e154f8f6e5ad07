DROP TABLE <schema>riverboat_client;
