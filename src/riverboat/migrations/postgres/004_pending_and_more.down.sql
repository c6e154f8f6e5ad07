ALTER TABLE <schema>river_leader
    ALTER COLUMN name DROP DEFAULT,
    DROP CONSTRAINT name_length,
    ADD CONSTRAINT name_length CHECK (char_length(name) > 0 AND char_length(name) < 128);

DROP TABLE <schema>river_queue;

CREATE OR REPLACE FUNCTION <schema>river_job_notify() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.state = 'available' THEN
        PERFORM pg_notify('river_insert', json_build_object('queue', NEW.queue)::text);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER river_notify
    AFTER INSERT ON <schema>river_job
    FOR EACH ROW
    EXECUTE FUNCTION <schema>river_job_notify();

ALTER TABLE <schema>river_job DROP CONSTRAINT finalized_or_finalized_at_null;
ALTER TABLE <schema>river_job ADD CONSTRAINT finalized_or_finalized_at_null
    CHECK ((state IN ('cancelled', 'completed', 'discarded') AND finalized_at IS NOT NULL) OR finalized_at IS NULL);

-- Postgres cannot remove an enum value, and rows may already use 'pending'.

ALTER TABLE <schema>river_job ALTER COLUMN metadata DROP DEFAULT;
ALTER TABLE <schema>river_job ALTER COLUMN metadata DROP NOT NULL;
ALTER TABLE <schema>river_job ALTER COLUMN args DROP NOT NULL;
