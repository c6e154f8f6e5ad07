-- Version 4: the flow-controlled claim no longer writes completions. Version 3's
-- riverboat_flow_claim_jobs marked this client's finished jobs completed inside the claim,
-- whose commit is asynchronous, so a server crash could lose a completion and run its
-- job again. riverboat_flow_claim_jobs_v2 is told the same jobs (finished, outcome still
-- in this client's completer) and records them in riverboat_flow_ended; every claim of
-- the queue leaves the running jobs recorded there out of its count, as they no longer
-- execute. The completer writes their completions with its own durable commit,
-- finalized_at no later than the job's end (dialect/postgres_flow.py,
-- flow_complete_many), and removes them from the table. Version 3's function stays for
-- processes of the previous release during a rolling deploy.
--
-- Unlogged: no WAL, and a server crash empties it, which only makes the jobs it named
-- count as running again until their completions are written (never fewer counted than
-- execute). One row per (job, attempt).
CREATE UNLOGGED TABLE <schema>riverboat_flow_ended (
    job_id bigint NOT NULL,
    attempt integer NOT NULL,
    PRIMARY KEY (job_id, attempt)
);

-- The queue's transaction-level advisory lock (released at commit, which is asynchronous:
-- the lock is not held over the WAL flush; docs/flow-control.md says what a server crash
-- can then redo), then the count and the choice of jobs, each statement of this volatile
-- function seeing every claim committed before the lock was granted. A NULL limit is not
-- enforced.
--
-- Without partitions or sequences (one partition: the queue) the room is the limit less
-- what runs (or started in the rate window), and the jobs are the first that many in
-- River's order. Otherwise candidates are read in River's order, whole partitions at
-- their limit skipped in the scan; each remaining candidate is taken while its partition
-- has room (rank in partition + running, or started in the window, <= limit); sequence
-- jobs only at the head of their sequence. The chosen rows are then locked with SKIP
-- LOCKED (a Go River worker may be claiming them) and set running as River's claim does.
-- Returns the rows it claimed, their columns with state as text, tags as text[] and unique_states as integer.
-- p_finished_ids/p_finished_attempts: jobs this client claimed that have finished, their
-- outcomes not written yet, recorded in riverboat_flow_ended before the lock (they only
-- make room, which a claim that counts before this commits doesn't see: it counts
-- fewer). Running jobs recorded there, by any client, are left out of the running counts
-- (not of the rate limit's starts, nor of a sequence's running job: a failed job holds
-- its sequence until its outcome is known).
CREATE FUNCTION <schema>riverboat_flow_claim_jobs_v2(
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
    p_finished_attempts integer[]
)
RETURNS SETOF record
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    -- After the lock: now() would be the start of the caller's statement, possibly
    -- before the claims and completions it waited for.
    v_now timestamptz;
    -- The claimed jobs' attempted_at, read after the statement that counted what runs:
    -- a completion that statement saw committed before it began, so its finalized_at is
    -- earlier, and the table never shows a job starting before the one it waited for
    -- ended (v_now is read before that statement's snapshot: a completion committed in
    -- between would be seen and still end after v_now).
    v_claimed_at timestamptz;
    v_window timestamptz;
    v_counts boolean := p_global_limit IS NOT NULL OR p_local_limit IS NOT NULL;
    v_con_parted boolean := p_con_by_kind OR cardinality(p_con_by_args) > 0;
    v_rate_parted boolean := p_rate_by_kind OR cardinality(p_rate_by_args) > 0;
    v_ids bigint[];
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF cardinality(p_finished_ids) > 0 THEN
        INSERT INTO <schema>riverboat_flow_ended (job_id, attempt)
        SELECT f.id, f.attempt
        FROM unnest(p_finished_ids, p_finished_attempts) AS f(id, attempt)
        JOIN <schema>river_job j ON j.id = f.id
        WHERE j.state = 'running' AND j.attempt = f.attempt
          AND j.attempted_by[array_length(j.attempted_by, 1)] = p_attempted_by
        ON CONFLICT DO NOTHING;
    END IF;
    PERFORM pg_advisory_xact_lock(p_lock_key);
    v_now := coalesce(p_now, clock_timestamp());
    v_window := v_now - make_interval(secs => coalesce(p_rate_period, 0));
    IF NOT v_con_parted AND NOT v_rate_parted AND NOT p_sequences THEN
        -- One statement counts and claims (one snapshot, one executor run: the claim's
        -- database time is what a limit that does not bind costs). attempted_at is read
        -- inside it, after its snapshot was taken (an init plan runs when first used):
        -- a completion the count saw committed before, so its finalized_at is earlier,
        -- and the table never shows a job starting before the one it made room for ended.
        RETURN QUERY
        WITH running AS (
            SELECT count(*) AS n,
                   count(*) FILTER (WHERE j.attempted_by[array_length(j.attempted_by, 1)]
                                    = p_attempted_by) AS here
            FROM <schema>river_job j
            WHERE v_counts AND j.state = 'running' AND j.queue = p_queue
              AND NOT EXISTS (SELECT 1 FROM <schema>riverboat_flow_ended e
                              WHERE e.job_id = j.id AND e.attempt = j.attempt)
        ),
        -- Starts in the window: running and retryable jobs attempted in it, and
        -- finalized ones found through River's (state, finalized_at) index (a job that
        -- started in the window and finished has finalized_at in it too).
        started AS (
            SELECT count(*) AS n
            FROM <schema>river_job j
            WHERE p_rate_limit IS NOT NULL
              AND j.queue = p_queue AND j.attempted_at > v_window
              AND (j.state IN ('running', 'retryable')
                   OR (j.state IN ('completed', 'cancelled', 'discarded')
                       AND j.finalized_at > v_window))
        ),
        locked_jobs AS (
            SELECT j.id
            FROM <schema>river_job j
            WHERE j.state = 'available'
              AND j.queue = p_queue
              AND j.scheduled_at <= v_now
            ORDER BY j.priority ASC, j.scheduled_at ASC, j.id ASC
            -- least() skips NULLs: a limit not set does not bound the room.
            LIMIT (SELECT greatest(0, least(p_max_to_lock, p_global_limit - r.n,
                                            p_local_limit - r.here, p_rate_limit - s.n))
                   FROM running r, started s)
            FOR UPDATE SKIP LOCKED
        )
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
                  river_job.state::text, river_job.scheduled_at, river_job.tags::text[],
                  river_job.unique_key, river_job.unique_states::integer;
        RETURN;
    ELSE
        v_ids := ARRAY(
            WITH running AS (
                SELECT CASE WHEN v_con_parted
                            THEN <schema>riverboat_flow_partition(j.kind, j.args, p_con_by_kind, p_con_by_args)
                            ELSE '[]'::jsonb END AS part,
                       count(*) AS n,
                       count(*) FILTER (WHERE j.attempted_by[array_length(j.attempted_by, 1)]
                                        = p_attempted_by) AS local_n
                FROM <schema>river_job j
                WHERE v_counts AND j.state = 'running' AND j.queue = p_queue
                  AND NOT EXISTS (SELECT 1 FROM <schema>riverboat_flow_ended e
                                  WHERE e.job_id = j.id AND e.attempt = j.attempt)
                GROUP BY 1
            ),
            started AS (
                SELECT CASE WHEN v_rate_parted
                            THEN <schema>riverboat_flow_partition(j.kind, j.args, p_rate_by_kind, p_rate_by_args)
                            ELSE '[]'::jsonb END AS part,
                       count(*) AS n
                FROM <schema>river_job j
                WHERE p_rate_limit IS NOT NULL
                  AND j.queue = p_queue AND j.attempted_at > v_window
                  AND (j.state IN ('running', 'retryable')
                       OR (j.state IN ('completed', 'cancelled', 'discarded')
                           AND j.finalized_at > v_window))
                GROUP BY 1
            ),
            full_partitions AS (
                SELECT 'c' AS limit_kind, r.part FROM running r
                WHERE r.n >= p_global_limit OR r.local_n >= p_local_limit
                UNION ALL
                SELECT 'r', s.part FROM started s WHERE s.n >= p_rate_limit
            ),
            scanned AS (
                SELECT j.id, j.priority, j.scheduled_at,
                       CASE WHEN v_con_parted
                            THEN <schema>riverboat_flow_partition(j.kind, j.args, p_con_by_kind, p_con_by_args)
                            ELSE '[]'::jsonb END AS pc,
                       CASE WHEN v_rate_parted
                            THEN <schema>riverboat_flow_partition(j.kind, j.args, p_rate_by_kind, p_rate_by_args)
                            ELSE '[]'::jsonb END AS pr,
                       CASE WHEN p_sequences
                            THEN j.metadata -> 'riverboat_sequence' ->> 'key' END AS seq
                FROM <schema>river_job j
                WHERE j.state = 'available'
                  AND j.queue = p_queue
                  AND j.scheduled_at <= v_now
                ORDER BY j.priority ASC, j.scheduled_at ASC, j.id ASC
            ),
            candidates AS (
                SELECT c.*
                FROM scanned c
                WHERE NOT EXISTS (SELECT 1 FROM full_partitions f
                                  WHERE (f.limit_kind = 'c' AND f.part = c.pc)
                                     OR (f.limit_kind = 'r' AND f.part = c.pr))
                  AND (c.seq IS NULL OR NOT EXISTS (
                        SELECT 1 FROM <schema>river_job s
                        WHERE s.metadata @> jsonb_build_object('riverboat_sequence',
                                                               jsonb_build_object('key', c.seq))
                          AND s.queue = p_queue AND s.id <> c.id
                          AND (s.state = 'running'
                               OR (s.id < c.id AND s.state NOT IN ('completed', 'cancelled')
                                   AND NOT (s.state = 'discarded' AND p_sequence_continue)))))
                ORDER BY c.priority ASC, c.scheduled_at ASC, c.id ASC
                LIMIT p_scan_max
            ),
            ranked AS (
                SELECT c.*,
                       row_number() OVER (PARTITION BY c.pc
                                          ORDER BY c.priority, c.scheduled_at, c.id) AS rank_c,
                       row_number() OVER (PARTITION BY c.pr
                                          ORDER BY c.priority, c.scheduled_at, c.id) AS rank_r,
                       row_number() OVER (PARTITION BY c.seq ORDER BY c.id) AS rank_s
                FROM candidates c
            )
            SELECT c.id
            FROM ranked c
            LEFT JOIN running r ON r.part = c.pc
            LEFT JOIN started st ON st.part = c.pr
            WHERE (c.seq IS NULL OR c.rank_s = 1)
              AND (p_global_limit IS NULL OR c.rank_c + coalesce(r.n, 0) <= p_global_limit)
              AND (p_local_limit IS NULL OR c.rank_c + coalesce(r.local_n, 0) <= p_local_limit)
              AND (p_rate_limit IS NULL OR c.rank_r + coalesce(st.n, 0) <= p_rate_limit)
            ORDER BY c.priority ASC, c.scheduled_at ASC, c.id ASC
            LIMIT p_max_to_lock
        );
    END IF;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    v_claimed_at := coalesce(p_now, clock_timestamp());
    -- Joined by id, so that the planner looks each row up by primary key whatever the
    -- table's statistics say.
    RETURN QUERY
    WITH locked_jobs AS (
        SELECT j.id
        FROM unnest(v_ids) AS chosen(id)
        JOIN <schema>river_job j ON j.id = chosen.id
        WHERE j.state = 'available'
        FOR UPDATE OF j SKIP LOCKED
    )
    UPDATE <schema>river_job
    SET state = 'running',
        attempt = least(river_job.attempt::integer + 1, 32767),
        attempted_at = v_claimed_at,
        attempted_by = array_append(
            CASE WHEN array_length(river_job.attempted_by, 1) >= p_max_attempted_by
                 THEN river_job.attempted_by[
                    array_length(river_job.attempted_by, 1) + 2 - p_max_attempted_by:]
                 ELSE river_job.attempted_by
            END,
            p_attempted_by)
    FROM locked_jobs
    WHERE river_job.id = locked_jobs.id
    RETURNING river_job.id, river_job.args, river_job.attempt, river_job.attempted_at,
              river_job.attempted_by, river_job.created_at, river_job.errors,
              river_job.finalized_at, river_job.kind, river_job.max_attempts,
              river_job.metadata, river_job.priority, river_job.queue,
              river_job.state::text, river_job.scheduled_at, river_job.tags::text[],
              river_job.unique_key, river_job.unique_states::integer;
END;
$$;
