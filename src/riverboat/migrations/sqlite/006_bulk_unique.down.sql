DROP TABLE <schema>river_job;

CREATE TABLE <schema>river_job (
    id integer PRIMARY KEY
);
