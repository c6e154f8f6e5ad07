-- Older clients could leave args or metadata NULL; backfill before tightening. args
-- gets its default only for the backfill, so that inserts must always provide it.
ALTER TABLE <schema>river_job ALTER COLUMN args SET DEFAULT '{}';
UPDATE <schema>river_job SET args = '{}' WHERE args IS NULL;
ALTER TABLE <schema>river_job ALTER COLUMN args SET NOT NULL;
ALTER TABLE <schema>river_job ALTER COLUMN args DROP DEFAULT;

ALTER TABLE <schema>river_job ALTER COLUMN metadata SET DEFAULT '{}';
UPDATE <schema>river_job SET metadata = '{}' WHERE metadata IS NULL;
ALTER TABLE <schema>river_job ALTER COLUMN metadata SET NOT NULL;

-- A value added in this transaction cannot be used until it commits, which is one
-- reason every version runs in a transaction of its own.
ALTER TYPE <schema>river_job_state ADD VALUE IF NOT EXISTS 'pending' AFTER 'discarded';

ALTER TABLE <schema>river_job DROP CONSTRAINT finalized_or_finalized_at_null;
ALTER TABLE <schema>river_job ADD CONSTRAINT finalized_or_finalized_at_null CHECK (
    (finalized_at IS NULL AND state NOT IN ('cancelled', 'completed', 'discarded'))
    OR (finalized_at IS NOT NULL AND state IN ('cancelled', 'completed', 'discarded'))
);

DROP TRIGGER river_notify ON <schema>river_job;
DROP FUNCTION <schema>river_job_notify();

CREATE TABLE <schema>river_queue (
    name text PRIMARY KEY NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    paused_at timestamptz,
    updated_at timestamptz NOT NULL
);

-- One leadership row per schema, always named 'default'.
ALTER TABLE <schema>river_leader
    ALTER COLUMN name SET DEFAULT 'default',
    DROP CONSTRAINT name_length,
    ADD CONSTRAINT name_length CHECK (name = 'default');
