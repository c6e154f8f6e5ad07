-- riverboat's durable periodic jobs: one row per periodic job that has an id
-- (runtime/maintenance/periodic.py). Every client declares its periodic jobs here when it
-- starts and when one is added or removed at runtime; the leader, whichever client it
-- is, reads the rows and writes the times after each run it inserts.
-- next_run_at is the next tick still to insert, last_run_at the last tick inserted;
-- a new leader (after a restart, a crash, a deploy) carries on from next_run_at instead
-- of from its own clock. schedule is the schedule the times were computed for: when it
-- changes, the stored next run is not used. catch_up is the job's policy for ticks that
-- passed while no leader ran it ('none', 'one' or 'all'). template is the insert of a
-- job added at runtime (kind, args, options), for a leader whose code lacks the job;
-- NULL for a job declared by a client's own code. removed_at marks a job removed at
-- runtime, until a client declares it again.
CREATE TABLE <schema>riverboat_periodic_job (
    id text PRIMARY KEY,
    schedule text NOT NULL,
    catch_up text NOT NULL,
    next_run_at timestamptz,
    last_run_at timestamptz,
    template jsonb,
    removed_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT id_length CHECK (char_length(id) > 0 AND char_length(id) < 128),
    CONSTRAINT catch_up_known CHECK (catch_up IN ('none', 'one', 'all'))
);
