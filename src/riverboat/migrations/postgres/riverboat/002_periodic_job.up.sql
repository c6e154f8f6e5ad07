-- riverboat's durable periodic jobs: one row per periodic job that has an id, written by
-- the leader's periodic enqueuer after each run it inserts (runtime/maintenance/periodic.py).
-- next_run_at is the next tick still to insert, last_run_at the last tick inserted;
-- a new leader (after a restart, a crash, a deploy) carries on from next_run_at instead
-- of from its own clock. schedule is the schedule the times were computed for: when the
-- code's schedule differs, the stored times are not used. catch_up is the job's policy
-- for ticks that passed while no leader ran it ('none', 'one' or 'all').
CREATE TABLE <schema>riverboat_periodic_job (
    id text PRIMARY KEY,
    schedule text NOT NULL,
    catch_up text NOT NULL,
    next_run_at timestamptz,
    last_run_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT id_length CHECK (char_length(id) > 0 AND char_length(id) < 128),
    CONSTRAINT catch_up_known CHECK (catch_up IN ('none', 'one', 'all'))
);
