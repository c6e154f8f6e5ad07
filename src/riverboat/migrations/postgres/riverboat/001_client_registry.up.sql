-- riverboat's registry of live clients. Each client that works jobs keeps its row fresh
-- every heartbeat_interval (heartbeat_at, expires_at) and deletes it on a clean stop; a
-- row whose expires_at has passed belongs to a dead client, whose running jobs the
-- leader makes available again. queues is what the client reports (per queue:
-- max_workers, running, stopped); job_ids the jobs it holds (running, or finished with
-- the outcome not yet written), so that a job claimed by a live client that never got
-- it (a lost claim reply) can still be rescued; queue_settings is what operators asked
-- of it (per queue: max_workers, stopped), read back by the client at each heartbeat.
CREATE TABLE <schema>riverboat_client (
    id text PRIMARY KEY,
    host text NOT NULL,
    pid bigint NOT NULL,
    riverboat_version text NOT NULL,
    queues jsonb NOT NULL DEFAULT '{}',
    queue_settings jsonb NOT NULL DEFAULT '{}',
    job_ids jsonb NOT NULL DEFAULT '[]',
    slots_in_use bigint NOT NULL DEFAULT 0,
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    CONSTRAINT id_length CHECK (char_length(id) > 0 AND char_length(id) < 256)
);

CREATE INDEX riverboat_client_expires_at_idx ON <schema>riverboat_client USING btree (expires_at);
