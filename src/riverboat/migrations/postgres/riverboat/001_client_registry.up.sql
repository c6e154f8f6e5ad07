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

-- Also in version 1 (the line is new in this release): the claim of a queue under flow control (riverboat.flow, dialect/postgres_flow.py):
-- the queue's advisory lock first, then the claim statement it is given, which runs as a
-- statement of its own and so, in this volatile function, with a snapshot taken after
-- the lock: it counts every claim committed before it. One round trip from the client,
-- so the lock is held only while the server works. The claim commits asynchronously so
-- the lock is not held over the WAL flush either (docs/flow-control.md says what a server
-- crash can then redo). params are the claim's parameters as text, $1[1], $1[2]...
CREATE FUNCTION <schema>riverboat_flow_claim(lock_key bigint, claim text, params text[])
RETURNS SETOF record
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(lock_key);
    RETURN QUERY EXECUTE claim USING params;
END;
$$;
