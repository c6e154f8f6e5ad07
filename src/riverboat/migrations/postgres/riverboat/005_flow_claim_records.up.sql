-- Version 5: a concurrency limit without partitions, rate limits or sequences (the
-- common case, and the one a limit that does not bind pays for on every claim) no longer
-- writes a row per finished job. Each riverboat client records, per queue, how many of
-- its jobs are in flight (claimed and not finished: running or waiting for a slot), as it
-- knows them when it claims; a claim under the queue's lock adds up the records of the
-- other clients alive in riverboat's registry (riverboat_client, lease not expired) and
-- counts table rows only for the rest: Go River workers, releases before this one,
-- clients without a registry row, and clients the registry holds dead (one that died or
-- is frozen: its running rows count, as they always did, until the leader rescues
-- them). A record only falls between claims, so either way a client is never counted
-- below what it runs.
--
-- Unlogged: no WAL, and a server crash empties it, which only makes every client
-- counted from its rows until its next claim.
CREATE UNLOGGED TABLE <schema>riverboat_flow_client (
    queue text NOT NULL,
    client_id text NOT NULL,
    in_flight integer NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (queue, client_id)
);

-- riverboat_flow_claim_jobs_v2's parameters, then:
-- p_in_flight: this client's jobs of the queue in flight before this claim (claimed, not
--   finished; a finished job's completion, still in the client's completer, is written
--   with finalized_at no later than its end). NULL: the client no longer knows (a claim
--   failed without saying whether it committed); its record goes, its rows count.
-- Queues with partitions, a rate limit or sequences, and a client that does not know
-- what it runs, take version 4's claim (riverboat_flow_claim_jobs_v2), which counts rows.
CREATE FUNCTION <schema>riverboat_flow_claim_jobs_v3(
    p_lock_key bigint,
    p_queue text,
    p_max_to_lock integer,
    p_scan_max integer,
    p_attempted_by text,
    p_max_attempted_by integer,
    p_now timestamptz,
    p_global_limit integer,
    p_local_limit integer,
    p_con_by_kind boolean,
    p_con_by_args text[],
    p_rate_limit integer,
    p_rate_period double precision,
    p_rate_by_kind boolean,
    p_rate_by_args text[],
    p_sequences boolean,
    p_sequence_continue boolean,
    p_finished_ids bigint[],
    p_finished_attempts integer[],
    p_in_flight integer
)
RETURNS SETOF record
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    v_now timestamptz;
    v_checked_at timestamptz;
BEGIN
    IF p_in_flight IS NULL OR p_con_by_kind OR cardinality(p_con_by_args) > 0
       OR p_rate_limit IS NOT NULL OR p_sequences
       OR (p_global_limit IS NULL AND p_local_limit IS NULL) THEN
        -- First, so that every claim after this one counts this client's rows.
        DELETE FROM <schema>riverboat_flow_client
        WHERE queue = p_queue AND client_id = p_attempted_by;
        RETURN QUERY
        SELECT * FROM <schema>riverboat_flow_claim_jobs_v2(
            p_lock_key, p_queue, p_max_to_lock, p_scan_max, p_attempted_by,
            p_max_attempted_by, p_now, p_global_limit, p_local_limit, p_con_by_kind,
            p_con_by_args, p_rate_limit, p_rate_period, p_rate_by_kind, p_rate_by_args,
            p_sequences, p_sequence_continue, p_finished_ids, p_finished_attempts
        ) AS t(id bigint, args jsonb, attempt smallint, attempted_at timestamptz,
               attempted_by text[], created_at timestamptz, errors jsonb[],
               finalized_at timestamptz, kind text, max_attempts smallint, metadata jsonb,
               priority smallint, queue text, state text, scheduled_at timestamptz,
               tags text[], unique_key bytea, unique_states integer);
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(p_lock_key);
    v_now := coalesce(p_now, clock_timestamp());
    v_checked_at := clock_timestamp();
    -- One statement after the lock: its snapshot sees every claim committed before. A job
    -- that made room ended before it (another client's, before that client's record;
    -- a row's, before its completion committed; this client's, before this call), so
    -- attempted_at, read inside it, is later than the finalized_at the job is written with.
    RETURN QUERY
    WITH recorded AS (
        SELECT c.client_id, c.in_flight
        FROM <schema>riverboat_flow_client c
        JOIN <schema>riverboat_client r ON r.id = c.client_id
        WHERE c.queue = p_queue AND c.client_id <> p_attempted_by
          AND r.expires_at > v_checked_at
    ),
    others AS (
        SELECT coalesce((SELECT sum(r.in_flight) FROM recorded r), 0) + (
            SELECT count(*)
            FROM <schema>river_job j
            WHERE j.state = 'running' AND j.queue = p_queue
              AND j.attempted_by[array_length(j.attempted_by, 1)]
                  IS DISTINCT FROM p_attempted_by
              AND NOT EXISTS (
                  SELECT 1 FROM recorded r
                  WHERE r.client_id = j.attempted_by[array_length(j.attempted_by, 1)])
              -- Finished jobs a version 4 claim recorded (a client of an older release).
              AND NOT EXISTS (
                  SELECT 1 FROM <schema>riverboat_flow_ended e
                  WHERE e.job_id = j.id AND e.attempt = j.attempt)
        ) AS n
    ),
    locked_jobs AS (
        SELECT j.id
        FROM <schema>river_job j
        WHERE j.state = 'available'
          AND j.queue = p_queue
          AND j.scheduled_at <= v_now
        ORDER BY j.priority ASC, j.scheduled_at ASC, j.id ASC
        -- least() skips NULLs: a limit not set does not bound the room.
        LIMIT (SELECT greatest(0, least(p_max_to_lock, p_global_limit - o.n - p_in_flight,
                                        p_local_limit - p_in_flight))
               FROM others o)
        FOR UPDATE SKIP LOCKED
    ),
    claimed AS (
        UPDATE <schema>river_job
        SET state = 'running',
            attempt = least(river_job.attempt::integer + 1, 32767),
            attempted_at = coalesce(p_now, (SELECT clock_timestamp())),
            attempted_by = array_append(
                CASE WHEN array_length(river_job.attempted_by, 1) >= p_max_attempted_by
                     THEN river_job.attempted_by[
                        array_length(river_job.attempted_by, 1) + 2 - p_max_attempted_by:]
                     ELSE river_job.attempted_by
                END,
                p_attempted_by)
        WHERE river_job.id = ANY(ARRAY(SELECT id FROM locked_jobs))
        RETURNING river_job.id, river_job.args, river_job.attempt, river_job.attempted_at,
                  river_job.attempted_by, river_job.created_at, river_job.errors,
                  river_job.finalized_at, river_job.kind, river_job.max_attempts,
                  river_job.metadata, river_job.priority, river_job.queue,
                  river_job.state::text AS state, river_job.scheduled_at,
                  river_job.tags::text[] AS tags, river_job.unique_key,
                  river_job.unique_states::integer AS unique_states
    ),
    noted AS (
        INSERT INTO <schema>riverboat_flow_client (queue, client_id, in_flight, updated_at)
        SELECT p_queue, p_attempted_by, p_in_flight + (SELECT count(*) FROM claimed),
               clock_timestamp()
        ON CONFLICT (queue, client_id)
        DO UPDATE SET in_flight = excluded.in_flight, updated_at = excluded.updated_at
    )
    SELECT * FROM claimed;
END;
$$;
