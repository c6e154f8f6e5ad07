DROP FUNCTION <schema>riverboat_flow_claim_jobs(
    bigint, text, integer, integer, text, integer, timestamptz, integer, integer, boolean,
    text[], integer, double precision, boolean, text[], boolean, boolean, bigint[], integer[]
);
DROP FUNCTION <schema>riverboat_flow_partition(text, jsonb, boolean, text[]);
