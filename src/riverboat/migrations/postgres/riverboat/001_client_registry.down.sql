DROP FUNCTION <schema>riverboat_flow_claim(bigint, text, text[]);
DROP TABLE <schema>riverboat_client;
