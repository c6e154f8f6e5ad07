-- River's SQLite line has no real job table before 006; this placeholder only keeps the
-- set of tables at each version the same as River's.
CREATE TABLE <schema>river_job (
    id integer PRIMARY KEY
);

CREATE TABLE <schema>river_leader (
    elected_at timestamp NOT NULL,
    expires_at timestamp NOT NULL,
    leader_id text NOT NULL,
    name text PRIMARY KEY NOT NULL,
    CONSTRAINT name_length CHECK (length(name) > 0 AND length(name) < 128),
    CONSTRAINT leader_id_length CHECK (length(leader_id) > 0 AND length(leader_id) < 128)
);
