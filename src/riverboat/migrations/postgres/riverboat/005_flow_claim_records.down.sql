DROP FUNCTION <schema>riverboat_flow_claim_jobs_v3(
    bigint, text, integer, integer, text, integer, timestamptz, integer, integer, boolean,
    text[], integer, double precision, boolean, text[], boolean, boolean, bigint[], integer[],
    integer
);
DROP TABLE <schema>riverboat_flow_client;
