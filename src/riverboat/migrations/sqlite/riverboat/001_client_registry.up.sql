-- riverboat's registry of live clients; see the Postgres twin for what each column is.
-- Times are UTC text as River's SQLite driver writes them ('YYYY-MM-DD HH:MM:SS.SSS').
CREATE TABLE <schema>riverboat_client (
    id text PRIMARY KEY NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    riverboat_version text NOT NULL,
    queues blob NOT NULL DEFAULT (jsonb('{}')),
    queue_settings blob NOT NULL DEFAULT (jsonb('{}')),
    job_ids blob NOT NULL DEFAULT (jsonb('[]')),
    slots_in_use integer NOT NULL DEFAULT 0,
    started_at timestamp NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    heartbeat_at timestamp NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    expires_at timestamp NOT NULL,
    CONSTRAINT id_length CHECK (length(id) > 0 AND length(id) < 256)
);

CREATE INDEX <schema>riverboat_client_expires_at_idx ON riverboat_client (expires_at);
